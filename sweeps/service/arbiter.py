"""The arbiter: the service's one place that applies the fair-share policy (`fairshare.decide`).

A detached, named Ray actor (`names.ARBITER_ACTOR` in `names.ARBITER_NAMESPACE`), started by the
first driver that runs on the service's shared broker, with `max_restarts=-1`: Ray starts it
again if its process dies. Each driver on that broker reports its sweep every half second (an
`Ask`: priority, team, the lanes it could use, holds and is giving back) and gets back its
target and, where others wait, a `Take` (sweeps/driver/arbitration.py carries it out).

State is only the drivers' last reports (`Board`): a sweep silent for `SILENT_S` drops out.
After a restart the board is empty and rebuilds itself from the drivers' next reports, which
carry the lanes each holds: for `SILENT_S` every driver is told to keep what it holds, then
the policy applies again. While it is down, a driver keeps what it holds and asks again.
Nothing is stored anywhere else, so nothing can be lost with it.

Capacity is whole lanes of one size: the cluster's CPUs (GPUs, for GPU lanes) divided by the
largest lane any live sweep reports. Sweeps with lanes of different sizes share as if all their
lanes were that size (a simplification: one lane size per service).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from sweeps.service.fairshare import PRIORITIES, Ask, Take, decide

SILENT_S = 5.0  # a driver that has not reported for this long is gone: its sweep drops out
RESOURCES_TTL_S = 5.0  # how long the cluster's resource totals are reused


def capacity(resources: Mapping[str, float], lane_cpus: float, lane_gpus: float) -> int:
    """Pure: how many lanes of this size the cluster holds (GPU lanes count GPUs)."""
    if lane_gpus > 0:
        return int(math.floor(resources.get("GPU", 0.0) / lane_gpus + 1e-9))
    if lane_cpus <= 0:
        return 0
    return int(math.floor(resources.get("CPU", 0.0) / lane_cpus + 1e-9))


@dataclass
class Entry:
    """One sweep's last report."""

    ask: Ask
    seen: float
    owner: str = ""
    lane_cpus: float = 1.0
    lane_gpus: float = 0.0
    left_s: float | None = None  # its trials not yet run times their mean length (None: unknown)


@dataclass
class Board:
    """Pure: the sweeps' last reports, and the policy's answer to each."""

    entries: dict[str, Entry] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)

    def report(self, entry: Entry, weights: Mapping[str, float] | None = None) -> None:
        self.entries[entry.ask.sweep] = entry
        if weights is not None:
            self.weights = dict(weights)

    def live(self, now: float) -> list[Entry]:
        for name in [n for n, e in self.entries.items() if now - e.seen > SILENT_S]:
            del self.entries[name]
        return list(self.entries.values())

    def lane_size(self, now: float) -> tuple[float, float]:
        """The largest lane any live sweep reports (CPUs, GPUs)."""
        live = self.live(now)
        return (
            max((e.lane_cpus for e in live), default=1.0),
            max((e.lane_gpus for e in live), default=0.0),
        )

    def answer(self, sweep: str, cap: int, now: float) -> tuple[int, Take | None]:
        """The sweep's target, and what it gives back now (None: nothing)."""
        d = decide([e.ask for e in self.live(now)], cap, self.weights)
        take = next((t for t in d.takes if t.sweep == sweep), None)
        return d.targets.get(sweep, 0), take

    def rows(self, cap: int, now: float) -> list[dict[str, Any]]:
        """`sweeps queue`: every live sweep, running ones first, then the queue in order."""
        live = self.live(now)
        goal = decide([e.ask for e in live], cap, self.weights).targets
        order = sorted(live, key=lambda e: (PRIORITIES.index(e.ask.priority), e.ask.since))
        out, position, ahead_s, unknown = [], 0, 0.0, False
        for e in order:
            a = e.ask
            queued = a.held == 0 and goal.get(a.sweep, 0) == 0 and a.want > 0
            row = {**asdict(a), "owner": e.owner, "target": goal.get(a.sweep, 0)}
            row["state"] = "queued" if queued else "running"
            if queued:
                position += 1
                row["position"] = position
                row["start_in_s"] = None if unknown or cap <= 0 else round(ahead_s / cap, 1)
            if e.left_s is None:
                unknown = True
            else:
                ahead_s += e.left_s
            out.append(row)
        return out


class Arbiter:
    """The actor: thin, over a `Board`. Methods run one at a time (a plain actor)."""

    def __init__(self) -> None:
        import ray

        self.board = Board()
        self.started = time.time()
        self._resources: tuple[float, dict[str, float]] = (0.0, {})
        # Restarted by Ray: until every live driver has reported again, each keeps what it
        # holds (an empty board would give the first to ask every lane).
        again = ray.get_runtime_context().was_current_actor_reconstructed
        self.rebuilt_at = self.started + SILENT_S if again else 0.0

    def _capacity(self, now: float) -> int:
        at, res = self._resources
        if now - at > RESOURCES_TTL_S or not res:
            import ray

            res = {k: float(v) for k, v in ray.cluster_resources().items()}
            self._resources = (now, res)
        return capacity(res, *self.board.lane_size(now))

    def ask(self, report: dict[str, Any]) -> tuple[int, Take | None]:
        """A driver's report of its sweep (`arbitration.report`): its target and take."""
        now = time.time()
        entry = Entry(
            Ask(**report["ask"]),
            now,
            report.get("owner", ""),
            float(report.get("lane_cpus", 1.0)),
            float(report.get("lane_gpus", 0.0)),
            report.get("left_s"),
        )
        self.board.report(entry, report.get("weights"))
        if now < self.rebuilt_at:
            return entry.ask.held, None
        return self.board.answer(entry.ask.sweep, self._capacity(now), now)

    def snapshot(self) -> dict[str, Any]:
        """What `sweeps queue` shows, and this process's id (a test kills it)."""
        now = time.time()
        cap = self._capacity(now)
        return {
            "pid": os.getpid(),
            "since": self.started,
            "capacity": cap,
            "sweeps": self.board.rows(cap, now),
        }
