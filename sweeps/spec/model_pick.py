"""Which of a trial's checkpoints becomes its model (`tracking.model`), as pure functions.

`best` keeps the weights of the epoch whose report had the best objective, as Ray Train's
`CheckpointConfig(checkpoint_score_attribute=...)` and Determined's best checkpoint do; `last`
keeps the weights the trial ended with. Unset, it is `best` wherever the built-in trainer can
keep that epoch (one objective, reported each epoch), else `last`; asking for `best` where no
epoch can be picked is a spec error, not a silent `last`.
"""

from __future__ import annotations

from typing import Any

from sweeps.common import names
from sweeps.common.errors import SpecError


def _why_not_best(spec: Any) -> str | None:
    """Pure: why the trial's best epoch cannot be its model, or None when it can."""
    t = spec.trainer
    if t.entrypoint is not None or t.command_line is not None:
        return "your code hands back its own model at its end; use tracking.model: last"
    if spec.multi_objective:
        return "several objectives have no single best epoch; use tracking.model: last"
    metric = spec.objective_list()[0].metric
    if metric not in names.TRAINER_EPOCH_METRICS:
        return f"'{metric}' is not reported each epoch; use tracking.model: last"
    return None


def model_pick(spec: Any) -> tuple[str, str] | None:
    """Pure: (objective metric, direction) to pick the trial's model by, or None: the last
    weights (the spec says `last`, no model is logged, or no epoch can be picked)."""
    tr = spec.tracking
    if not tr.log_models or tr.model == "last" or _why_not_best(spec) is not None:
        return None
    o = spec.objective_list()[0]
    return o.metric, o.direction


def check_model_pick(spec: Any) -> None:
    """`tracking.model: best`, asked for explicitly, must be something the sweep can do."""
    if spec.tracking.model is None:
        return
    if not spec.tracking.log_models:
        raise SpecError("tracking.model: no model is logged (tracking.log_models is false)")
    why = _why_not_best(spec) if spec.tracking.model == "best" else None
    if why:
        raise SpecError(f"tracking.model: best needs the built-in trainer's epochs: {why}")
