"""The broker: a Ray actor between the driver and the lanes' workers.

Workers never touch Optuna or MLflow. They ask the broker for their next trial, post each epoch's
metrics and wait for the prune decision; the driver drains the broker's events, writes the stores,
and answers. Every question is keyed by (lane, seq, ...) so all ranks of a lane get the same
answer without any collective of their own: lockstep comes for free.

Lane bookkeeping (which trial a lane is on, restarts) lives here rather than in the driver because
a restarted worker group must learn what it was doing even if the driver is busy.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

Key = tuple[Any, ...]


@dataclass
class LaneState:
    seq: int = 0  # the last sequence number a trial was handed out under
    current: dict[str, Any] | None = None  # the assignment in progress, None between trials
    attached: set[int] = field(default_factory=set)  # ranks of the live worker-group generation
    generation: int = 0
    restarts: dict[int, int] = field(default_factory=dict)  # seq -> worker-group restarts
    failed_ranks: dict[int, set[int]] = field(default_factory=dict)


class Broker:
    """Async actor; methods are awaited concurrently, state is touched on one event loop."""

    def __init__(self, max_failures: int = 2) -> None:
        self.max_failures = max_failures
        self.lanes: dict[str, LaneState] = {}
        self.answers: dict[Key, Any] = {}
        self.waiters: dict[Key, asyncio.Event] = {}
        self.asked: set[Key] = set()
        self.persist: dict[Key, bool] = {}
        self.events: list[dict[str, Any]] = []
        self.events_ready = asyncio.Event()

    # ----- helpers -------------------------------------------------------------------------
    def _lane(self, lane_id: str) -> LaneState:
        return self.lanes.setdefault(lane_id, LaneState())

    def _post(self, kind: str, **payload: Any) -> None:
        self.events.append({"kind": kind, "time": time.time(), **payload})
        self.events_ready.set()

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
                if n > self.max_failures:
                    self._post(
                        "failed",
                        lane=lane_id,
                        seq=seq,
                        error=f"worker group lost {n} times (resources.max_failures="
                        f"{self.max_failures})",
                    )
                    lane.current = None
                else:
                    self._post("restart", lane=lane_id, seq=seq, restarts=n)
        lane.attached.add(rank)
        current = lane.current
        return {
            "seq": lane.seq,
            "current": current,
            "restarts": lane.restarts.get(lane.seq, 0) if current else 0,
        }

    async def next_trial(self, lane_id: str, seq: int) -> dict[str, Any]:
        """The assignment for the lane's seq-th trial (or {"stop": True}); same for every rank."""
        key = ("next", lane_id, seq)
        if key not in self.asked and key not in self.answers:
            self.asked.add(key)
            self._post("next", lane=lane_id, seq=seq)
        answer = await self._wait_answer(key)
        lane = self._lane(lane_id)
        if not answer.get("stop") and lane.seq < seq:
            lane.seq = seq
            lane.current = answer
        return answer

    async def report(
        self,
        lane_id: str,
        seq: int,
        step: int,
        metrics: dict[str, float] | None,
        checkpoint: bool = False,
    ) -> tuple[str, bool]:
        """Rank 0 passes the epoch's metrics, other ranks None. All get the same decision
        ('continue', 'prune' or 'cancel') and whether rank 0 has a checkpoint to persist, so
        every rank calls Ray Train's barrier-like report the same number of times."""
        key = ("step", lane_id, seq, step)
        if metrics is not None and key not in self.asked:
            self.asked.add(key)
            self.persist[key] = checkpoint
            self._post("report", lane=lane_id, seq=seq, step=step, metrics=metrics)
        decision = await self._wait_answer(key)
        return decision, self.persist.get(key, False)

    def finish(self, lane_id: str, seq: int, result: dict[str, Any]) -> None:
        """Rank 0 says the trial ended (complete or pruned) and hands over its result."""
        lane = self._lane(lane_id)
        if lane.current is not None and lane.seq == seq:
            lane.current = None
        self._post("finish", lane=lane_id, seq=seq, result=result)

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
            self._post("failed", lane=lane_id, seq=seq, error=error)
            if lane.seq == seq:
                lane.current = None
        ranks.add(rank)
        deadline = time.monotonic() + wait_s
        while len(ranks) < world_size and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return len(ranks) >= world_size

    # A small shared board for ranks of one trial (e.g. a rendezvous address chosen by rank 0).
    def put(self, key: Key, value: Any) -> None:
        self.answer(("board", *key), value)

    async def get(self, key: Key) -> Any:
        return await self._wait_answer(("board", *tuple(key)))

    def peek(self, key: Key) -> Any:
        return self.answers.get(("board", *tuple(key)))

    def log(self, lane_id: str, seq: int, text: str) -> None:
        self._post("log", lane=lane_id, seq=seq, text=text)

    # ----- driver side ---------------------------------------------------------------------
    async def poll(self, timeout: float = 0.5) -> list[dict[str, Any]]:
        if not self.events:
            self.events_ready.clear()
            try:
                await asyncio.wait_for(self.events_ready.wait(), timeout)
            except TimeoutError:
                pass
        out, self.events = self.events, []
        return out

    def answer(self, key: Key, value: Any) -> None:
        key = tuple(key)
        self.answers[key] = value
        ev = self.waiters.pop(key, None)
        if ev is not None:
            ev.set()
        # Answers to finished steps are not needed again; keep memory flat on long sweeps.
        if len(self.answers) > 20_000:
            for k in list(self.answers)[:10_000]:
                self.answers.pop(k, None)
                self.asked.discard(k)
                self.persist.pop(k, None)

    def lane_state(self, lane_id: str) -> dict[str, Any]:
        lane = self._lane(lane_id)
        return {"seq": lane.seq, "current": lane.current, "generation": lane.generation}
