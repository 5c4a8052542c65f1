"""Driver callbacks: how tracking and progress displays hang off the driver.

The driver calls these on its own thread, in order. Implementations that do slow I/O (MLflow)
queue the work and return at once; only :meth:`on_trial_start` may block briefly, because the
trial's run id must be linked into Optuna before the trial trains.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweeps.spec import Spec


@dataclass
class TrialRecord:
    """What the driver knows about one running trial."""

    number: int
    trial_id: int
    lane_id: str
    seq: int
    params: dict[str, Any]
    config: dict[str, Any]
    seed: int
    asked_at: float
    assigned_at: float
    startup_s: float = 0.0
    run_id: str | None = None
    restarts: int = 0
    last_step: int = 0
    last_metrics: dict[str, float] = field(default_factory=dict)
    prune_sent: bool = False
    cancel_sent: bool = False
    log: str = ""
    error: str | None = None
    trial: Any = None  # the optuna.Trial (ask/tell handle), driver-side only
    shape: Any = None  # the LaneShape this trial needs


@dataclass
class SweepContext:
    spec: Spec
    study_name: str
    storage_url: str
    started_at: float
    parent_run_id: str | None = None
    experiment_id: str | None = None
    requeued: list[int] = field(default_factory=list)
    warm_notes: list[str] = field(default_factory=list)


@dataclass
class SweepSummary:
    name: str
    state: str  # finished | stopped | interrupted | failed
    reason: str
    counts: dict[str, int]
    best_number: int | None
    best_value: float | None
    wall_s: float
    cost_usd: float
    gpu_hours: float


class DriverCallback:
    """No-op base; subclasses override what they need."""

    def on_sweep_start(self, ctx: SweepContext) -> None: ...

    def on_trial_start(self, ctx: SweepContext, t: TrialRecord) -> str | None:
        return None

    def on_epoch(
        self, ctx: SweepContext, t: TrialRecord, step: int, metrics: dict[str, float]
    ) -> None: ...

    def on_trial_restart(self, ctx: SweepContext, t: TrialRecord) -> None: ...

    def on_trial_end(
        self,
        ctx: SweepContext,
        t: TrialRecord,
        state: str,
        values: list[float] | None,
        result: dict[str, Any],
        extra: dict[str, float],
    ) -> None: ...

    def on_sweep_end(self, ctx: SweepContext, summary: SweepSummary) -> None: ...

    def close(self) -> None: ...
