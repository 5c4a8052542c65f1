"""A sweep's plan: its spec resolved once into the typed settings each part is given.

`assemble` makes the plan and hands each part its slice: the lanes get a `LanePlan` (worker
shape, the key that says which warm lanes can serve the sweep, what they warm up, restart and
recycle policies), the trial book gets `TrainerSettings` (what every Assignment carries).
Nothing downstream reads those spec fields again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sweeps.common import paths
from sweeps.contracts.protocol import TrainerSettings, WarmUp
from sweeps.driver.retainer import lane_keep
from sweeps.driver.trial_config import trainer_settings, warm_up_settings
from sweeps.execution import cluster
from sweeps.execution.lane import LaneShape
from sweeps.execution.pool import RecyclePolicy
from sweeps.spec import Spec


@dataclass(frozen=True)
class LanePlan:
    """What every lane of the sweep shares."""

    shape: LaneShape
    key: str  # shape | code | storage: a warm lane serves another sweep only if all match
    storage_root: str  # where trials' checkpoints go
    warm_up: WarmUp
    max_failures: int  # worker-group restarts a trial survives
    keep_checkpoints: int | None  # None: Ray keeps all (the sweep's `checkpoints:` decides)
    recycle: RecyclePolicy
    want: int  # lanes to start: the sweep's parallelism, at most its trial budget
    image: str | None = None
    start_timeout_s: float = 60.0  # how long a lane's workers may wait to be placed


@dataclass(frozen=True)
class Plan:
    spec: Spec
    storage_url: str  # the Optuna storage
    trainer: TrainerSettings
    lanes: LanePlan


def make_plan(spec: Spec, function: dict[str, Any] | None = None) -> Plan:
    """Resolve the spec once. `function`: a function handed to `sweeps.run`, packed by
    `sweeps.notebook.pack`, run in place of the spec's trainer."""
    r, e = spec.resources, spec.execution
    trainer = trainer_settings(spec, function)
    storage_root = paths.checkpoint_root()
    shape = LaneShape.of(r.workers, r.cpus_per_worker, r.gpus_per_worker, r.placement)
    keep = lane_keep(spec, e.keep_checkpoints)
    lanes = LanePlan(
        shape=shape,
        # A warm lane's Ray run keeps its first sweep's count of checkpoints: it serves only a
        # sweep that keeps as many (PBT keeps all of its own; `checkpoints:` decides itself).
        key=cluster.lane_key(spec, shape, storage_root, trainer.callable_digest)
        + f"|keep-{'all' if keep is None else keep}",
        storage_root=storage_root,
        warm_up=warm_up_settings(spec, trainer),
        max_failures=r.max_failures,
        keep_checkpoints=keep,
        recycle=RecyclePolicy(
            after_trials=1 if e.mode == "isolated" else e.recycle_after_trials,
            rss_growth=e.recycle_rss_growth,
        ),
        want=min(spec.budget.parallel, spec.budget.trials),
        image=r.image,
        start_timeout_s=e.lane_start_timeout_s,
    )
    return Plan(spec, paths.storage_url(spec.storage), trainer, lanes)
