"""The driver: the loop that carries out a sweep, and the one writer to Optuna and MLflow.

It only dispatches: events from the lanes go to the trial book (trials), the lane pool (worker
groups) or the sweep status (state). `step()` is one turn; unit tests drive it against a fake
lane pool and an in-memory study, with no Ray at all."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sweeps.common import figures, timeline
from sweeps.common.errors import ProtocolError, one_line
from sweeps.common.words import plural
from sweeps.contracts import protocol as p
from sweeps.contracts.observers import ObserverManager, Tracker
from sweeps.contracts.protocol import TrainerSettings
from sweeps.contracts.records import SweepContext, SweepOutcome
from sweeps.driver import arbitration, convergence, pause, recovery, retries, signals, summary
from sweeps.driver.book import TrialBook
from sweeps.driver.define_by_run import DefineByRun
from sweeps.driver.pbt_run import PbtRun
from sweeps.driver.policies import BudgetPolicy
from sweeps.driver.quota_watch import QuotaWatch
from sweeps.driver.replicate_runs import ReplicateRuns
from sweeps.driver.retainer import Retainer
from sweeps.driver.running import RunningTrials
from sweeps.driver.state import Ending, SweepStatus
from sweeps.driver.trial_config import trainer_settings
from sweeps.execution.lane import not_placed
from sweeps.execution.pool import LanePool
from sweeps.search import liveness
from sweeps.search.study import counted_trials
from sweeps.search.trial_attrs import PendingAttrs
from sweeps.spec import Spec


@dataclass
class Driver:
    spec: Spec
    study: Any
    channel: p.Channel
    pool: LanePool
    tracker: Tracker
    observers: ObserverManager
    storage_url: str
    trainer: TrainerSettings | None = None  # the plan's; made from the spec where not given
    enqueue: list[dict[str, Any]] = field(default_factory=list)
    install_signals: bool = True
    clock: Callable[[], float] = time.time
    wall_since: float | None = None  # when the command started (wall time counts from there)
    define_by_run: DefineByRun = field(default_factory=DefineByRun)  # sweeps.optimize's side

    def __post_init__(self) -> None:
        self.driver_id = uuid.uuid4().hex[:12]
        self.status = SweepStatus()
        self.budget = BudgetPolicy(self.spec)
        self.started = self.clock()
        spec = self.spec
        self.ctx = SweepContext(spec, spec.name, self.storage_url, self.started, study=self.study)
        trainer = self.trainer or trainer_settings(spec)
        attrs = PendingAttrs(self.study, lambda: self.clock())  # written with a trial's next write
        self.running = RunningTrials(self.ctx, self.tracker, self.observers, attrs)
        self.book = TrialBook(
            self.ctx,
            self.tracker,
            self.observers,
            self.budget,
            self.driver_id,
            trainer,
            self.running,
            self.clock,
        )
        self.pool.clock = self.clock  # lane start-up times, on the clock the trials use
        self.replicates = ReplicateRuns(self.ctx, self.channel, self.pool, self.book)
        notice = lambda line: self.observers.notice(self.ctx, line)  # noqa: E731
        self.retainer = Retainer(spec, self.study, notice)  # `checkpoints:` retention
        self.pbt = PbtRun(self.ctx, self.tracker)  # `search: pbt`
        self.pulse = liveness.Pulse(self.study, self.driver_id, self.started, session=self._session)
        self._restore: Callable[[], None] = lambda: None
        self._cancel_note = ""  # what cancelled running trials, in their error (and why KILLED)
        self._linked = False  # the MLflow parent run's ids are on the study

    def start(self) -> None:
        self.budget.load(recovery.open_sweep(self.ctx, self.driver_id, self.tracker, self.enqueue))
        if self.budget.watch is not None:  # budget.stop_when: the history so far, in order
            self.budget.watch.load(self.study)
        # Quotas: the team's other sweeps spend from the same one while this runs.
        self.budget.quota = QuotaWatch.started(self.storage_url, self.ctx.owner, self.ctx.team)
        self.observers.sweep_start(self.ctx)
        if self.install_signals:  # Ctrl-C drains, then cancels; SIGTERM cancels at once
            self._restore = signals.install(self.interrupt, self.terminate)
        d = self._launch_decision()
        if not d.launch:
            self.status.drain(d.reason, d.ends_as)
        for _ in range(min(self.spec.budget.parallel, d.remaining) - self.pool.active()):
            self.pool.start()  # the runner may have started some while the stores opened

    def step(self, timeout: float = 0.25) -> bool:
        """One turn: events, stop rules, ended lanes. False once no lane may run a trial:
        lanes told to stop tear down on their own, and the driver does not wait for them."""
        for ev in self.pbt.events(self.channel.poll(timeout), self.status):  # `search: pbt`
            self._dispatch(ev)
        for trial_id, run_id in self.tracker.created_runs():
            self.book.link_run(trial_id, run_id)
        if not self._linked:
            self._link(0)
        self.book.tell_overdue()
        self.book.write_overdue_attrs()
        self._tick()
        arbitration.tick(self)  # on a service, its fair share of lanes
        self._reap()
        self.retainer.tick(rec.number for rec in self.running.records())  # after a trial ends
        if self.pool.waiting():
            self.pool.launch_waiting(self._worth_starting)
        for lane, line, waited in self.pool.stalled():
            self.observers.notice(self.ctx, f"lane {lane.lane_id} {line} ({waited:.0f} s)")
        self.replicates.serve(self.status, bool(self.running) or self.book.teller.waiting())
        going = self._let_starting_lanes_go()
        self.channel.flush()
        return going

    def run(self) -> SweepOutcome:
        self.start()
        try:
            while self.step():
                continue
        except KeyboardInterrupt:
            self._cancel("interrupted (Ctrl-C)", "interrupted: driver stopped", Ending.INTERRUPTED)
        return self.finish()

    def interrupt(self) -> None:
        """Ctrl-C: the first drains, the second cancels running trials, the third gives up."""
        if not self.status.interrupt():
            raise KeyboardInterrupt
        if self.status.cancelling:
            self._cancel_note = self._cancel_note or "interrupted (Ctrl-C)"

    def terminate(self) -> None:
        """SIGTERM (`kill`, a job stopped): running trials are cancelled at once."""
        term = "terminated (SIGTERM): running trials cancelled"
        self._cancel("terminated (SIGTERM)", term, Ending.CANCELLED)

    def _cancel(self, note: str, reason: str, ends_as: Ending) -> None:
        """Cancel running trials; `note` goes into their error (the first cancel's stays)."""
        self._cancel_note = self._cancel_note or note
        self.status.cancel(reason, ends_as)

    def _trial_cancel(self) -> str:
        """What a trial stopped now is told it ended by ("" while the sweep is not cancelling)."""
        if not self.status.cancelling:
            return ""
        return self._cancel_note or f"cancelled: {self.status.reason}"

    def _dispatch(self, ev: Any) -> None:
        book = self.book
        if self.replicates.handle(ev, self._trial_cancel()):
            return  # a replicate's event (evaluate): not a trial of the study
        match ev:
            case p.NextTrial():
                self.pool.ready(ev.lane)
                answer = self._next(ev)
                if isinstance(answer, p.Stop) and self.replicates.hold(ev, answer, self.status):
                    return  # answered with a replicate once the search is over
                self.channel.answer(p.next_key(ev.lane, ev.seq), answer)
                if isinstance(answer, p.Stop) and self.pool.mark_stopping(ev.lane):
                    self._replace()
            case p.Report():
                decision = book.report(ev.key, ev.step, ev.metrics, self._trial_cancel())
                self.channel.answer(p.step_key(ev.lane, ev.seq, ev.step), decision)
                book.finish_late()  # an end that overtook this report
            case p.Finished():
                self.pool.record_rss(ev.lane, ev.result.worker_rss_mb)
                book.finish(ev.key, ev.result)
            case p.Failed():
                book.fail(ev.key, ev.error)
            case p.Restarted():
                self.running.restarted(ev.key, ev.restarts)
            case p.Log():
                self.running.log(ev.key, ev.text, ev.rank)
            case p.Checkpointed():
                self.running.checkpointed(ev.key, ev.step, ev.path)
                if (rec := self.running.get(ev.key)) is not None:  # `checkpoints:` retention
                    self.retainer.checkpointed(rec.number, ev.step, ev.path, rec.resume_from)
            case p.UserMetrics() | p.UserArtifact():
                self.running.user_logged(ev)
            case p.Suggest():
                got = self.define_by_run.suggest(self.running, ev)
                self.channel.answer(p.suggest_key(ev.lane, ev.seq, ev.call), got)
            case p.TrialAttr():
                self.define_by_run.set_attr(self.running, ev)
            case p.StopStudy():
                self.status.fail(self.define_by_run.stop(ev))
            case _:
                raise ProtocolError(f"unknown event from the lanes: {ev!r:.200}")
        if (limit := book.failure_limit()) is not None:
            self.status.fail(limit)
        if book.sampler_stopped():
            self.status.drain("search space exhausted (the sampler stopped the study)")

    def _next(self, ev: p.NextTrial) -> p.NextAnswer:
        lane = self.pool.get(ev.lane)
        if lane is None:
            return p.Stop("not a lane of this sweep")
        if self.status.cancelling:  # a sweep that ends leaves its lanes warm (on a service)
            return p.Stop("cancelled", keep_warm=True)
        why = self.pool.recycle_reason(lane)
        if why:
            return p.Stop(why)  # a fresh lane replaces this one when it ends
        parked = self.pool.take_parked(lane.shape)
        if parked is not None:  # a trial sampled earlier for this lane's shape
            return self.book.assign(parked, lane, ev.seq)
        retrying = self._retrying()  # a retry runs on a spent budget: its trial was counted
        if not self.status.launching and not retrying:
            return p.Stop(self.status.reason, keep_warm=True)
        with liveness.launch_lock(self.study):
            d = self._launch_decision()
            if not d.launch and not retrying:
                self.status.drain(d.reason, d.ends_as)
                return p.Stop(d.reason, keep_warm=True)
            try:
                rec = self.book.ask()
                self.pbt.asked(rec)
            except Exception as e:
                self.status.fail(f"sampler failed: {one_line(e)}")
                return p.Stop(self.status.reason, keep_warm=True)
        if rec.shape != lane.shape:
            # Resources are searched and this trial needs another worker-group shape: it waits
            # for a lane of its own, which replaces this one (the lane count stays `parallel`).
            self.pool.park(rec.shape, rec)
            return p.Stop("replaced by a lane of another shape")
        return self.book.assign(rec, lane, ev.seq)

    def _tick(self) -> None:
        now = self.clock()
        asked = self.pulse.tick(now)
        if asked is liveness.Request.INTERRUPT:
            why = "interrupted: the service stopped (sweeps down); `sweeps resume` continues it"
            self._cancel("interrupted: sweeps down", why, Ending.INTERRUPTED)
        elif asked is liveness.Request.CANCEL:
            why = "cancelled (sweeps cancel): running trials stopped"
            self._cancel("cancelled: sweeps cancel", why, Ending.CANCELLED)
        elif asked is liveness.Request.PAUSE:  # running trials park at their next checkpoint
            self.status.drain(pause.REASON, Ending.PAUSED)
            self.book.parking.request(now)
        elif asked is liveness.Request.STOP:
            self.status.drain("stop requested (sweeps stop)", Ending.STOPPED)
        self.book.finish_late()
        self.book.time_out(now)  # budget.trial_timeout_s
        for d in self.budget.limits(now - self.started, self.book.live_spend):
            (self.status.cancel if d.cancels else self.status.drain)(d.reason, d.ends_as)

    def _reap(self) -> None:
        for lane in self.pool.reap():  # lanes that died while they could run trials
            if not_placed(lane.error) and self._unplaced(lane):
                continue
            for key in self.running.on_lane(lane.lane_id):
                msg = one_line(lane.error) if lane.error else "lane ended while the trial ran"
                self.book.fail(key, f"worker group failed: {msg}")
            self.replicates.lane_lost(lane.lane_id, one_line(lane.error or "lane ended"))
            if self.pool.too_many_deaths():
                lost = plural(self.pool.lanes_lost(), "lane")
                self.status.fail(f"{lost} failed: {one_line(lane.error)}")
            self._replace()

    def _unplaced(self, lane: Any) -> bool:
        """A lane whose workers Ray Train never placed (it tried twice). It fails the sweep
        with what it waited for, unless this sweep's own running lanes hold that, or the
        cluster could hold it and a service's other work holds it now (it starts again:
        False), or others of its lanes run trials (the sweep goes on with those)."""
        wait = self.pool.unplaced(lane)
        if wait.own:
            return False
        if wait.fits and self.channel.shared:  # on a service it queues behind others' work
            self.observers.notice(self.ctx, f"lane {lane.lane_id} still {wait.line}; queued")
            return False
        bound = f"execution.lane_start_timeout_s={self.spec.execution.lane_start_timeout_s:g}"
        what = f"lane not placed, twice ({bound}): {wait.line}"
        running = self.pool.ready_count()
        if running:
            self.observers.notice(self.ctx, f"{what}; going on with {plural(running, 'lane')}")
        else:
            self.status.fail(what)
        return True

    def _replace(self) -> None:
        """A lane stopped (recycled, another shape needed, no more trials) or died: start its
        replacement now, if any; Ray holds it until the old lane's resources are free."""
        st, parallel = self.status, self.spec.budget.parallel
        # Replicates (evaluate) and retries of failed trials wait for lanes.
        more = self.replicates.wants_lanes(st) or self._retrying()
        may = (lambda: True) if more else self._may_launch
        self.pool.replace(parallel, st.launching or more, st.cancelling, may)

    def _retrying(self) -> bool:
        """A failed trial's retry waits, and the sweep's state still runs it (`retries`)."""
        st = self.status.state
        return self.book.retries_waiting > 0 and retries.may_run(
            st.name, getattr(st, "ends_as", "")
        )

    def _may_launch(self) -> bool:
        """Whether the sweep still wants another trial (asked only when a lane would start)."""
        return self.status.launching and self._launch_decision().launch

    def _worth_starting(self, start_s: float | None) -> bool:
        """A waiting lane starts while the sweep still launches and its trials not yet begun
        would outlast the start (StartPolicy.worth_starting)."""
        if not self.status.launching:
            return False
        longest = self.running.longest_s(self.clock())
        worth = self.pool.worth_starting
        # The whole budget bounds the trials left: most turns end here, without the count query.
        if not worth(self.spec.budget.trials, longest, start_s):
            return False
        d = self._launch_decision()
        return d.launch and worth(d.remaining, longest, start_s)

    def _link(self, timeout: float | None) -> None:
        """The parent run, once the tracker has made it (in its writer process, while the
        first trials run): its ids go on the study. MLflow refusing it fails the sweep."""
        try:
            if not self.tracker.sweep_run(self.ctx, timeout):
                return
            recovery.link_parent(self.ctx)
        except Exception as e:
            self.status.fail(f"MLflow parent run: {one_line(e)}")
        self._linked = True

    def _let_starting_lanes_go(self) -> bool:
        """Whether the loop goes on. Once nothing runs and nothing more will, a lane still
        starting is not waited for: its first request for a trial is answered `Stop` now
        (on a service it then waits warm for the next sweep). Waiting for it would keep a warm
        sweep's end seconds behind its last trial, or up to SWEEPS_LANE_IDLE_S when that lane
        is queued behind another sweep's idle ones."""
        if not self.running and self.status.launching:
            # A budget can be spent with no lane left to ask for a trial (the last one was
            # recycled, the next still waits to start): nothing more will run.
            d = self._launch_decision()
            if not d.launch:
                self.status.drain(d.reason, d.ends_as)
        if self.running or self.status.launching or self.pool.waiting_shape() or self._retrying():
            return self.pool.active() > 0 or bool(self.running)
        for lane in self.pool.unstopped():
            if not lane.launched:  # still waiting to start: it never will
                self.pool.mark_stopping(lane.lane_id)
            elif lane.trials_run == 0 and not self.replicates.wanted(self.status):
                # never given a trial (nor held for a replicate): its first request is seq 1
                stop = p.Stop(self.status.reason or "sweep ended", keep_warm=True)
                self.channel.answer(p.next_key(lane.lane_id, 1), stop)
                self.pool.mark_stopping(lane.lane_id)
        return self.pool.active() > 0

    def _session(self) -> dict[str, Any]:
        """This driver's session facts for `ls` / `show` (see `sweeps.common.figures`)."""
        ledger, recs = self.book.ledger, list(self.running.records())
        since = self.wall_since or self.started
        return figures.session(
            since, self.clock(), ledger.booked + len(recs), ledger.running_cost(recs)
        )

    def _launch_decision(self) -> Any:
        return self.budget.check(counted_trials(self.study), len(self.running))

    def finish(self) -> SweepOutcome:
        timeline.mark("sweep.finishing")
        self.budget.stop_watching()
        for rec in self.pool.drop_parked():
            self.book.drop(rec)
        self.book.finish_late(all_=True)
        left = self._trial_cancel() or f"cancelled: {self.status.reason or 'driver stopped'}"
        self.book.fail_all(left)
        self.book.tell_overdue(final=True)  # nothing left RUNNING
        self.book.write_overdue_attrs(all_=True)
        self.retainer.apply(set(), final=True)  # `checkpoints:` retention, bytes for `ls`
        if not self._linked:
            self._link(600)
        if getattr(self.status.state, "ends_as", None) is Ending.PAUSED:
            self.status.restate(pause.ended_reason(len(self.book.parking.parked), self.spec.name))
        wall = self.clock() - (self.wall_since or self.started)
        s = summary.conclude(self.study, self.spec.name, self.status, self.book, wall)
        s = self.replicates.conclude(s, left)  # evaluate: records, and the best by the mean
        if (c := self.budget.converged) is not None and s.reason == c.reason:
            convergence.record(self.study, self.tracker, self.ctx.parent_run_id, c)
        self.tracker.end_sweep(self.ctx, s)
        self.observers.sweep_end(self.ctx, s)
        summary.record(self.study, s)
        liveness.heartbeat(self.study, self.driver_id, alive=False, session=self._session())
        self._restore()
        timeline.mark("sweep.summarized")
        errors = self.tracker.flush() + self.observers.errors
        timeline.mark("tracker.flushed")
        for trial_id, run_id in self.tracker.created_runs():  # runs a blinking server made late
            self.book.link_run(trial_id, run_id)
        timeline.mark("sweep.recorded")
        return SweepOutcome.of(s, self.ctx, self.tracker, errors)
