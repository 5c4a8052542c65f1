"""The best epoch's weights, kept on rank 0 for the trial's model (`tracking.model: best`).

Like Ray Train's `CheckpointConfig(checkpoint_score_attribute=..., checkpoint_score_order=...)`
and Determined's best checkpoint: each epoch's report is scored on the sweep's objective, and
the weights of the best one so far are copied to host memory (only when they improve, and only
on rank 0: DDP keeps every rank's weights equal). At the trial's end they are loaded back into
the model before it is packaged, so the logged model is that epoch's, not the last one's.

The copy travels in each checkpoint as `best.pt` (beside the loop's `state.pt`), so a trial
resumed after a lost worker still knows its best epoch before the restart.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from torch import nn

FILE = "best.pt"


def better(value: float, than: float | None, direction: str) -> bool:
    """Pure: whether `value` beats the best so far (ties keep the earlier epoch)."""
    if not math.isfinite(value):
        return False
    if than is None:
        return True
    return value > than if direction == "maximize" else value < than


class BestKeeper:
    """Rank 0's copy of the weights of the best report so far; inert when `metric` is None."""

    def __init__(self, metric: str | None, direction: str = "maximize", rank: int = 0) -> None:
        self.metric = metric if rank == 0 else None
        self.direction = direction
        self.value: float | None = None
        self.step: int | None = None
        self.metrics: dict[str, float] = {}
        self.weights: dict[str, torch.Tensor] | None = None

    def offer(self, metrics: dict[str, float], model: nn.Module, step: int) -> bool:
        """Scores the report at `step`; keeps a host copy of `model`'s weights if it is the
        best so far. Returns whether it was."""
        if self.metric is None or self.metric not in metrics:
            return False
        value = float(metrics[self.metric])
        if not better(value, self.value, self.direction):
            return False
        self.value, self.step, self.metrics = value, step, dict(metrics)
        self.weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        return True

    def save(self, folder: str) -> None:
        """Into a checkpoint folder being written: the best epoch, with its weights."""
        if self.weights is None:
            return
        state = {"step": self.step, "value": self.value, "metrics": self.metrics}
        torch.save({**state, "weights": self.weights}, os.path.join(folder, FILE))

    def resume(self, folder: str | None) -> None:
        """From the checkpoint the trial resumes from, if it holds a best epoch."""
        path = os.path.join(folder, FILE) if folder and self.metric else None
        if path is None or not os.path.exists(path):
            return
        state = torch.load(path, map_location="cpu", weights_only=True)
        self.value, self.step = float(state["value"]), int(state["step"])
        self.metrics, self.weights = dict(state["metrics"]), state["weights"]

    def restore(self, model: nn.Module) -> dict[str, Any] | None:
        """Loads the best weights into `model` (the trial is over); what the result says about
        them: {"step", "metrics"}, or None when nothing was kept (the last weights stay)."""
        if self.weights is None:
            return None
        model.load_state_dict(self.weights)
        return {"step": self.step, "metrics": dict(self.metrics)}
