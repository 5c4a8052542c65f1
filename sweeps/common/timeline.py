"""A sweep's timeline: named events with monotonic timestamps, from process start to exit.

Every sweep records one (imports, store schemas, `ray.init`, broker, each lane's start and first
request, each trial's assignment, first report and end, model logging, plots, teardown); it is
kept on the MLflow parent run as `timeline.json`, `sweeps run --profile` prints it, and the
benchmarks read per-trial steady-state costs from it instead of differencing two sweeps.
Marks are cheap (a list append under a lock) and safe from any thread.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

# When this process started, as near as we can tell: `sweeps` is the first of our modules
# the CLI imports, and Python's own start-up before it is ~50 ms.
PROCESS_T0 = time.monotonic()


@dataclass
class Timeline:
    t0: float = PROCESS_T0
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        # Its wall time too: a bench lines this timeline up with another process's clock.
        wall = time.time() - (time.monotonic() - self.t0)
        self.events.insert(0, (self.t0, "process.start", {"wall": round(wall, 4)}))

    def mark(self, name: str, **detail: Any) -> float:
        with self.lock:  # the clock read inside the lock keeps the events in time order
            now = time.monotonic()
            self.events.append((now, name, detail))
        return now - self.t0

    def mark_at(self, when: float, name: str, **detail: Any) -> None:
        """An event another process of this sweep saw at `when` (its time.monotonic(), one
        clock for every process of a machine), kept in time order."""
        import bisect

        with self.lock:
            at = bisect.bisect_right([t for t, _, _ in self.events], when)
            self.events.insert(at, (when, name, detail))

    def first(self, name: str, **match: Any) -> float | None:
        """Seconds from t0 to the first event called `name` (whose detail has `match`)."""
        with self.lock:
            for t, n, d in self.events:
                if n == name and all(d.get(k) == v for k, v in match.items()):
                    return t - self.t0
        return None

    def to_json(self) -> list[dict[str, Any]]:
        with self.lock:
            return [{"t": round(t - self.t0, 4), "event": n, **d} for t, n, d in self.events]


_CURRENT = Timeline()
_RESET = threading.Lock()


def current() -> Timeline:
    return _CURRENT


def begin(from_process_start: bool) -> Timeline:
    """A fresh timeline for a sweep: from this process's start (the CLI), or from now (a sweep
    run from Python, where the process may be hours old)."""
    global _CURRENT
    with _RESET:
        _CURRENT = Timeline(PROCESS_T0 if from_process_start else time.monotonic())
    return _CURRENT


def mark(name: str, **detail: Any) -> float:
    """Record an event on the current sweep's timeline; returns its offset in seconds."""
    return _CURRENT.mark(name, **detail)


def breakdown(events: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """Pure: (phase, start s, duration s) for the phases a reader asks about first: set-up until
    the first trial is assigned, each of its parts, the trials, and the end until exit."""
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for e in events:
        first.setdefault(e["event"], e["t"])
        last[e["event"]] = e["t"]

    # Without an exit mark (a timeline kept on the run is written before the process ends),
    # the last event recorded stands in for it.
    last.setdefault("process.exit", max((e["t"] for e in events), default=0.0))

    def span(label: str, a: str, b: str, a_last: bool = False) -> tuple[str, float, float]:
        start = (last if a_last else first).get(a)
        end = last.get(b) if b in ("trial.ended", "process.exit") else first.get(b)
        if start is None or end is None:
            return (label, start or 0.0, float("nan"))
        return (label, start, end - start)

    return [
        span("imports", "process.start", "imports.done"),
        span("stores (Optuna + MLflow schemas)", "stores.start", "stores.ready"),
        span("ray.init", "ray.start", "ray.ready"),
        span("lanes: fit() to first request", "lane.launch", "lane.first_request"),
        span("until first trial assigned", "process.start", "trial.assigned"),
        span("trials (first assigned to last ended)", "trial.assigned", "trial.ended"),
        span("after the last trial until exit", "trial.ended", "process.exit", a_last=True),
        span("whole process (to exit or last record)", "process.start", "process.exit"),
    ]


def steady_state(events: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Pure: (gap s, training s) for each pair of consecutive trials on one lane, the lane's first
    trial left out (its start-up is not steady state). The gap is from one trial's assignment to
    the next one's on the same lane; the gap minus the earlier trial's in-worker training time is
    what sweeps itself costs per trial (issue 18: marginal cost from one run's timeline, not from
    the difference of two sweeps, which drowned in noise)."""
    starts: dict[Any, list[tuple[float, int]]] = {}
    train: dict[int, float] = {}
    for e in events:
        if e["event"] == "trial.assigned":
            starts.setdefault(e.get("lane"), []).append((e["t"], e["trial"]))
        elif e["event"] == "trial.ended":
            train[e["trial"]] = float(e.get("train_s", 0.0))
    pairs: list[tuple[float, float]] = []
    for seq in starts.values():
        seq.sort()
        for (t_a, a), (t_b, _) in zip(seq[1:], seq[2:], strict=False):
            if a in train:
                pairs.append((t_b - t_a, train[a]))
    return pairs
