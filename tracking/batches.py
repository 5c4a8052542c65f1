"""A trial's MLflow writes waiting for the writer, one buffer per trial: whatever piles up while
the writer is busy goes out in one log_batch (a tiny trial's record takes three commits rather
than five). Shared by the driver's side, which adds, and the writer, which takes; hence the
lock."""

from __future__ import annotations

import threading
from typing import Any


class Batch:
    """Params and tags by key (the last value wins, as MLflow allows one per key in a batch),
    metrics in order."""

    def __init__(self) -> None:
        self.params: dict[str, str] = {}
        self.tags: dict[str, str] = {}
        self.metrics: list[Any] = []
        self.queued = False  # a write of this buffer is in the writer's queue
        self.ending = False  # the trial's end is queued, and writes what is left

    def merge(self, params: dict[str, str], metrics: list[Any], tags: dict[str, str]) -> None:
        self.params.update(params)
        self.metrics.extend(metrics)
        self.tags.update(tags)

    def empty(self) -> bool:
        return not (self.params or self.metrics or self.tags)


class TrialBatches:
    def __init__(self) -> None:
        self._batches: dict[int, Batch] = {}
        self._lock = threading.Lock()

    def add(
        self,
        trial_id: int,
        params: dict[str, str] | None = None,
        metrics: list[Any] | None = None,
        tags: dict[str, str] | None = None,
    ) -> bool:
        """Buffer a trial's writes; True if no write of its buffer is queued yet."""
        with self._lock:
            b = self._batches.setdefault(trial_id, Batch())
            b.merge(params or {}, metrics or [], tags or {})
            fresh, b.queued = not b.queued, True
            return fresh

    def ending(self, trial_id: int) -> None:
        """The trial's end is queued: earlier queued writes leave the buffer to it."""
        with self._lock:
            self._batches.setdefault(trial_id, Batch()).ending = True

    def take(self, trial_id: int, final: bool) -> Batch | None:
        """What to write now (None: leave it for the trial's end, which is queued)."""
        with self._lock:
            if not final and self._batches.get(trial_id, Batch()).ending:
                return None
            return self._batches.pop(trial_id, None) or Batch()

    def restore(self, trial_id: int, b: Batch) -> None:
        """A write failed: its batch goes back in front of what came since, for the retry."""
        with self._lock:
            later = self._batches.pop(trial_id, None)
            if later is not None:
                b.merge(later.params, later.metrics, later.tags)
                b.ending = b.ending or later.ending
            b.queued = True
            self._batches[trial_id] = b
