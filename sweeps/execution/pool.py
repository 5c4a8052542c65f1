"""The lane pool: which lanes a sweep runs, of which shapes, and when one is replaced.

It starts lanes through a launcher, reaps the ones that ended (counting deaths, so a node that
cannot start workers at all does not spin forever), decides when a lane is recycled, and holds
trials sampled for a worker-group shape no running lane has (resources searched) until a lane of
that shape asks. It never talks to Optuna or MLflow: the driver does, with what this returns.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sweeps.common import timeline
from sweeps.common.errors import one_line
from sweeps.common.words import plural
from sweeps.execution.lane import Lane, LaneLauncher, LaneShape, make_lane_id, not_placed
from sweeps.execution.placement import Wait
from sweeps.execution.startcost import start_pays

log = logging.getLogger(__name__)

# A lane whose worker group Ray Train cannot keep alive is replaced this many times in a row
# before the sweep gives up.
MAX_LANE_DEATHS = 5


@dataclass(frozen=True)
class RecyclePolicy:
    """When a lane's worker group is replaced by a fresh one: after `after_trials` trials
    (0: never; 1 is `execution.mode: isolated`), or once a worker's memory grew by
    `rss_growth` over its first trial (0: never), bounding slow leaks in user code."""

    after_trials: int = 0
    rss_growth: float = 0.0

    def reason(self, lane: Lane) -> str | None:
        if self.after_trials and lane.trials_run >= self.after_trials:
            return f"recycled after {plural(lane.trials_run, 'trial')}"
        grew = lane.first_rss_mb and lane.last_rss_mb > lane.first_rss_mb * (1 + self.rss_growth)
        if self.rss_growth and grew:
            return (
                f"recycled: worker memory {lane.last_rss_mb:.0f} MB "
                f"(first trial {lane.first_rss_mb:.0f} MB)"
            )
        return None


@dataclass(frozen=True)
class StartPolicy:
    """How many lanes start at once. A cold start is CPU-bound: Ray Train's controller and each
    worker is a fresh process importing Ray and torch (~1 core each for seconds). Starting more
    than the cluster's CPUs can carry only slows every start: on 2 CPUs one lane was ready in
    11.6 s and two started together in 15.0 s, while a 1,000-trial sweep of tiny trials ran
    its trials about as fast on one lane as on two (24.0 vs 22.9 s: the driver is the limit).
    So a lane starts once the lanes still starting leave room for its processes in `cpus`; the
    first always starts."""

    cpus: float = math.inf

    @staticmethod
    def cost(shape: LaneShape) -> float:
        return shape.workers + 1.0  # its workers and its controller

    def may_start(self, starting: list[LaneShape], shape: LaneShape) -> bool:
        if not starting:
            return True
        return sum(map(self.cost, starting)) + self.cost(shape) <= self.cpus

    def worth_starting(
        self,
        left: int,
        lanes: int,
        trial_s: float,
        start_s: float | None,
        busy: float = 0.0,
        draw: float = 0.0,
    ) -> bool:
        """Whether a waiting lane should start beside the `lanes` running trials (busy with
        `busy` CPUs): only if the `left` trials not yet begun end sooner with it, counting
        what its start (`draw` CPUs) takes from them (`startcost.start_pays`). 6 digits
        trials of ~1 s were all done 3 s after the first lane was ready, while a second lane
        would have taken 13 s to start, and taken CPU from those trials meanwhile."""
        return start_pays(left, lanes, trial_s, start_s, self.cpus, busy, draw)

    def contends(self, busy: float, draw: float) -> bool:
        """Whether starts drawing `draw` CPUs take CPU from trials running on `busy`."""
        return busy > 0 and busy + draw > self.cpus


@dataclass
class StallWatch:
    """When a starting lane is asked whether its workers wait to be placed: `first_s` after its
    launch, again every `first_s` until it waits, then every `repeat_s` (a slow interval: the
    line says the same until the cluster changes)."""

    first_s: float = 10.0
    repeat_s: float = 60.0

    def __post_init__(self) -> None:
        self.looked: dict[str, float] = {}
        self.said: dict[str, float] = {}

    @classmethod
    def for_bound(cls, start_timeout_s: float) -> StallWatch:
        """Looks early enough that a lane says what it waits for before Ray Train gives up on
        it (`start_timeout_s`, twice)."""
        return cls(first_s=min(10.0, start_timeout_s / 2))

    def forget(self, lane_id: str) -> None:
        self.looked.pop(lane_id, None)
        self.said.pop(lane_id, None)

    def due(self, lane_id: str, launched_at: float, now: float) -> bool:
        if now - launched_at < self.first_s:
            return False
        said = self.said.get(lane_id)
        if said is not None:
            return now - said >= self.repeat_s
        looked = self.looked.get(lane_id)
        return looked is None or now - looked >= self.first_s


class LanePool:
    def __init__(
        self,
        launcher: LaneLauncher,
        sweep: str,
        default_shape: LaneShape,
        recycle: RecyclePolicy | None = None,
        max_deaths: int = MAX_LANE_DEATHS,
        starts: StartPolicy | None = None,
        clock: Callable[[], float] = time.time,
        probe: Any = None,
        watch: StallWatch | None = None,
    ) -> None:
        self.launcher = launcher
        self.probe = probe  # placement.RayProbe: why a starting lane waits (None: not asked)
        self.watch = watch or StallWatch()
        self.sweep = sweep
        self.default_shape = default_shape
        self.recycle = recycle or RecyclePolicy()
        self.starts = starts or StartPolicy()
        self.max_deaths = max_deaths
        self.lanes: dict[str, Lane] = {}
        self.deaths = 0
        self.index = 0
        self.pending: dict[LaneShape, list[Any]] = {}
        self.clock = clock
        self.start_s: float | None = None  # the longest a lane here took to start so far
        # How many lanes this sweep may hold now (a service's arbiter; None: no limit).
        self.limit: Callable[[], int] | None = None

    def __len__(self) -> int:
        return len(self.lanes)

    def active(self) -> int:
        """Lanes that may still run trials (not told to stop)."""
        return sum(not lane.stopping for lane in self.lanes.values())

    def held(self) -> int:
        """Lanes launched and not told to stop: what the sweep holds of the cluster."""
        return sum(x.launched and not x.stopping for x in self.lanes.values())

    def get(self, lane_id: str) -> Lane | None:
        return self.lanes.get(lane_id)

    def start(self, shape: LaneShape | None = None) -> Lane:
        """A new lane: launched now, or once the lanes still starting leave it room."""
        lane = Lane(make_lane_id(self.sweep, self.index), shape or self.default_shape)
        self.index += 1
        self.lanes[lane.lane_id] = lane
        self.launch_waiting()
        return lane

    def ready(self, lane_id: str) -> None:
        """The lane asked for its first trial: its start-up is over, and how long it took
        says what the next start will cost."""
        lane = self.lanes.get(lane_id)
        if lane is None or lane.ready:
            return
        lane.ready = True
        if lane.launched_at is not None:
            took = self.clock() - lane.launched_at
            self.start_s = max(self.start_s or 0.0, took)

    def waiting(self) -> bool:
        """Whether a lane waits to start (for CPUs, then for the work left to be worth it)."""
        return any(not x.launched and not x.stopping for x in self.lanes.values())

    def launch_waiting(self, worth: Callable[[float | None], bool] | None = None) -> None:
        """Start the waiting lanes the CPUs carry, in order; `worth(start_s)`, when given,
        is asked before each (the sweep's work left against what a start costs)."""
        live = [x for x in self.lanes.values() if not x.stopping]
        starting = [x.shape for x in live if x.launched and not x.ready]
        for lane in [x for x in live if not x.launched]:
            if not self.starts.may_start(starting, lane.shape):
                break  # in order: a big lane is not overtaken forever by small ones
            if self.limit is not None and self.held() >= self.limit():
                break  # the service's fair share: it waits for the arbiter's target
            if worth is None and self.starts.contends(*self._load(lane.shape)):
                break  # beside running trials: the driver's next turn weighs it (`worth`)
            if worth is not None and not worth(self.start_s):
                break
            lane.launched, lane.started_at = True, time.time()
            lane.launched_at = self.clock()
            timeline.mark("lane.launch", lane=lane.lane_id)
            self.launcher.launch(lane)
            starting.append(lane.shape)

    def stalled(self) -> list[tuple[Lane, str, float]]:
        """Starting lanes whose workers wait to be placed, as each falls due (StallWatch):
        (lane, what it waits for, seconds since its launch)."""
        now, out = self.clock(), []
        for lane in list(self.lanes.values()):
            if lane.ready or lane.stopping or lane.launched_at is None:
                continue
            if not self.probe or not self.watch.due(lane.lane_id, lane.launched_at, now):
                continue
            self.watch.looked[lane.lane_id] = now
            try:
                wait = self.probe.waiting(lane.shape, self._running_shapes())
            except Exception as e:  # a question to Ray that failed: asked again later
                log.debug("placement probe failed: %s", one_line(e))
                continue
            if wait is not None:
                self.watch.said[lane.lane_id] = now
                lane.waiting = wait
                out.append((lane, wait.line, now - lane.launched_at))
        return out

    def _running_shapes(self) -> list[LaneShape]:
        return [x.shape for x in self.lanes.values() if x.ready and not x.stopping]

    def unplaced(self, lane: Lane) -> Wait:
        """What a lane whose workers Ray Train never placed waited for, as the cluster is now
        (the line it said last, where Ray cannot be asked)."""
        try:
            if self.probe:
                return self.probe.explain(lane.shape, self._running_shapes())  # type: ignore[no-any-return]
        except Exception as e:
            log.debug("placement probe failed: %s", one_line(e))
        return lane.waiting or Wait(f"its workers ({lane.shape.key}) were never placed")

    def adopt(self, lane_id: str) -> Lane:
        """A warm lane of this sweep's shape and code, left idle by an earlier sweep."""
        lane = Lane(lane_id, self.default_shape, trials_run=1, launched=True, ready=True)
        self.lanes[lane_id] = lane
        timeline.mark("lane.adopted", lane=lane_id)
        self.launcher.watch(lane)  # type: ignore[attr-defined]
        return lane

    def reap(self) -> list[Lane]:
        """Lanes whose worker group died since the last call. A lane told to stop is dropped
        when it ends, whatever its teardown says: it was replaced already if it had to be."""
        died = []
        for lane in [lane for lane in self.lanes.values() if lane.done.is_set()]:
            del self.lanes[lane.lane_id]
            self.watch.forget(lane.lane_id)
            if lane.stopping:
                continue
            if not_placed(lane.error):
                pass  # not a worker group that died: the driver decides (`unplaced`)
            elif lane.error is not None:
                self.deaths += 1
                log.warning("lane %s failed: %s", lane.lane_id, one_line(lane.error))
            died.append(lane)
        return died

    def ready_count(self) -> int:
        """Lanes whose workers asked for a trial and that are not stopping."""
        return sum(x.ready and not x.stopping for x in self.lanes.values())

    def worth_starting(self, left: int, trial_s: float, start_s: float | None) -> bool:
        """Whether the next waiting lane pays for its start, counting the CPU it takes from
        the running lanes' trials (StartPolicy.worth_starting)."""
        shape = next((x.shape for x in self.unstopped() if not x.launched), self.default_shape)
        busy, draw = self._load(shape)
        return self.starts.worth_starting(left, self.ready_count(), trial_s, start_s, busy, draw)

    def _load(self, shape: LaneShape) -> tuple[float, float]:
        """(CPUs the ready lanes' trials use, CPUs the lanes starting and one of `shape`
        starting would draw)."""
        live = self.unstopped()
        busy = sum(x.shape.workers * x.shape.cpus_per_worker for x in live if x.ready)
        starting = [x.shape for x in live if x.launched and not x.ready]
        return busy, sum(map(StartPolicy.cost, starting)) + StartPolicy.cost(shape)

    def unstopped(self) -> list[Lane]:
        """Lanes not yet told to stop."""
        return [lane for lane in self.lanes.values() if not lane.stopping]

    def newest(self) -> Lane:
        """The lane started last."""
        return self.lanes[max(self.lanes)]

    def cold_starts(self) -> bool:
        """Whether this pool started any lane itself (rather than adopting warm ones)."""
        return self.index > 0

    def mark_stopping(self, lane_id: str) -> bool:
        """The lane was told to stop; True the first time (its replacement is then due)."""
        lane = self.lanes.get(lane_id)
        if lane is None or lane.stopping:
            return False
        lane.stopping = True
        if not lane.launched:
            lane.done.set()  # never started: nothing to tear down, reaped at once
        return True

    def replace(self, parallel: int, launching: bool, cancelling: bool, may_launch: Any) -> None:
        """After a lane stopped or died: a lane for trials parked for another shape, else a
        fresh one while the sweep still launches and the budget allows (`may_launch()`)."""
        waiting = self.waiting_shape()
        if waiting is not None and not cancelling:
            self.start(waiting)
        elif launching and self.active() < parallel and may_launch():
            self.start()
        elif launching and self.waiting() and may_launch():
            self.launch_waiting()  # the lane that ended was starting: room for the next

    def too_many_deaths(self) -> bool:
        return self.deaths >= self.max_deaths

    def lanes_lost(self) -> int:
        """Lanes that died while they could run trials."""
        return self.deaths

    def recycle_reason(self, lane: Lane) -> str | None:
        if self.limit is not None and self.held() > self.limit():  # its resources go back
            return "given back to the service: the sweep holds more lanes than its fair share"
        return self.recycle.reason(lane)

    def record_rss(self, lane_id: str, rss_mb: float) -> None:
        lane = self.lanes.get(lane_id)
        if lane is not None and rss_mb:
            lane.first_rss_mb = lane.first_rss_mb or rss_mb
            lane.last_rss_mb = rss_mb

    # ----- trials waiting for a lane of their shape ------------------------------------------
    def park(self, shape: LaneShape, rec: Any) -> None:
        self.pending.setdefault(shape, []).append(rec)

    def take_parked(self, shape: LaneShape) -> Any | None:
        waiting = self.pending.get(shape)
        return waiting.pop(0) if waiting else None

    def waiting_shape(self) -> LaneShape | None:
        return next((shape for shape, recs in self.pending.items() if recs), None)

    def drop_parked(self) -> list[Any]:
        out = [rec for recs in self.pending.values() for rec in recs]
        self.pending.clear()
        return out
