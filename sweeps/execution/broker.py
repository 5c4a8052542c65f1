"""The broker: a Ray actor between drivers and the lanes' workers.

Workers never touch Optuna or MLflow. They ask the broker for their next trial, post each
epoch's metrics and wait for the prune decision; the driver drains the broker's events, writes
the stores, and answers. Every question is keyed (`sweeps.contracts.protocol`) by (lane, seq,
...) so all ranks of a lane get the same answer without any collective of their own: lockstep
comes for free.

Lane bookkeeping (which trial a lane is on, restarts) lives here rather than in the driver because
a restarted worker group must learn what it was doing even if the driver is busy.

Each lane has an owner (a driver); events go to their owner's queue. A sweep's own broker has one
owner. A service's broker (detached, shared) outlives drivers: a lane whose sweep ended without
needing it stays idle, its request for a next trial unanswered, until another driver claims it
(same shape and code), another shape needs its resources, or `idle_s` passes. A driver that
stops touching the broker for `orphan_after_s` is gone: its lanes' trials are cancelled at their
next report (a resumed sweep re-runs them from their checkpoints) and the lanes go idle.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from sweeps.contracts.protocol import (
    Assignment,
    Checkpointed,
    Decision,
    Event,
    Failed,
    Finished,
    Key,
    Log,
    NextAnswer,
    NextTrial,
    Report,
    Restarted,
    Stop,
    StopStudy,
    Suggest,
    Suggested,
    TrialAttr,
    TrialResult,
    UserArtifact,
    UserMetrics,
    board_key,
    check_answer,
    next_key,
    step_key,
    suggest_key,
)


@dataclass
class LaneState:
    seq: int = 0  # the last sequence number a trial was handed out under
    current: Assignment | None = None  # the assignment in progress, None between trials
    attached: set[int] = field(default_factory=set)  # ranks of the live worker-group generation
    generation: int = 0
    restarts: dict[int, int] = field(default_factory=dict)  # seq -> worker-group restarts
    failed_ranks: dict[int, set[int]] = field(default_factory=dict)
    # The trial's latest persisted checkpoint (seq -> path): a restarted group resumes from it
    # even when Ray Train's controller had not registered it before the worker died.
    checkpoints: dict[int, str] = field(default_factory=dict)
    owner: str | None = None
    key: str = ""  # what it can run: worker shape, code, checkpoint storage
    max_failures: int | None = None  # worker-group restarts a trial may use (None: broker's)
    pending: int | None = None  # seq of its unanswered request for a next trial
    idle_since: float | None = None


class Broker:
    """Async actor; methods are awaited concurrently, state is touched on one event loop."""

    def __init__(
        self,
        max_failures: int = 2,
        owner: str | None = "driver",
        idle_s: float = 0.0,
        orphan_after_s: float | None = None,
    ) -> None:
        self.max_failures = max_failures
        self.default_owner = owner  # lanes nobody registered belong to it (a sweep's broker)
        self.idle_s = idle_s
        self.orphan_after_s = orphan_after_s
        self.lanes: dict[str, LaneState] = {}
        self.answers: dict[Key, Any] = {}
        self.waiters: dict[Key, asyncio.Event] = {}
        self.asked: set[Key] = set()
        self.persist: dict[Key, bool] = {}
        self.queues: dict[str, list[Event]] = {}
        self.ready: dict[str, asyncio.Event] = {}
        self.seen: dict[str, float] = {}  # owner -> last touch (monotonic)
        self.janitor: asyncio.Task[None] | None = None

    # ----- helpers -------------------------------------------------------------------------
    def _lane(self, lane_id: str) -> LaneState:
        if lane_id not in self.lanes:
            self.lanes[lane_id] = LaneState(owner=self.default_owner)
        return self.lanes[lane_id]

    def _post(self, event: Event) -> None:
        owner = self._lane(event.lane).owner
        if owner is None:
            return  # an idle or orphaned lane: nobody asked for this any more
        self.queues.setdefault(owner, []).append(event)
        self.ready.setdefault(owner, asyncio.Event()).set()

    def _deliver(self, key: Key, value: Any) -> None:
        self.answers[key] = value
        ev = self.waiters.pop(key, None)
        if ev is not None:
            ev.set()

    async def _wait_answer(self, key: Key) -> Any:
        if key in self.answers:
            return self.answers[key]
        ev = self.waiters.setdefault(key, asyncio.Event())
        await ev.wait()
        return self.answers[key]

    # ----- worker side ---------------------------------------------------------------------
    def attach(self, lane_id: str, rank: int, world_size: int) -> dict[str, Any]:
        """A worker (re)starts: tell it where its lane stands.

        A rank that is already attached means Ray Train restarted the worker group: that is a
        new generation, and the trial in progress is resumed unless it used up its restarts.
        """
        lane = self._lane(lane_id)
        if rank in lane.attached:
            lane.attached = set()
            lane.generation += 1
            if lane.current is not None:
                seq = lane.seq
                lane.restarts[seq] = lane.restarts.get(seq, 0) + 1
                n = lane.restarts[seq]
                most = self.max_failures if lane.max_failures is None else lane.max_failures
                if n > most:
                    limit = f"resources.max_failures={most}"
                    self._post(Failed(lane_id, seq, f"worker group lost {n} times ({limit})"))
                    lane.current = None
                else:
                    self._post(Restarted(lane_id, seq, n))
        lane.attached.add(rank)
        current = lane.current
        return {
            "seq": lane.seq,
            "current": current,
            "restarts": lane.restarts.get(lane.seq, 0) if current else 0,
            "checkpoint": lane.checkpoints.get(lane.seq) if current else None,
        }

    async def next_trial(self, lane_id: str, seq: int, ask: bool = True) -> NextAnswer:
        """The assignment for the lane's seq-th trial (or a Stop); the same for every rank.

        Only rank 0 asks (`ask`); the others wait for its answer. Rank 0 hands in the trial
        before it asks, so the driver always sees a lane's Finished before its next NextTrial:
        had another rank asked first, a Stop that leaves the lane warm on a service would
        have dropped the lane's owner, and with it rank 0's Finished."""
        key = next_key(lane_id, seq)
        if ask and key not in self.asked and key not in self.answers:
            self.asked.add(key)
            self._lane(lane_id).pending = seq
            self._post(NextTrial(lane_id, seq))
        answer = await self._wait_answer(key)
        lane = self._lane(lane_id)
        if isinstance(answer, Assignment) and lane.seq < seq:
            lane.seq = seq
            lane.current = answer
        return answer

    async def finish_and_next(self, lane_id: str, seq: int, result: TrialResult) -> NextAnswer:
        """Rank 0 ends trial `seq` and asks for the next in one round trip."""
        self.finish(lane_id, seq, result)
        return await self.next_trial(lane_id, seq + 1)

    async def report(
        self,
        lane_id: str,
        seq: int,
        step: int,
        metrics: dict[str, float] | None,
        checkpoint: bool = False,
    ) -> tuple[Decision, bool]:
        """Rank 0 passes the epoch's metrics, other ranks None. All get the same decision and
        whether rank 0 has a checkpoint to persist, so every rank calls Ray Train's barrier-like
        report the same number of times."""
        key = step_key(lane_id, seq, step)
        if metrics is not None and key not in self.asked:
            self.asked.add(key)
            self.persist[key] = checkpoint
            self._post(Report(lane_id, seq, step, metrics))
        decision = await self._wait_answer(key)
        return decision, self.persist.get(key, False)

    def checkpointed(self, lane_id: str, seq: int, step: int, path: str) -> None:
        """Rank 0 persisted a checkpoint: remembered for a restart, and told to the driver."""
        self._lane(lane_id).checkpoints[seq] = path
        self._post(Checkpointed(lane_id, seq, step, path))

    def finish(self, lane_id: str, seq: int, result: TrialResult) -> None:
        """Rank 0 says the trial ended (complete or pruned) and hands over its result."""
        lane = self._lane(lane_id)
        if lane.current is not None and lane.seq == seq:
            lane.current = None
        lane.checkpoints.pop(seq, None)
        self._post(Finished(lane_id, seq, result))

    async def fail(
        self, lane_id: str, seq: int, rank: int, world_size: int, error: str, wait_s: float = 5.0
    ) -> bool:
        """A rank's trial raised. Returns True when every rank raised (the lane moves on by
        itself); False means the others are stuck in a collective and this rank must raise so
        Ray Train restarts the group. Either way the trial is FAIL: user errors do not retry.
        """
        lane = self._lane(lane_id)
        ranks = lane.failed_ranks.setdefault(seq, set())
        if not ranks:
            self._post(Failed(lane_id, seq, error))
            if lane.seq == seq:
                lane.current = None
        ranks.add(rank)
        deadline = time.monotonic() + wait_s
        while len(ranks) < world_size and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return len(ranks) >= world_size

    # ----- define-by-run objectives (sweeps.optimize) ----------------------------------------
    async def suggest(self, lane_id: str, seq: int, call: int, ask: Suggest | None) -> Suggested:
        """The trial's `call`-th suggestion; rank 0 passes its request, other ranks None and
        get the same answer."""
        key = suggest_key(lane_id, seq, call)
        if ask is not None and key not in self.asked:
            self.asked.add(key)
            self._post(ask)
        return await self._wait_answer(key)

    def trial_attr(self, lane_id: str, seq: int, name: str, value: Any) -> None:
        self._post(TrialAttr(lane_id, seq, name, value))

    def stop_study(self, lane_id: str, seq: int, reason: str, error: bytes | None = None) -> None:
        self._post(StopStudy(lane_id, seq, reason, error))

    # A small shared board for ranks of one trial (e.g. a rendezvous address chosen by rank 0).
    def put(self, key: Key, value: Any) -> None:
        self.answer(board_key(*key), value)

    async def get(self, key: Key) -> Any:
        return await self._wait_answer(board_key(*tuple(key)))

    def peek(self, key: Key) -> Any:
        return self.answers.get(board_key(*tuple(key)))

    def log(self, lane_id: str, seq: int, text: str, rank: int = 0) -> None:
        self._post(Log(lane_id, seq, text, rank))

    def user_log(self, lane_id: str, seq: int, step: int, metrics: dict[str, float]) -> None:
        self._post(UserMetrics(lane_id, seq, step, metrics))

    def user_artifact(self, lane_id: str, seq: int, name: str, data: bytes) -> None:
        self._post(UserArtifact(lane_id, seq, name, data))

    # ----- driver side ---------------------------------------------------------------------
    async def poll(self, timeout: float = 0.5, owner: str | None = None) -> list[Event]:
        """The owner's events (waits up to `timeout` for one)."""
        owner = owner or self.default_owner or ""
        self.touch(owner)
        if self.janitor is None and (self.idle_s or self.orphan_after_s):
            self.janitor = asyncio.get_running_loop().create_task(self._janitor())
        queue = self.queues.setdefault(owner, [])
        if not queue:
            ready = self.ready.setdefault(owner, asyncio.Event())
            ready.clear()
            try:
                await asyncio.wait_for(ready.wait(), timeout)
            except TimeoutError:
                pass
        out, self.queues[owner] = self.queues.get(owner, []), []
        return out

    def touch(self, owner: str) -> None:
        """The owner is alive (its driver calls this from a thread of its own, so a driver busy
        waiting out a database outage is not taken for dead)."""
        self.seen[owner] = time.monotonic()

    def register(self, lane_id: str, owner: str, key: str, max_failures: int | None = None) -> None:
        """A driver is about to launch this lane."""
        lane = self._lane(lane_id)
        lane.owner, lane.key, lane.max_failures = owner, key, max_failures
        self.touch(owner)

    def answer(self, key: Key, value: Any) -> None:
        key = tuple(key)
        check_answer(key, value)
        if key[0] == "next":
            lane = self._lane(key[1])
            if isinstance(value, Stop) and value.keep_warm and self.idle_s > 0:
                lane.owner, lane.idle_since = None, time.monotonic()
                return  # the lane waits, warm, for the next sweep that can use it
            lane.pending = None
        self._deliver(key, value)
        # Answers to finished steps are not needed again; keep memory flat on long sweeps.
        if len(self.answers) > 20_000:
            for k in list(self.answers)[:10_000]:
                self.answers.pop(k, None)
                self.asked.discard(k)
                self.persist.pop(k, None)

    def claim(self, owner: str, key: str, n: int) -> list[str]:
        """Up to `n` idle lanes that run `key`, now the owner's; their pending requests for a
        trial go to the owner as NextTrial events."""
        idle = [(s.idle_since, i) for i, s in self.lanes.items() if self._idle(s) and s.key == key]
        taken = [lane_id for _, lane_id in sorted(idle)[:n]]
        for lane_id in taken:
            lane = self.lanes[lane_id]
            lane.owner, lane.idle_since = owner, None
            self._post(NextTrial(lane_id, lane.pending or 0))
        self.touch(owner)
        return taken

    def release_idle(self, keep_key: str | None = None) -> int:
        """Stop idle lanes (all, or those not running `keep_key`): their resources go back to
        Ray for a sweep that needs lanes of another shape. Returns how many."""
        stopped = 0
        for lane_id, lane in self.lanes.items():
            if self._idle(lane) and lane.key != keep_key:
                self._stop_idle(lane_id, lane, "released for a sweep of another shape")
                stopped += 1
        return stopped

    def idle_lanes(self) -> list[tuple[str, str]]:
        """(lane id, key) of the lanes waiting idle: they hold their resources meanwhile."""
        return [(lane_id, lane.key) for lane_id, lane in self.lanes.items() if self._idle(lane)]

    def _idle(self, lane: LaneState) -> bool:
        return lane.owner is None and lane.idle_since is not None and lane.pending is not None

    def _stop_idle(self, lane_id: str, lane: LaneState, why: str) -> None:
        seq = lane.pending or 0
        lane.pending = lane.idle_since = None
        self._deliver(next_key(lane_id, seq), Stop(why))

    async def _janitor(self) -> None:
        """Stops lanes idle past `idle_s`; orphans the lanes of owners silent too long."""
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for lane_id, lane in list(self.lanes.items()):
                if self._idle(lane) and now - (lane.idle_since or now) > self.idle_s:
                    self._stop_idle(lane_id, lane, f"idle for {self.idle_s:g} s")
            if self.orphan_after_s is None:
                continue
            gone = {o for o, t in self.seen.items() if now - t > self.orphan_after_s}
            for owner in gone:
                self.seen.pop(owner, None)
                self.queues.pop(owner, None)
                for lane_id, lane in self.lanes.items():
                    if lane.owner == owner:
                        self._orphan(lane_id, lane, now)

    def _orphan(self, lane_id: str, lane: LaneState, now: float) -> None:
        """The lane's driver is gone: its trial is cancelled at the next report (the worker
        ends it), and once it asks for a next trial the lane waits idle to be claimed."""
        lane.owner, lane.idle_since = None, now
        for key in [k for k in self.waiters if k[0] == "step" and k[1] == lane_id]:
            self._deliver(key, Decision.CANCEL)

    def answer_many(self, items: list[tuple[Key, Any]]) -> None:
        """Several answers in one call: one actor round trip per driver step, not per event."""
        for key, value in items:
            self.answer(key, value)

    def lane_state(self, lane_id: str) -> dict[str, Any]:
        lane = self._lane(lane_id)
        return {
            "seq": lane.seq,
            "current": lane.current,
            "generation": lane.generation,
            "owner": lane.owner,
            "idle": self._idle(lane),
        }
