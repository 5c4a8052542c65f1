"""The README's and docs' recipes hold as written: every full spec in a ```yaml block validates,
every `sweeps` command line in a code block names a real command, real options and files that
exist, and every spec file a `sweeps run`/`submit`/`validate` line names validates.

Every program a command line runs exists after the README's set-up, and the venv's programs are
written one way: `.venv/bin/X` until the doc activates the venv (`. .venv/bin/activate`), bare
`X` after it.

Running every recipe would take the suite's whole budget; the runs themselves are tested where
their features are (the quickstart, W&B, AI Platform, Ray Train, Optuna, the registry; the
registry's test runs docs/REGISTRY.md's serve recipe as written, through tests/doc_blocks.py).
"""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
import typer
import yaml
from conftest import ROOT
from doc_blocks import ACTIVATE, BLOCK, DOCS, command_lines, simple_commands
from doc_blocks import blocks as _blocks

from sweeps.cli import app
from sweeps.spec import load_spec, spec_from_dict

COMMANDS = typer.main.get_command(app).commands  # type: ignore[attr-defined]


def _specs() -> list[tuple[str, dict]]:
    found = []
    for doc in DOCS:
        for i, body in enumerate(_blocks(doc, "yaml")):
            raw = yaml.safe_load(body)
            if isinstance(raw, dict) and "objective" in raw:  # a whole spec, not a fragment
                found.append((f"{doc.name}#yaml{i}", raw))
    return found


@pytest.mark.parametrize(("where", "raw"), _specs(), ids=[w for w, _ in _specs()])
def test_every_spec_in_the_docs_validates(where, raw):
    spec_from_dict(raw)


def _command_lines() -> list[tuple[str, Path, list[str]]]:
    """(where, folder it runs in, argv after `sweeps`) for each command line in a code block."""
    found = []
    for doc in DOCS:
        for kind, body in BLOCK.findall(doc.read_text()):
            cwd = ROOT
            for line in body.replace("\\\n", " ").splitlines():
                if kind not in ("bash", "sh") and not line.startswith("$ "):
                    continue  # output, not a command
                line = line.removeprefix("$ ").strip()
                if line.startswith("cd "):
                    cwd = (cwd / line[3:].strip()).resolve()
                    continue
                argv = shlex.split(line, comments=True) if line else []
                for i, word in enumerate(argv):
                    # `docker compose run sweeps sweeps ls`: the service, then the command
                    if word in ("sweeps", ".venv/bin/sweeps") and argv[i + 1 : i + 2] not in (
                        [],
                        ["sweeps"],
                    ):
                        found.append((f"{doc.name}: {line}", cwd, argv[i + 1 :]))
                        break
    return found


def _check(cwd: Path, argv: list[str]) -> None:
    name = argv[0]
    assert name in COMMANDS, f"no command `sweeps {name}`"
    command = COMMANDS[name]
    options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    if hasattr(command, "commands"):  # a group: the next word is its subcommand
        return
    for word in argv[1:]:
        if word == "--":  # the user's own arguments follow
            break
        if word.startswith("-"):
            assert word.split("=")[0] in options, f"`sweeps {name}` has no option {word}"
        elif word.endswith((".yaml", ".yml", ".py", ".json")) and "/" in word:
            assert (cwd / word).exists(), f"{word}: not found (from {cwd.relative_to(ROOT)})"


LINES = _command_lines()


@pytest.mark.parametrize(("where", "cwd", "argv"), LINES, ids=[w for w, _, _ in LINES])
def test_every_sweeps_command_in_the_docs_exists_as_written(where, cwd, argv):
    _check(cwd, argv)


def test_the_spec_files_the_readme_runs_validate():
    runs = [
        (cwd, argv)
        for where, cwd, argv in LINES
        if where.startswith("README.md") and argv[0] in ("run", "submit", "validate")
    ]
    assert runs, "the README runs something"
    checked = 0
    for cwd, argv in runs:
        if any(a.startswith(("--wandb", "--aiplatform")) for a in argv):
            continue  # another tool's config: its importer's tests run it
        spec = next((a for a in argv[1:] if a.endswith((".yaml", ".yml"))), None)
        if spec:
            load_spec(cwd / spec)
            checked += 1
    assert checked, runs


def test_the_readme_starts_with_the_two_commands_for_a_fresh_machine():
    first = _blocks(ROOT / "README.md", "bash")[0].strip().splitlines()
    assert len(first) == 2, first
    assert first[0].endswith(".venv/bin/sweeps run conf/quickstart.yaml"), first[0]
    assert first[1].endswith(".venv/bin/pytest -q"), first[1]
    load_spec(ROOT / "conf" / "quickstart.yaml")


VENV_BIN = ROOT / ".venv" / "bin"
SHELL_BUILTINS = {".", "source", "cd", "export", "kill", "wait", "echo", "set", "unset"}
# installed as the doc that runs it says, not by the README's set-up
EXTERNAL = {"docker": "TEAM.md"}


def _venv_programs() -> set[str]:
    """What the README's set-up puts in .venv/bin; python3 is the system's, which makes it."""
    assert VENV_BIN.is_dir(), "the README's first line makes .venv"
    return {p.name for p in VENV_BIN.iterdir()} - {"python3"}


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_each_program_exists_and_the_venvs_are_written_one_way(doc):
    text = doc.read_text()
    venv = _venv_programs()
    problems = []
    activated = False
    for offset, line in command_lines(doc):
        activated = activated or bool(ACTIVATE.search(text[:offset]))
        for argv in simple_commands(line):
            prog = argv[0]
            if argv[:2] in ([".", ".venv/bin/activate"], ["source", ".venv/bin/activate"]):
                activated = True
            elif prog.startswith(".venv/bin/"):
                if not (ROOT / prog).exists():
                    problems.append(f"{line}: {prog} is not made by the README's set-up")
                if activated:
                    problems.append(f"{line}: the venv is active here: write {prog[10:]} bare")
            elif prog in venv:
                if not activated:
                    problems.append(f"{line}: bare {prog} before the venv is activated")
            elif not (
                prog in SHELL_BUILTINS or shutil.which(prog) or EXTERNAL.get(prog) == doc.name
            ):
                problems.append(f"{line}: no program {prog} on this machine")
    assert not problems, "\n".join(problems)


def test_the_one_way_check_catches_a_bare_command_before_activation(tmp_path, monkeypatch):
    """The check above on a README written as issue 29 found it: `.venv/bin/sweeps` first,
    bare `sweeps` later with no activation; and a `.venv/bin/` form after activating."""
    bad = tmp_path / "README.md"
    bad.write_text(
        "```bash\npython3 -m venv .venv && .venv/bin/sweeps run conf/quickstart.yaml\n```\n"
        "```\n$ sweeps ls\n```\n"
    )
    with pytest.raises(AssertionError, match="bare sweeps before the venv is activated"):
        test_each_program_exists_and_the_venvs_are_written_one_way(bad)
    bad.write_text("```bash\n. .venv/bin/activate\n.venv/bin/mlflow ui\n```\n")
    with pytest.raises(AssertionError, match="write mlflow bare"):
        test_each_program_exists_and_the_venvs_are_written_one_way(bad)
    good = "```bash\n. .venv/bin/activate\nsweeps ls && python -c 'print(1)' > x.txt\n```\n"
    bad.write_text(good)
    test_each_program_exists_and_the_venvs_are_written_one_way(bad)


def test_the_readme_activates_the_venv_before_its_bare_commands():
    text = (ROOT / "README.md").read_text()
    first_bare = min(
        off
        for off, line in command_lines(ROOT / "README.md")
        if any(c[0] in ("sweeps", "mlflow", "python") for c in simple_commands(line))
    )
    assert any(". .venv/bin/activate" == b.strip() for b in _blocks(ROOT / "README.md", "bash"))
    m = ACTIVATE.search(text)
    assert m and m.start() < first_bare


def test_the_cpu_only_recipe_pins_the_tested_torch_and_says_why_it_is_untested():
    """README and INSTALL.md give one CPU-only line, with constraints.txt's torch and
    torchvision; it cannot be tested here, and both say so (INSTALL.md says what was checked)."""
    text = (ROOT / "constraints.txt").read_text()
    pins = dict(re.findall(r"^(torch|torchvision)==(\S+)$", text, re.M))
    assert set(pins) == {"torch", "torchvision"}, pins
    for doc in (ROOT / "README.md", ROOT / "docs" / "INSTALL.md"):
        lines = [ln for b in _blocks(doc, "bash") for ln in b.splitlines() if "whl/cpu" in ln]
        assert len(lines) == 1, (doc.name, lines)
        argv = shlex.split(lines[0])
        assert argv[:2] == [".venv/bin/pip", "install"], argv
        assert f"torch=={pins['torch']}" in argv and f"torchvision=={pins['torchvision']}" in argv
        assert argv[argv.index("--index-url") + 1] == "https://download.pytorch.org/whl/cpu"
        assert "not tested" in doc.read_text(), doc.name
    install = " ".join((ROOT / "docs" / "INSTALL.md").read_text().split())
    for checked in ("torch-cpu", "torch-cpu-for-poetry", "2.13.0+cpu", "libcudnn.so.9"):
        assert checked in install, checked
