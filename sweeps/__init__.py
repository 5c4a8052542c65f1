"""sweeps: self-hosted hyperparameter sweeps for PyTorch.

For training code (on Ray Train workers): `report`, `get_checkpoint`, `context`, `TrialPruned`.
Kept import-light: nothing heavy loads until a function is called.
"""

from sweeps.runtime import TrialPruned, context, get_checkpoint, report

__all__ = ["TrialPruned", "context", "get_checkpoint", "report"]
__version__ = "0.1.0"
