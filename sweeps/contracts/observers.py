"""What the driver tells the rest of the world: the tracker contract and the observers.

The driver calls a :class:`Tracker` (MLflow, the learning log) directly, because its failures
matter: a run id must be linked to its trial, and unsent writes are reported at the end.
Everything else that watches a sweep (progress bar, plots) is a :class:`SweepObserver`, called
through one :class:`ObserverManager` whose single policy is that an observer's failure is
logged and remembered, never raised into the sweep.

Implementations that do slow I/O queue the work and return at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from sweeps.common.errors import one_line
from sweeps.contracts.records import SweepContext, SweepSummary, TrialEnd, TrialRecord

log = logging.getLogger(__name__)


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

    def log_run_metrics(self, run_id: str, metrics: dict[str, float]) -> None:
        """Metrics on a run that may have ended (a replicated trial's mean and interval)."""

    def flush(self) -> list[str]:
        """Wait for every queued write; returns what could not be written."""
        ...

    def close(self) -> None: ...


class SweepObserver:
    """No-op base for observers; subclasses override what they need."""

    def on_sweep_start(self, ctx: SweepContext) -> None: ...

    def on_trial_start(self, ctx: SweepContext, t: TrialRecord) -> None: ...

    def on_epoch(
        self, ctx: SweepContext, t: TrialRecord, step: int, metrics: dict[str, float]
    ) -> None: ...

    def on_trial_restart(self, ctx: SweepContext, t: TrialRecord) -> None: ...

    def on_trial_end(self, ctx: SweepContext, t: TrialRecord, end: TrialEnd) -> None: ...

    def on_sweep_end(self, ctx: SweepContext, summary: SweepSummary) -> None: ...

    def on_notice(self, ctx: SweepContext, line: str) -> None:
        """Something the user should see now, in one line ("lane X waiting for 2 CPUs: ...")."""

    def close(self) -> None: ...


class ObserverManager:
    """Calls every observer's hook in order. One error policy: a failing observer is logged
    (once per observer and hook) and its error kept in `errors`; the sweep goes on."""

    def __init__(self, observers: list[SweepObserver] | None = None) -> None:
        self.observers = list(observers or [])
        self.errors: list[str] = []
        self._warned: set[tuple[int, str]] = set()

    def sweep_start(self, ctx: SweepContext) -> None:
        self._each("on_sweep_start", lambda o: o.on_sweep_start(ctx))

    def trial_start(self, ctx: SweepContext, t: TrialRecord) -> None:
        self._each("on_trial_start", lambda o: o.on_trial_start(ctx, t))

    def epoch(self, ctx: SweepContext, t: TrialRecord, step: int, m: dict[str, float]) -> None:
        self._each("on_epoch", lambda o: o.on_epoch(ctx, t, step, m))

    def trial_restart(self, ctx: SweepContext, t: TrialRecord) -> None:
        self._each("on_trial_restart", lambda o: o.on_trial_restart(ctx, t))

    def trial_end(self, ctx: SweepContext, t: TrialRecord, end: TrialEnd) -> None:
        self._each("on_trial_end", lambda o: o.on_trial_end(ctx, t, end))

    def sweep_end(self, ctx: SweepContext, summary: SweepSummary) -> None:
        self._each("on_sweep_end", lambda o: o.on_sweep_end(ctx, summary))

    def notice(self, ctx: SweepContext, line: str) -> None:
        log.info("%s: %s", ctx.study_name, line)
        # A user's callback may predate the hook: it is not an error that it has none.
        self._each("on_notice", lambda o: getattr(o, "on_notice", _no_notice)(ctx, line))

    def _each(self, hook: str, call: Callable[[SweepObserver], None]) -> None:
        for ob in self.observers:
            try:
                call(ob)
            except Exception as e:
                msg = f"{type(ob).__name__}.{hook}: {one_line(e, 200)}"
                if (id(ob), hook) not in self._warned:
                    self._warned.add((id(ob), hook))
                    log.warning("observer failed (the sweep goes on): %s", msg)
                self.errors.append(msg)


def _no_notice(ctx: SweepContext, line: str) -> None:
    """The notice hook of an observer without one."""
