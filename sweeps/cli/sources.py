"""Where `run` and the `import-*` commands get a spec from: a spec file, a W&B sweep config, or a
legacy AI Platform job (its config file and gcloud's flags). Notes on what an importer
approximated go to stderr."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sweeps.cli._app import err, load_noting
from sweeps.common.errors import SpecError, one_line

if TYPE_CHECKING:
    from sweeps.spec import Spec

IGNORED = {
    "--region": "trials run on this Ray cluster",
    "--runtime-version": "trials run with this Python environment",
    "--python-version": "trials run with this Python environment",
}


def aiplatform_spec(
    ctx: typer.Context,
    spec: Path | None,
    aiplatform: str,
    config: Path | None,
    where: tuple[Path | None, str | None, str | None, bool],
    gcloud: dict[str, str | None],
    noted: dict[str, str | None],
    overrides: list[str],
) -> Spec:
    """The spec of `run --aiplatform`: a legacy job's config file, or a gcloud JOB with --config.
    `where`: --package-path, --module-name, --name and --cluster-python."""
    from sweeps.spec import spec_from_dict

    package_path, module_name, name, cluster_python = where

    # After `--` everything is the module's; Click hands the first word to SPEC.
    user_args = ([str(spec)] if spec is not None else []) + list(ctx.args)
    job, cfg = job_and_config(aiplatform, config)
    check_hypertune()
    raw, notes = aiplatform_raw(
        cfg, job, package_path, module_name, name, user_args, gcloud, cluster_python
    )
    if raw["trainer"]["params"].get("package_archive"):
        check_image_runs(raw["resources"]["image"])
    for flag, value in noted.items():
        if value is not None:
            notes.append(f"{flag} {value}: noted, not used ({IGNORED[flag]})")
    print_notes(notes)
    return spec_from_dict(raw, overrides)


def spec_or_wandb(
    extra_args: list[str],
    spec: Path | None,
    wandb: Path | None,
    code_dir: Path | None,
    config: Path | None,
    name: str | None,
    overrides: list[str],
) -> Spec:
    """The spec of `run` without --aiplatform: a W&B sweep config with --wandb, else SPEC."""
    from sweeps.spec import spec_from_dict

    if extra_args:
        raise SpecError(f"unknown arguments: {' '.join(extra_args)}")
    if wandb is not None:
        if spec is not None:
            raise SpecError("--wandb: takes the place of SPEC; give one or the other")
        raw, notes = wandb_raw(wandb, code_dir, name)
        print_notes(notes)
        return spec_from_dict(raw, overrides)
    if spec is None:
        raise SpecError("SPEC: a spec file is required (or --aiplatform CONFIG)")
    if config is not None:
        raise SpecError("--config: only with --aiplatform (gcloud's job config)")
    return load_noting(spec, overrides, name)


def job_and_config(arg: str, config: Path | None) -> tuple[str | None, Path]:
    """gcloud's JOB and its --config FILE, or (no --config) the config file alone."""
    job, cfg = (arg, config) if config is not None else (None, Path(arg))
    if not cfg.is_file():
        hint = "" if config is not None else " (a gcloud JOB name needs --config FILE)"
        raise SpecError(f"AI Platform config not found: {cfg}{hint}")
    return job, cfg


# Paths an imported spec holds: written relative to the spec file's folder, which is what
# `load_spec` resolves them from, so the spec and its code move together.
_PATHS = (("code_dir",), ("params", "package_path"))


def portable(raw: dict[str, Any], folder: Path) -> dict[str, Any]:
    """`raw` with its trainer's folders relative to `folder` (where the spec is written)."""
    import copy
    import os

    raw = copy.deepcopy(raw)
    for keys in _PATHS:
        node = raw.get("trainer") or {}
        for k in keys[:-1]:
            node = node.get(k) or {}
        value = node.get(keys[-1])
        if isinstance(value, str) and value and os.path.isabs(value):
            node[keys[-1]] = os.path.relpath(value, folder.resolve())
    return raw


def _stdout_folder() -> Path:
    """The folder of the file stdout is redirected to (`> specs/x.yaml`, read from Linux's
    /proc), else the current folder: where the printed spec's folders are relative to."""
    import os
    import stat
    import sys

    try:
        fd = sys.stdout.fileno()
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if os.path.isabs(target) and os.stat(target).st_ino == st.st_ino:
                return Path(target).parent
    except (OSError, ValueError, AttributeError):
        pass  # not a file, or no /proc: the current folder
    return Path.cwd()


def emit_spec(raw: dict[str, Any], out: Path | None) -> None:
    """An imported spec as YAML: into `out` with its folders relative to out's folder, or on
    stdout relative to the file stdout goes to (else the current folder), so that the spec
    file and its code move together. Ends in a newline."""
    import sys

    import yaml

    folder = out.parent if out else _stdout_folder()
    text = yaml.safe_dump(portable(raw, folder), sort_keys=False)
    text += "" if text.endswith("\n") else "\n"
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text)
    except OSError as e:
        raise SpecError(f"--out {out}: cannot write: {e.strerror or e}") from None
    err.print(f"wrote {out}", highlight=False, markup=False)


def print_notes(notes: list[str]) -> None:
    """What an importer approximated or ignored, on stderr (stdout may carry --json)."""
    for n in notes:
        err.print(f"note: {n}", highlight=False, markup=False)


def check_image_runs(image: str) -> None:
    """An image job's package runs in the image, which Ray starts with podman: where this
    machine runs the trials and has none, say so now, with the way to run it without."""
    import os
    import shutil

    if shutil.which("podman") is None and not os.environ.get("RAY_ADDRESS"):
        raise SpecError(
            f"--master-image-uri {image}: podman, which runs the image's trials, is not "
            "installed here; --cluster-python runs the package on this cluster's own Python"
        )


def check_hypertune() -> None:
    """Legacy modules report through cloudml-hypertune: say which extra installs it, up front."""
    import importlib.util
    import os

    from sweeps.common.extras import install_hint

    if importlib.util.find_spec("hypertune") is None:
        msg = f"cloudml-hypertune is not installed: {install_hint('aiplatform')}"
        if os.environ.get("RAY_ADDRESS"):
            err.print(f"note: {msg} (needed on the cluster's workers)", markup=False)
        else:
            raise SpecError(f"--aiplatform: {msg}")


def aiplatform_raw(
    config: Path,
    job: str | None,
    package_path: Path | None,
    module_name: str | None,
    name: str | None,
    user_args: list[str],
    gcloud: dict[str, str | None],
    cluster_python: bool = False,
) -> tuple[dict[str, Any], list[str]]:
    """The native spec (raw dict) of a legacy job, as `run --aiplatform` and
    `import-aiplatform` both read it."""
    from sweeps.importers.aiplatform import (
        apply_gcloud_flags,
        image_uri,
        load_config,
        package_root,
        sweep_name,
        to_spec,
    )

    module = module_name or "trainer.task"
    data = apply_gcloud_flags(load_config(config), **gcloud)
    # A custom container holds the module: no host package to find (gcloud needs none either).
    image = image_uri(data) and package_path is None
    root = Path.cwd() if image else package_root(package_path, module, config)
    return to_spec(
        data,
        name=name or sweep_name(data, root, module, job),
        package_path=None if image else str(root),
        module_name=module,
        user_args=user_args,
        cluster_python=cluster_python,
    )


def wandb_raw(
    config: Path, code_dir: Path | None, name: str | None
) -> tuple[dict[str, Any], list[str]]:
    from sweeps.importers.wandb import load_config, to_spec

    folder = code_dir if code_dir is not None else config.parent
    if not folder.is_dir():
        raise SpecError(f"--code-dir: folder not found: {folder}")
    return to_spec(
        load_config(config),
        name=name,
        fallback_name=config.stem,
        code_dir=str(folder.resolve()),
    )


def read_enqueue(path: Path) -> list[dict[str, Any]]:
    """`--enqueue FILE`: a JSON object or a list of them, the params to try first."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise SpecError(f"--enqueue {path}: {one_line(e, 2000)}") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise SpecError(f"--enqueue {path}: expected a JSON object or a list of objects")
    return data
