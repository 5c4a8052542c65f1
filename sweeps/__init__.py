"""sweeps: self-hosted hyperparameter sweeps for PyTorch.

For training code (on Ray Train workers): `report`, `get_checkpoint`, `context`, `TrialPruned`,
and `log`, `log_artifact`, `log_figure` for more of the trial's record. From a notebook or a
script: `sweeps.run(spec, train=fn)` sweeps a Python function, `sweeps.optimize(objective, ...)`
runs an Optuna objective as `study.optimize` would.
Kept import-light: nothing heavy loads until a function is called.
"""

from typing import Any

from sweeps.worker.runtime import TrialPruned, context, get_checkpoint, report
from sweeps.worker.userlog import log, log_artifact, log_figure

__all__ = [
    "TrialPruned",
    "context",
    "get_checkpoint",
    "log",
    "log_artifact",
    "log_figure",
    "optimize",
    "report",
    "run",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """`sweeps.run(spec, train=fn)` is `sweeps.notebook.sweep`, `sweeps.optimize` is
    `sweeps.objectives.optimize`, each imported on first use."""
    if name == "run":
        from sweeps.notebook import sweep

        return sweep
    if name == "optimize":
        from sweeps.objectives import optimize

        return optimize
    raise AttributeError(f"module 'sweeps' has no attribute {name!r}")
