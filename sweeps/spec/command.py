"""Program mode's command line: W&B's macros, checked when the spec is read, expanded on a worker.

A command is a list of strings, e.g. `["${interpreter}", "train.py", "${args}", "--epochs=5"]`.
The macros are W&B sweeps' (so a W&B `command:` runs unchanged) plus `${trial_dir}`:

- `${env}`: `/usr/bin/env`; `${interpreter}`: the worker's Python; `${program}`: `trainer.program`;
- `${args}` (`--name=value` each), `${args_no_hyphens}` (`name=value`), `${args_no_boolean_flags}`
  (`--flag` for True, nothing for False): several arguments, so each must be an item of its own;
- `${args_json}` (the params as one JSON argument), `${args_json_file}` (a file holding them);
- `${envvar:NAME}`: the worker's environment variable NAME; `${trial_dir}`: the trial's folder.

Without an args macro in the command, the params are appended as `--name=value`. Pure functions:
the spec validator calls :func:`check_command`, `sweeps.worker.program` calls :func:`expand`.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeps.common.errors import SpecError

MACROS = (
    "env",
    "interpreter",
    "program",
    "args",
    "args_no_hyphens",
    "args_no_boolean_flags",
    "args_json",
    "args_json_file",
    "trial_dir",
    "envvar:NAME",
)
# These expand to several arguments (or none), so they cannot sit inside a longer string.
LIST_MACROS = ("args", "args_no_hyphens", "args_no_boolean_flags")
# Any of these places the params; without one they are appended as `--name=value`.
ARGS_MACROS = (*LIST_MACROS, "args_json", "args_json_file")
# W&B's default command is `${env} ${interpreter} ${program} ${args}`; env adds nothing here.
DEFAULT_COMMAND = ("${interpreter}", "${program}", "${args}")
_MACRO = re.compile(r"\$\{([^}]*)\}")
_ENVVAR = re.compile(r"envvar:([A-Za-z_]\w*)")


def macros_in(item: str) -> list[str]:
    return _MACRO.findall(item)


def check_command(command: list[str], program: str | None = None) -> None:
    """Every macro is known and placed where it can expand; `${program}` has a program."""
    if not command:
        raise SpecError("trainer.command: must not be empty")
    for i, item in enumerate(command):
        where = f"trainer.command[{i}]"
        if "${" in _MACRO.sub("", item):
            raise SpecError(f"{where}: unterminated macro in {item!r}")
        for name in macros_in(item):
            if name.startswith("envvar:"):
                if not _ENVVAR.fullmatch(name):
                    raise SpecError(f"{where}: ${{{name}}}: expected ${{envvar:NAME}}")
                continue
            if name not in MACROS:
                known = ", ".join("${" + m + "}" for m in MACROS)
                raise SpecError(f"{where}: unknown macro ${{{name}}} (known: {known})")
            if name in LIST_MACROS and item != "${" + name + "}":
                raise SpecError(
                    f"{where}: ${{{name}}} expands to several arguments: make it an item of its own"
                )
            if name == "program" and not program:
                raise SpecError("trainer.program: required when trainer.command uses ${program}")


def flags(params: Mapping[str, Any], style: str = "args") -> list[str]:
    """The params as arguments, in W&B's formats (values as Python prints them)."""
    if style == "args_no_hyphens":
        return [f"{k}={v}" for k, v in params.items()]
    if style == "args_no_boolean_flags":
        out = []
        for k, v in params.items():
            if isinstance(v, bool):
                out += [f"--{k}"] if v else []
            else:
                out.append(f"--{k}={v}")
        return out
    return [f"--{k}={v}" for k, v in params.items()]


def expand(
    command: list[str],
    params: Mapping[str, Any],
    *,
    program: str | None = None,
    interpreter: str,
    args_json_file: str = "",
    trial_dir: str = "",
    environ: Mapping[str, str] | None = None,
) -> list[str]:
    """The argv a worker runs for `params` (the command must have passed :func:`check_command`)."""
    env = os.environ if environ is None else environ
    single = {
        "env": "/usr/bin/env",
        "interpreter": interpreter,
        "program": program or "",
        "args_json": json.dumps(dict(params)),
        "args_json_file": args_json_file,
        "trial_dir": trial_dir,
    }

    def one(m: re.Match[str]) -> str:
        name = m.group(1)
        if name.startswith("envvar:"):
            return env.get(name.partition(":")[2], "")
        return single[name]

    out: list[str] = []
    placed = False
    for item in command:
        names = macros_in(item)
        placed = placed or any(n in ARGS_MACROS for n in names)
        if names and names[0] in LIST_MACROS:
            out += flags(params, names[0])
        else:
            out.append(_MACRO.sub(one, item))
    return out if placed else out + flags(params)


def _is_macro(item: str) -> bool:
    return bool(macros_in(item))


def missing_files(command: list[str], program: str | None, code_dir: str | Path) -> list[str]:
    """What the command needs that is not there, each as 'NAME not found in DIR' (empty: fine).

    Checked: `trainer.program` (or the command's first `*.py` item), the module after `-m`, and
    the executable when it is not a macro (a path relative to code_dir, or a name on PATH).
    """
    d = Path(code_dir)
    problems: list[str] = []
    uses_program = any("program" in macros_in(i) for i in command)
    script = program if (program and uses_program) else None
    if script is None:
        script = next((i for i in command if i.endswith(".py") and not _is_macro(i)), None)
    if script is not None and not (d / script).is_file():
        problems.append(f"{script} not found in {d}")
    if "-m" in command[:-1]:
        module = command[command.index("-m") + 1]
        if not _is_macro(module) and not _module_exists(module, d):
            problems.append(f"module {module} not found in {d}")
    exe = command[0]
    if not _is_macro(exe):
        if os.sep in exe:
            if not (d / exe).exists():
                problems.append(f"{exe} not found in {d}")
        elif shutil.which(exe) is None:
            problems.append(f"{exe} not found on PATH")
    return problems


def _module_exists(module: str, code_dir: Path) -> bool:
    rel = Path(*module.split("."))
    if (code_dir / rel.with_suffix(".py")).is_file() or (code_dir / rel / "__main__.py").is_file():
        return True
    top = module.split(".")[0]
    if (code_dir / top).exists() or (code_dir / f"{top}.py").exists():
        return False  # the package is there but not the module: python -m would fail
    # An installed module (`-m pkg.tool`): the top-level package is enough to go on.
    return importlib.machinery.PathFinder.find_spec(top) is not None
