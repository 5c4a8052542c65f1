"""What the driver tells the rest of the world: the tracker contract and observer callbacks.

The driver calls a :class:`Tracker` (MLflow, the learning log) directly, because its failures
matter: a run id must be linked to its trial, and unsent writes are reported at the end.
Everything else that watches a sweep (progress bar, plots) is a :class:`DriverCallback`,
called through one :class:`CallbackManager` whose single policy is that an observer's failure is
logged and remembered, never raised into the sweep.

Implementations that do slow I/O queue the work and return at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from sweeps.errors import one_line

if TYPE_CHECKING:
    from sweeps.protocol import TrialResult
    from sweeps.spec import Spec

log = logging.getLogger("sweeps.callbacks")


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


class Tracker(Protocol):
    """The learning log as the driver sees it (MLflow in `tracking.tracker`)."""

    uri: str
    blocking_s: float  # time the driver's loop spent waiting on the tracker

    def start_sweep(self, ctx: SweepContext) -> None:
        """Create or reopen the sweep's parent run, without waiting for it where the writes
        happen elsewhere: `sweep_run` puts its ids on ctx."""

    def sweep_run(self, ctx: SweepContext, timeout: float | None) -> bool:
        """Set ctx.parent_run_id / experiment_id once known (waiting up to `timeout`); False
        while the parent run is still being made. Raises if the store refused it."""
        ...

    def start_trial(self, ctx: SweepContext, t: TrialRecord) -> None:
        """Create the trial's run without blocking the driver; its id comes back through
        `created_runs`, and later calls about the trial go to it in order."""

    def created_runs(self) -> list[tuple[int, str]]:
        """(trial_id, run_id) of trial runs created since the last call."""
        ...

    def log_epoch(self, ctx: SweepContext, t: TrialRecord, step: int, m: dict[str, float]) -> None:
        """One epoch's metrics, at `step`."""

    def log_metrics(
        self, ctx: SweepContext, t: TrialRecord, step: int, m: dict[str, float]
    ) -> None:
        """What training code logged with `sweeps.log` (not seen by the pruner)."""

    def log_bytes(self, ctx: SweepContext, t: TrialRecord, name: str, data: bytes) -> None:
        """A file training code logged (`sweeps.log_artifact` / `log_figure`)."""

    def trial_restarted(self, ctx: SweepContext, t: TrialRecord) -> None: ...

    def end_trial(self, ctx: SweepContext, t: TrialRecord, end: TrialEnd) -> None: ...

    def end_sweep(self, ctx: SweepContext, summary: SweepSummary) -> None: ...

    def close_stale_run(self, run_id: str) -> None:
        """A run left RUNNING by a driver that died: closed as KILLED."""

    def find_trial_run(self, ctx: SweepContext, number: int) -> str | None:
        """The run of trial `number` of this sweep, looked up in the store (a dead driver may
        have created it without linking it)."""

    def log_artifacts(
        self, run_id: str, paths: list[str], artifact_path: str, then_remove: str | None = None
    ) -> None:
        """Upload files in order; `then_remove`, a folder to delete once they are uploaded."""

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None: ...

    def log_text(self, run_id: str, text: str, artifact_file: str) -> None: ...

    def flush(self) -> list[str]:
        """Wait for every queued write; returns what could not be written."""
        ...

    def close(self) -> None: ...


class DriverCallback:
    """No-op base for observers; subclasses override what they need."""

    def on_sweep_start(self, ctx: SweepContext) -> None: ...

    def on_trial_start(self, ctx: SweepContext, t: TrialRecord) -> None: ...

    def on_epoch(
        self, ctx: SweepContext, t: TrialRecord, step: int, metrics: dict[str, float]
    ) -> None: ...

    def on_trial_restart(self, ctx: SweepContext, t: TrialRecord) -> None: ...

    def on_trial_end(self, ctx: SweepContext, t: TrialRecord, end: TrialEnd) -> None: ...

    def on_sweep_end(self, ctx: SweepContext, summary: SweepSummary) -> None: ...

    def close(self) -> None: ...


class CallbackManager:
    """Calls every observer's hook in order. One error policy: a failing observer is logged
    (once per observer and hook) and its error kept in `errors`; the sweep goes on."""

    def __init__(self, callbacks: list[DriverCallback] | None = None) -> None:
        self.callbacks = list(callbacks or [])
        self.errors: list[str] = []
        self._warned: set[tuple[int, str]] = set()

    def __call__(self, hook: str, *args: Any) -> None:
        for cb in self.callbacks:
            try:
                getattr(cb, hook)(*args)
            except Exception as e:
                msg = f"{type(cb).__name__}.{hook}: {one_line(e, 200)}"
                if (id(cb), hook) not in self._warned:
                    self._warned.add((id(cb), hook))
                    log.warning("observer failed (the sweep goes on): %s", msg)
                self.errors.append(msg)
