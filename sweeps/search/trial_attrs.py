"""A running trial's user attrs that can wait: written together with its next write.

What the driver learns about a trial while it runs (its lane and seed at assignment, its MLflow
run's id a moment later) waits here and goes out with the trial's next write: its end, a
checkpoint, a restart, or, for a trial that runs on, once it is `DEFER_S` old, so `sweeps show`
names a live trial's run within seconds. A commit each would cost a sweep of tiny trials more
than a quarter of the driver's time.

Nothing here may be lost before the trial is told: a finished Optuna trial is read-only, so the
book writes what waits right before every tell. A driver that dies loses only what waited; a
resumed sweep finds the run by its MLflow tags (`recovery.recover_stale`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sweeps.search import study as st


class PendingAttrs:
    DEFER_S = 2.0

    def __init__(self, study: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.study, self.clock = study, clock
        self._waiting: dict[int, tuple[dict[str, Any], float]] = {}

    def add(self, tid: int, attrs: dict[str, Any]) -> None:
        """Buffer attrs for the trial's next write (the oldest one's age counts)."""
        waiting, since = self._waiting.get(tid, ({}, self.clock()))
        self._waiting[tid] = ({**waiting, **attrs}, since)

    def write(self, tid: int, attrs: dict[str, Any] | None = None) -> None:
        """Write `attrs` now, with whatever waits for the trial: one commit."""
        waiting, _ = self._waiting.pop(tid, ({}, 0.0))
        merged = {**waiting, **(attrs or {})}
        if merged:
            try:
                st.set_trial_attrs(self.study, tid, merged)
            except BaseException:
                self.add(tid, waiting)  # kept for the retry (an outage) or the next write
                raise

    def write_overdue(self, all_: bool = False) -> None:
        """Write the buffers that waited DEFER_S (`all_`: every one)."""
        due = self.clock() - self.DEFER_S
        for tid in [t for t, (_, since) in self._waiting.items() if all_ or since <= due]:
            self.write(tid)
