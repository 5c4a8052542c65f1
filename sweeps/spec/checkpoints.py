"""The spec's `checkpoints`: how many of a sweep's checkpoints stay on disk (or in gs://).

No `checkpoints` block keeps today's behaviour: each lane run keeps its
`execution.keep_checkpoints` latest (Ray's CheckpointConfig) and the sweep deletes nothing.
A block turns on the sweep's own retention (sweeps/driver/retention.py), whose defaults bound
the pile the way Determined's `save_experiment_best: 3` / `save_trial_latest: 1` do."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sweeps.spec.params import _Model


class Checkpoints(_Model):
    """Sweep-wide checkpoint retention, applied after each trial ends and at the sweep's end."""

    # The best K complete trials keep checkpoints (None: every complete trial).
    keep_best_trials: int | None = Field(3, ge=1, le=1_000_000)
    # The newest N checkpoints of each kept trial (its latest is always among them).
    keep_latest_per_trial: int = Field(1, ge=1, le=1_000_000)
    # Pruned trials' checkpoints: deleted, or kept (each its newest N).
    pruned: Literal["delete", "keep"] = "delete"


def check_checkpoints(spec: Any) -> Any:
    """The Spec's check: ranking trials for `keep_best_trials` needs one objective."""
    c = spec.checkpoints
    if c is not None and spec.objectives and "keep_best_trials" in c.model_fields_set:
        if c.keep_best_trials is not None:
            raise ValueError(
                "checkpoints.keep_best_trials needs a single objective: a multi-objective "
                "sweep keeps every complete trial's checkpoints (leave it out)"
            )
    return spec
