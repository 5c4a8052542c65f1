"""sweeps: self-hosted hyperparameter sweeps for PyTorch.

For training code (on Ray Train workers): `report`, `get_checkpoint`, `context`, `TrialPruned`,
and `log`, `log_artifact`, `log_figure` for more of the trial's record. From a notebook or a
script: `sweeps.run(spec, train=fn)` sweeps a Python function.
Kept import-light: nothing heavy loads until a function is called.
"""

from typing import Any

from sweeps.runtime import TrialPruned, context, get_checkpoint, report
from sweeps.userlog import log, log_artifact, log_figure

__all__ = [
    "TrialPruned",
    "context",
    "get_checkpoint",
    "log",
    "log_artifact",
    "log_figure",
    "report",
    "run",
]
__version__ = "0.1.0"


def run(spec: Any, *, train: Any = None, **kw: Any) -> Any:
    """Run a sweep from Python: `spec` is a Spec, a dict or a YAML path; `train`, a function
    to sweep instead of the spec's trainer (Ray ships it to the workers). Returns a
    `sweeps.notebook.SweepResult` (`.best`, `.trials_dataframe()`)."""
    from sweeps.notebook import run as _run

    return _run(spec, train=train, **kw)
