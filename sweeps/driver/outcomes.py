"""Pure rules for a trial's record and result: the record of a sampled trial, which metrics
the objectives read, and the objective values of a trial that ended."""

from __future__ import annotations

import math
from typing import Any

from sweeps.common import names
from sweeps.contracts.protocol import TrialResult
from sweeps.contracts.records import TrialRecord
from sweeps.driver.trial_config import trial_config, trial_resources, trial_seed
from sweeps.execution.lane import LaneShape
from sweeps.spec import COMPUTED_METRICS, Spec


def new_record(
    spec: Spec,
    number: int,
    trial_id: int,
    params: dict[str, Any],
    attrs: dict[str, Any],
    now: float,
) -> TrialRecord:
    """Pure: the record of a trial just sampled (`attrs`: its Optuna user attributes, which a
    re-queued trial brings with it)."""
    rec = TrialRecord(
        number=number,
        trial_id=trial_id,
        params=params,
        config=trial_config(spec, params),
        seed=trial_seed(spec, number),
        asked_at=now,
        assigned_at=now,
        requeued_from=attrs.get(names.REQUEUED_FROM),
        resumed_from_trial=attrs.get(names.RESUMED_FROM_TRIAL),
        resume_from=attrs.get(names.RESUME_CHECKPOINT),
        attempt=int(attrs.get(names.ATTEMPT, 1)),
        retry_of=attrs.get(names.RETRY_OF),
        extends=attrs.get(names.EXTENDS),
        extends_run=attrs.get(names.EXTENDS_RUN),
        **trial_resources(spec, params),
    )
    if attrs.get(names.EXTEND_EPOCHS):  # `extend`: its source's epochs and N more
        rec.config["epochs"] = int(attrs[names.EXTEND_EPOCHS])
    placement = spec.resources.placement
    rec.shape = LaneShape.of(rec.workers, rec.cpus_per_worker, rec.gpus_per_worker, placement)
    return rec


def reported_objectives(spec: Spec) -> list[str]:
    """Pure: the objectives the training code reports (the others the driver computes)."""
    return [o.metric for o in spec.objective_list() if o.metric not in COMPUTED_METRICS]


def can_prune(spec: Spec, study: Any) -> bool:
    """Whether a report's answer can prune: a single objective the code reports, and a pruner."""
    from optuna.pruners import NopPruner

    nop = isinstance(getattr(study, "pruner", None), NopPruner)
    return bool(reported_objectives(spec)) and not (spec.multi_objective or nop)


def missing(metric: str, metrics: dict[str, float]) -> str:
    """The error of a trial whose objective metric never came."""
    return (
        f"objective metric '{metric}' is not among the reported metrics "
        f"({', '.join(sorted(metrics)) or 'none'})"
    )


def objective_values(
    spec: Spec, rec: TrialRecord, result: TrialResult, extra: dict[str, float]
) -> list[float] | str:
    """Pure: the values Optuna is told, or the error when one is missing or not finite."""
    metrics = {**rec.last_metrics, **result.metrics}
    computed = {
        "cost_usd": extra["cost_usd"],
        "gpu_hours": extra["gpu_hours"],
        "train_seconds": extra["train_seconds"],
        "param_count": metrics.get("param_count"),
    }
    values = []
    for o in spec.objective_list():
        v = metrics.get(o.metric, computed.get(o.metric))
        if v is None or not math.isfinite(v):
            return missing(o.metric, metrics)
        values.append(float(v))
    return values


def states() -> Any:
    """Optuna's TrialState, imported when a trial first ends."""
    import optuna

    return optuna.trial.TrialState
