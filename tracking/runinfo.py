"""What a sweep's parent run records about it: its settings as params, and the code and library
versions it ran with as tags. Pure, apart from asking git for the commit."""

from __future__ import annotations

import os
import platform
import subprocess
from typing import Any

from sweeps.common import names
from sweeps.common.redact import redact_mapping


def sweep_params(spec: Any) -> dict[str, Any]:
    """The sweep's settings as the parent run's params."""
    builtin = not spec.trainer.entrypoint
    params = {
        "sampler": spec.sampler.name,
        "sampler.seed": spec.sampler.seed,
        "pruner": spec.pruner.name,
        "objective": ",".join(f"{o.metric}:{o.direction}" for o in spec.objective_list()),
        "budget.trials": spec.budget.trials,
        "budget.parallel": spec.budget.parallel,
        "budget.timeout_s": spec.budget.timeout_s,
        "budget.max_failed_trials": spec.budget.max_failed_trials,
        "execution.mode": spec.execution.mode,
        "trainer.model": spec.trainer.model if builtin else "-",
        "trainer.dataset": spec.trainer.dataset if builtin else "-",
        "trainer.entrypoint": spec.trainer.entrypoint or "builtin",
        "resources.workers": spec.resources.workers,
        "resources.machine_type": spec.resources.machine_type,
        "resources.preemptible": spec.resources.preemptible,
    }
    for k, v in redact_mapping(spec.sampler.options, "sampler.options").items():
        params[f"sampler.options.{k}"] = v
    for k, v in redact_mapping(spec.pruner.options, "pruner.options").items():
        params[f"pruner.options.{k}"] = v
    return params


def code_tags(code_dir: str | None) -> dict[str, str]:
    """Code and library versions: the git commit of the user's code when there is one."""
    tags = {names.PYTHON: platform.python_version()}
    try:
        from importlib.metadata import version

        for pkg in ("torch", "ray", "optuna", "mlflow", "sweeps"):
            tags[names.version(pkg)] = version(pkg)
    except Exception:
        pass
    try:
        commit = subprocess.run(
            ["git", "-C", code_dir or os.getcwd(), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if commit.returncode == 0:
            tags["mlflow.source.git.commit"] = commit.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags
