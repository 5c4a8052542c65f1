"""Fair share on a service, the driver's side: it reports its sweep to the arbiter and holds
the lanes it is given (sweeps/service/arbiter.py applies `fairshare.decide`).

Only a sweep on a service's shared broker takes part; a `sweeps run` on a Ray of its own has
its cluster to itself. Every half second, never blocking the loop (an ObjectRef polled with no
wait), the driver sends its `Ask` and gets its target: the lane pool launches lanes only while
it holds fewer (`LanePool.limit`), and a lane that asks for a trial while the sweep holds more
is stopped (its resources go back to Ray, where the waiting sweep's lane is placed).

Told to give lanes back now (a `Take`), it stops lanes still starting, then parks one running
trial per lane at its next report after a persisted checkpoint (`pause.Parking.request_trial`):
the trial ends FAIL, cancelled and parked, its MLflow run KILLED and tagged `sweeps.preempted`
with its error line saying so, and its params are queued again in this sweep from that
checkpoint (`requeue_attrs`), to resume on any lane later. A sweep whose trials cannot
checkpoint (checkpoints off, or code that has saved none) gives lanes back only at a trial's
end (`Take.at_boundary`). An arbiter that does not answer (killed, restarting) leaves the
sweep with what it holds; it asks again.

    SWEEPS_PRIORITY=high|normal|low   the sweep's priority (`submit --priority` sets it)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.contracts import protocol as p
from sweeps.contracts.records import TrialRecord
from sweeps.service.fairshare import PRIORITIES

PRIORITY_ENV = "SWEEPS_PRIORITY"
REPORT_EVERY_S = 0.5
ANSWER_WAIT_S = 10.0  # an answer not back by then is given up (the arbiter restarts): ask again
FIRST_WAIT_S = 30.0  # the first answer, before any lane starts (the arbiter may be starting)
REASON = "lane given back to the service (fair share)"
CLAIM_EVERY_S = 2.0  # how often a sweep with lanes still starting looks for idle warm ones


def check_priority(value: str) -> str:
    """A priority, or one line (exit 2) naming the allowed ones."""
    if value not in PRIORITIES:
        raise SpecError(f"priority: {value!r} is not one of {', '.join(PRIORITIES)}")
    return value


def priority() -> str:
    return check_priority(os.environ.get(PRIORITY_ENV) or "normal")


def preempted_line(number: int, step: int, checkpoint_step: int | None) -> str:
    """Pure: the notice (and the trial's error) when the arbiter's take parks a trial."""
    where = "with no checkpoint" if checkpoint_step is None else f"(step {checkpoint_step})"
    return (
        f"preempted: trial {number} parked at its report of step {step}, checkpoint {where}; "
        "its lane went to a sweep of higher priority or below its share, and it resumes in "
        "this sweep"
    )


def requeue_attrs(rec: TrialRecord) -> dict[str, Any]:
    """Pure: what a preempted trial's params are queued again with: the trial it continues and
    the checkpoint it resumes from (as a resumed sweep queues a cancelled trial)."""
    attrs: dict[str, Any] = {names.REQUEUED_FROM: rec.number}
    checkpoint = rec.checkpoint or rec.resume_from
    if checkpoint:
        attrs[names.RESUME_CHECKPOINT] = checkpoint
        attrs[names.RESUMED_FROM_TRIAL] = rec.number
        if rec.checkpoint_step is not None:
            attrs[names.RESUME_STEP] = rec.checkpoint_step
    if rec.extends is not None:
        attrs[names.EXTENDS], attrs[names.EXTENDS_RUN] = rec.extends, rec.extends_run
        attrs[names.EXTEND_EPOCHS] = rec.config.get("epochs")
    return attrs


@dataclass(frozen=True)
class LaneView:
    """A lane as a take sees it: `trial` the running trial's id (None: none), and its latest
    checkpoint step."""

    lane_id: str
    ready: bool
    trial: int | None = None
    checkpoint_step: int | None = None


def choose(n: int, lanes: Sequence[LaneView], at_boundary: bool) -> tuple[list[str], list[int]]:
    """Pure: for `n` lanes to give back, (lanes still starting to stop now, trials to park).
    A starting lane costs nothing; a trial with the latest checkpoint loses least. Lanes
    between trials, and trials taken at their end, go when their lane next asks."""
    starting = [x.lane_id for x in lanes if not x.ready][:n]
    left = n - len(starting)
    if at_boundary or left <= 0:
        return starting, []
    running = [x for x in lanes if x.ready and x.trial is not None]
    running.sort(key=lambda x: (x.checkpoint_step is None, -(x.checkpoint_step or 0)))
    return starting, [x.trial for x in running[:left] if x.trial is not None]


def arbiter_handle() -> Any:
    """The service's arbiter: created by the first driver that asks, restarted by Ray."""
    import ray

    from sweeps.execution.cluster import on_head
    from sweeps.service.arbiter import Arbiter

    return (
        ray.remote(Arbiter)
        .options(
            name=names.ARBITER_ACTOR,
            namespace=names.ARBITER_NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_restarts=-1,
            **on_head(),
        )
        .remote()
    )


class Arbitration:
    """One sweep's side of the arbiter. Called, it is the pool's limit (lanes it may hold)."""

    def __init__(
        self, spec: Any, pool: Any, channel: Any, key: str, clock: Callable[[], float] = time.time
    ) -> None:
        from sweeps.common import identity
        from sweeps.spec.teams import load_teams

        self.spec, self.pool, self.channel, self.key, self.clock = spec, pool, channel, key, clock
        self.claimed_at = -1e9
        teams = load_teams()
        self.owner = identity.owner()
        self.team = teams.team_of(self.owner)
        self.weights = teams.weights()
        self.priority = priority()
        self.since = clock()
        r = spec.resources
        self.lane_cpus, self.lane_gpus = (
            r.workers * r.cpus_per_worker,
            r.workers * r.gpus_per_worker,
        )
        self.handle: Any = None
        self.target: int | None = None  # None until the arbiter first answers
        self.want = spec.budget.parallel
        self.driver: Any = None
        self.pending: Any = None  # (ref, sent at, generation)
        self.sent_at = -1e9
        self.gen = 0  # bumped by each take carried out: an answer to an older ask is not
        self.boundary_owed = 0  # lanes to give back at a trial's end
        self.seen_checkpoint = False
        self.ended: list[float] = []  # trial lengths seen, for the queue's estimate
        self.assigned: dict[int, float] = {}
        self.trials_left = 0
        self.queued = False  # what the study last said (names.SERVICE_QUEUED)

    def __call__(self) -> int:
        return self.target if self.target is not None else 0

    # ----- asking -------------------------------------------------------------------------------
    def first(self, want: int) -> int:
        """Asked once before any lane starts; returns how many lanes may start now."""
        import ray

        self.want = want
        try:
            self.handle = arbiter_handle()
            self._apply(*ray.get(self.handle.ask.remote(self.report()), timeout=FIRST_WAIT_S), 0)
        except Exception:
            self.handle = None  # asked again from the loop
        return min(want, self())

    def report(self) -> dict[str, Any]:
        held = self.pool.held()
        return {
            "ask": {
                "sweep": self.spec.name,
                "team": self.team,
                "priority": self.priority,
                "want": self.want,
                "held": held,
                "releasing": min(held, self._releasing()),
                "since": self.since,
                "preemptible": self._preemptible(),
            },
            "owner": self.owner,
            "weights": self.weights,
            "lane_cpus": self.lane_cpus,
            "lane_gpus": self.lane_gpus,
            "left_s": self._left_s(),
        }

    def tick(self) -> None:
        """One driver turn: take in an answer that came, send the next report when due."""
        import ray

        now = self.clock()
        if self.pending is not None:
            ref, sent, gen = self.pending
            if ray.wait([ref], timeout=0)[0]:
                self.pending = None
                try:
                    self._apply(*ray.get(ref), gen)
                except Exception:
                    self.handle = None  # killed or restarting: what it holds stays
            elif now - sent > ANSWER_WAIT_S:
                self.pending, self.handle = None, None
        if self.driver is not None:
            self._claim_warm(now)
            if self.pool.waiting() and self.driver.book.retries_waiting:
                self.pool.launch_waiting()  # a preempted trial's lane, in a sweep that drains
        if self.pending is None and now - self.sent_at >= REPORT_EVERY_S:
            self.sent_at = now
            if self.driver is not None:
                self._observe(now)
            try:
                self.handle = self.handle or arbiter_handle()
                self.pending = (self.handle.ask.remote(self.report()), now, self.gen)
            except Exception:
                self.handle = None

    # ----- the driver's side ---------------------------------------------------------------------
    def bind(self, driver: Any) -> Arbitration:
        self.driver = driver
        study = driver.study
        self.since = float(study.user_attrs.get(names.SUBMITTED) or self.since)
        if study.user_attrs.get(names.PRIORITY) != self.priority:
            study.set_user_attr(names.PRIORITY, self.priority)
        return self

    def _observe(self, now: float) -> None:
        """What the report says of the sweep: the lanes it could use, its trial lengths."""
        d = self.driver
        recs = list(d.running.records())
        live = {r.trial_id: r.assigned_at for r in recs}
        self.ended += [now - t for i, t in self.assigned.items() if i not in live]
        self.assigned = live
        self.seen_checkpoint = self.seen_checkpoint or any(r.checkpoint for r in recs)
        more = d.book.retries_waiting
        if d.status.launching:
            more += d._launch_decision().remaining
        self.trials_left = len(recs) + max(more, 0)
        self.want = min(d.spec.budget.parallel, self.trials_left)

    def _claim_warm(self, now: float) -> None:
        """Lanes still starting, while another sweep that ended left lanes idle and warm: those
        hold the resources ours wait for. Ours take the idle lanes of their own key (as at the
        start, `assemble.start_lanes`), and idle lanes of other keys are stopped."""
        starting = [x for x in self.pool.unstopped() if x.launched and not x.ready]
        if not starting or now - self.claimed_at < CLAIM_EVERY_S:
            return
        self.claimed_at = now
        try:
            got = self.channel.claim(self.key, len(starting))
            for lane_id, old in zip(got, starting, strict=False):
                self.pool.adopt(lane_id)
                self.channel.answer(p.next_key(old.lane_id, 1), p.Stop("a warm lane took over"))
                self.pool.mark_stopping(old.lane_id)
            if len(got) < len(starting):
                self.channel.release_idle(keep_key=self.key)
        except Exception:
            return  # the broker is busy: next time

    def _apply(self, target: int, take: Any, gen: int) -> None:
        self.target = target
        held = self.pool.held()
        self._mark_queued(target == 0 and held == 0 and self.want > 0)
        self.boundary_owed = min(self.boundary_owed, max(0, held - target))
        if take is None or gen != self.gen or self.driver is None:
            return
        stop, park = choose(take.lanes, self._lanes(), take.at_boundary)
        for lane_id in stop:  # never given a trial: its first request is seq 1
            self.driver.channel.answer(p.next_key(lane_id, 1), p.Stop(REASON))
            self.pool.mark_stopping(lane_id)
        now = self.clock()
        for trial_id in park:
            self.driver.book.parking.request_trial(trial_id, now)
        self.boundary_owed += take.lanes - len(stop) - len(park)
        self.gen += 1

    def _mark_queued(self, queued: bool) -> None:
        """The study says whether the sweep waits in the service's queue (`ls`, `show`)."""
        if self.driver is None or queued == self.queued:
            return
        try:
            self.driver.study.set_user_attr(names.SERVICE_QUEUED, queued)
            self.queued = queued
        except Exception:
            pass  # the store is busy: at the next answer

    def _lanes(self) -> list[LaneView]:
        chosen = self.driver.book.parking.trials
        on: dict[str, TrialRecord] = {}
        for rec in self.driver.running.records():
            if rec.trial_id not in chosen:
                on[rec.lane_id] = rec
        out = []
        for lane in self.pool.unstopped():
            if not lane.launched:
                continue
            rec = on.get(lane.lane_id)
            trial = rec.trial_id if rec else None
            step = rec.checkpoint_step if rec else None
            out.append(LaneView(lane.lane_id, lane.ready or lane.trials_run > 0, trial, step))
        return out

    def _releasing(self) -> int:
        if self.driver is None:
            return 0
        chosen = self.driver.book.parking.trials
        parking = sum(r.trial_id in chosen for r in self.driver.running.records())
        return parking + self.boundary_owed

    def _preemptible(self) -> bool:
        """Its trials park at a checkpoint: the built-in trainer's, or code that saved one."""
        t = self.spec.trainer
        if not self.spec.execution.checkpoint_every:
            return False
        own_code = t.entrypoint or t.command_line is not None
        return not own_code or self.seen_checkpoint

    def _left_s(self) -> float | None:
        """Lane-seconds of work left: trials not yet done times their mean length so far."""
        if not self.ended or self.driver is None:
            return None
        return round(self.trials_left * sum(self.ended) / len(self.ended), 1)


def attach(spec: Any, pool: Any, channel: Any, key: str, want: int) -> int:
    """On a service's shared broker, the pool's lanes follow the arbiter; returns how many
    lanes may start now (all `want` elsewhere)."""
    if not channel.shared:
        return want
    arb = Arbitration(spec, pool, channel, key)
    pool.limit = arb
    return arb.first(want)


def tick(driver: Any) -> None:
    """The driver's turn of its sweep's arbitration, where its pool has one (`attach`). A lane
    that asks for a trial while the sweep holds more than its target is stopped by the pool
    (`LanePool.recycle_reason`), and its replacement waits for the target to allow it."""
    arb = getattr(driver.pool, "limit", None)
    if isinstance(arb, Arbitration):
        if arb.driver is None:
            arb.bind(driver)
        arb.tick()


def set_priority(value: str) -> None:
    """The priority of the sweeps this process submits (`submit --priority`): checked here,
    passed to the driver in its environment (sweeps/jobs.py)."""
    os.environ[PRIORITY_ENV] = check_priority(value)


def service_queue(timeout: float = 30.0) -> dict[str, Any]:
    """The service's sweeps as its arbiter sees them: {pid, since, capacity, sweeps: [...]}
    (running first, then the queue in order); no sweeps where no driver ever asked."""
    from sweeps.common.errors import ServiceError
    from sweeps.execution import cluster

    address = os.environ.get("RAY_ADDRESS") or None
    if not address:
        from sweeps.service.local import auth_env, load

        info = load()
        if info is None:
            raise ServiceError("no sweeps service here: start one with `sweeps up`")
        address = info.ray_address
        cluster._set_auth_env(auth_env(info.token_path))
    cluster.ensure_ray(address)
    import ray  # after the service's auth settings: Ray reads them once, at import

    try:
        handle = ray.get_actor(names.ARBITER_ACTOR, namespace=names.ARBITER_NAMESPACE)
    except ValueError:
        return {"pid": None, "since": None, "capacity": None, "sweeps": []}
    return ray.get(handle.snapshot.remote(), timeout=timeout)  # type: ignore[no-any-return]
