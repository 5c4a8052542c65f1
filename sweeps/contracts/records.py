"""What the driver knows of trials and sweeps: the records it keeps and hands to the tracker
and the observers (`sweeps.contracts.observers`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweeps.contracts.protocol import TrialResult
    from sweeps.spec import Spec


@dataclass
class TrialRecord:
    """What the driver knows about one trial it asked for."""

    number: int
    trial_id: int
    params: dict[str, Any]
    config: dict[str, Any]  # what the training function receives
    seed: int
    asked_at: float
    assigned_at: float
    # Resources of this trial (searched resources override the spec's).
    workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    machine_type: str = "local"
    preemptible: bool = False
    whole_machines: bool = False  # each worker billed as a machine of its own (AI Platform)
    lane_id: str = ""
    seq: int = 0
    startup_s: float = 0.0
    run_id: str | None = None
    restarts: int = 0
    last_step: int = 0
    last_metrics: dict[str, float] = field(default_factory=dict)
    log: str = ""
    error: str | None = None
    requeued_from: int | None = None
    resumed_from_trial: int | None = None
    resume_from: str | None = None  # checkpoint URI this attempt starts from
    checkpoint: str | None = None  # latest persisted checkpoint of this attempt
    checkpoint_step: int | None = None  # the step that checkpoint was written at
    attempt: int = 1  # which attempt of these params (a retry is attempt 2, ...)
    retry_of: int | None = None  # a retry: the number of the trial it retries
    extends: int | None = None  # `extend`: the finished trial it continues for more epochs
    extends_run: str | None = None  # that trial's MLflow run
    failure_cause: str = ""  # why it failed: a cause of sweeps.driver.retries.CAUSES
    # A replicate (`evaluate`): (the trial number it reruns, i, n); not an Optuna trial.
    replicate: tuple[int, int, int] | None = None
    trial: Any = None  # the optuna.Trial (ask/tell handle), driver-side only
    shape: Any = None  # the LaneShape this trial needs


@dataclass
class TrialEnd:
    """How a trial ended: state (COMPLETE, PRUNED, FAIL), objective values, what the worker
    returned, and the driver's own measures (durations, cost)."""

    state: str
    values: list[float] | None
    result: TrialResult | None
    extra: dict[str, float]
    killed: bool = False  # FAIL because a cancel stopped it: its MLflow run ends KILLED


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
    study: Any = None  # the optuna.Study, for observers that read it (plots)
    owner: str = ""  # whose sweep (sweeps/search/owners.py), and the owner's team
    team: str = ""


@dataclass
class SweepSummary:
    name: str
    state: str  # finished | stopped | failed | cancelled | interrupted
    reason: str
    counts: dict[str, int]
    best_number: int | None
    best_value: float | None
    wall_s: float
    cost_usd: float
    gpu_hours: float
    trial_seconds: float = 0.0


@dataclass
class SweepOutcome:
    """What `sweeps.api.run` returns: the sweep's ending, and where its records are."""

    name: str
    state: str
    reason: str
    summary: SweepSummary
    parent_run_id: str | None
    experiment_id: str | None
    storage_url: str
    tracking_uri: str
    errors: list[str] = field(default_factory=list)
    tracking_blocking_s: float = 0.0
    timeline: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, s: SweepSummary, ctx: SweepContext, tracker: Any, errors: list[str]) -> Any:
        return cls(
            s.name,
            s.state,
            s.reason,
            s,
            ctx.parent_run_id,
            ctx.experiment_id,
            ctx.storage_url,
            tracker.uri,
            errors,
            tracker.blocking_s,
        )
