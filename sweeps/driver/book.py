"""The trial book: every trial this driver asked for, from `ask` to `tell`.

It asks Optuna (claiming the trial at once, so a driver joining the study never mistakes it for
a crashed driver's), samples the params, builds what the training function receives, binds the
trial to a lane, turns each epoch's report into a prune decision, and records the end: the
Optuna state (through the `Teller`), the MLflow run (through the tracker), the trial's cost
(through the `Ledger`). What a trial's end means for the sweep (a failure limit, an exhausted
sampler) the driver asks with `failure_limit` and `sampler_stopped`: the book keeps trials, the
driver keeps the sweep. The trials in flight are the `RunningTrials` table it shares with the
driver.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from sweeps.common import names, timeline
from sweeps.common.errors import keep_end
from sweeps.contracts.observers import ObserverManager, Tracker
from sweeps.contracts.protocol import (
    Assignment,
    Decision,
    TrainerSettings,
    TrialResult,
)
from sweeps.contracts.records import SweepContext, TrialEnd, TrialRecord
from sweeps.driver import arbitration, outcomes, pause, recovery, retries
from sweeps.driver.ledger import Ledger, Spend
from sweeps.driver.policies import BudgetPolicy, FailurePolicy
from sweeps.driver.running import RunningTrials, TrialKey
from sweeps.driver.tells import Teller
from sweeps.driver.trial_config import (
    final_step,
)
from sweeps.execution.lane import Lane
from sweeps.search import constraints, space
from sweeps.search import study as st


class TrialBook:
    def __init__(
        self,
        ctx: SweepContext,
        tracker: Tracker,
        observers: ObserverManager,
        budget: BudgetPolicy,
        driver_id: str,
        trainer: TrainerSettings,
        running: RunningTrials,
        clock: Callable[[], float] = time.time,
    ) -> None:
        spec = ctx.spec
        self.spec, self.study, self.ctx = spec, ctx.study, ctx
        self.tracker, self.observers, self.budget = tracker, observers, budget
        self.driver_id = driver_id
        self.clock = clock
        self.failures = FailurePolicy(spec.budget.max_failed_trials)
        self.running = running
        self.attrs = running.attrs
        self.teller = Teller(self.study, tracker, self.attrs)
        self.ledger = Ledger(budget, lambda: self.clock())
        self.reported_objectives = outcomes.reported_objectives(spec)
        self.constraints = constraints.parse_all(spec.constraints)
        # Where no answer can prune, one-worker trials do not wait for it (`runtime.report`),
        # and a trial's end may overtake its last reports: it waits in `late`.
        prunes = outcomes.can_prune(spec, ctx.study)
        self.settings = dataclasses.replace(trainer, prunes=prunes)
        self.late: dict[TrialKey, tuple[TrialResult, float]] = {}
        self.killed: set[int] = set()  # trial ids a cancel stopped: FAIL in Optuna, runs KILLED
        self.retries_waiting = 0  # retries queued in Optuna, not asked for yet
        # `sweeps pause`: which running trials park, and at which checkpoint
        self.parking = pause.Parking(trainer.checkpoint_every, trainer.checkpoint_min_interval_s)
        self.preempted: set[int] = set()  # numbers of trials the arbiter parked, re-queued here

    # ----- ask / assign -----------------------------------------------------------------------
    def ask(self) -> TrialRecord:
        """A new trial, claimed and sampled. Raises what the sampler raises (the trial is then
        already told FAIL)."""
        # Claimed as it is created: a driver joining now must not take it for a crashed one's.
        trial = st.ask(self.study, {names.DRIVER: self.driver_id})
        now = self.clock()
        try:
            params = space.suggest(trial, self.spec)
        except Exception:
            self.teller.tell(trial, state=outcomes.states().FAIL)
            raise
        tid = st.trial_id(trial)
        rec = outcomes.new_record(self.spec, trial.number, tid, params, trial.user_attrs, now)
        rec.trial = trial
        again = rec.retry_of is not None or rec.requeued_from in self.preempted  # arbitration
        if again and self.retries_waiting:
            self.retries_waiting -= 1
        return rec

    def assign(self, rec: TrialRecord, lane: Lane, seq: int) -> Assignment:
        """Bind a sampled trial to a lane: MLflow run, Optuna links, the workers' assignment."""
        now = self.clock()
        rec.lane_id, rec.seq, rec.assigned_at = lane.lane_id, seq, now
        rec.startup_s = (now - lane.started_at) if lane.trials_run == 0 else 0.0
        self.attrs.add(rec.trial_id, {names.LANE: lane.lane_id, names.SEED: rec.seed})
        self.tracker.start_trial(self.ctx, rec)  # its run id comes back through link_run
        self.observers.trial_start(self.ctx, rec)
        self.running.add((lane.lane_id, seq), rec)
        if lane.trials_run == 0:
            timeline.mark("lane.first_request", lane=lane.lane_id)
        timeline.mark("trial.assigned", trial=rec.number, lane=lane.lane_id)
        lane.trials_run += 1
        r = rec
        return Assignment(r.number, r.seed, r.params, r.config, seq, self.settings, r.resume_from)

    def link_run(self, trial_id: int, run_id: str) -> None:
        """The tracker created a trial's MLflow run (see `Teller.link_run`)."""
        self.teller.link_run(trial_id, run_id, self.running.records())

    def tell_overdue(self, final: bool = False) -> None:
        """Tell the ended trials whose run id is overdue; `final`: every one, at the end."""
        if final or self.teller.waiting():
            self.teller.tell_overdue(self.running.records(), final)

    # ----- while it runs ----------------------------------------------------------------------
    def report(self, key: TrialKey, step: int, metrics: dict[str, float], cancel: str) -> Decision:
        """`cancel`: what cancelled the sweep's running trials ("" while none is cancelled)."""
        rec = self.running.get(key)
        if rec is None:
            return Decision.CANCEL  # ended already (the driver failed it): its workers move on
        if not cancel and self.parking.parks(
            rec, step, final_step(self.spec, rec.config), self.clock()
        ):
            return self._park(rec, step)  # this epoch is not logged: a resume runs it again
        if not rec.last_metrics:
            timeline.mark("trial.first_report", trial=rec.number)
        rec.last_step, rec.last_metrics = step, metrics
        self.tracker.log_epoch(self.ctx, rec, step, metrics)
        self.observers.epoch(self.ctx, rec, step, metrics)
        self.time_out(self.clock(), [rec])
        if rec.failure_cause == "timeout":
            return Decision.CANCEL  # past budget.trial_timeout_s: it ends now, `timed out`
        if cancel:
            if not rec.error:
                rec.error = cancel
                self.killed.add(rec.trial_id)
            return Decision.CANCEL
        missing = [m for m in self.reported_objectives if m not in metrics]
        if missing:
            rec.error = outcomes.missing(missing[0], metrics)
            return Decision.CANCEL
        if self.spec.multi_objective or not self.reported_objectives:
            return Decision.CONTINUE  # Optuna prunes single-objective studies only
        rec.trial.report(metrics[self.reported_objectives[0]], step)
        last = final_step(self.spec, rec.config)
        if last is not None and step >= last:
            return Decision.CONTINUE  # trained to the end: a complete result, not a pruned one
        return Decision.PRUNE if rec.trial.should_prune() else Decision.CONTINUE

    def _park(self, rec: TrialRecord, step: int) -> Decision:
        """A pause parks the trial: it ends now, resumable from its checkpoint."""
        if not rec.error:
            ckpt = self.parking.parked[rec.trial_id]
            rec.error = line = pause.parked_line(rec.number, step, ckpt)
            tags = {names.PARKED: str(ckpt or 0)}
            if rec.trial_id in self.parking.trials:  # the arbiter took its lane
                rec.error = line = arbitration.preempted_line(rec.number, step, ckpt)
                tags[names.PREEMPTED] = str(ckpt or 0)
            rec.last_step = step  # the end does not wait for this report (`finish`)
            self.killed.add(rec.trial_id)  # FAIL, cancelled: `resume` re-queues it
            if rec.run_id:
                self.tracker.set_tags(rec.run_id, tags)
            self.observers.notice(self.ctx, line)
        return Decision.CANCEL

    # ----- the end ----------------------------------------------------------------------------
    LATE_S = 10.0  # how long an end waits for the reports it overtook (Ray orders nothing)

    def finish(self, key: TrialKey, result: TrialResult, wait: bool = True) -> TrialEnd | None:
        rec = self.running.get(key)
        if wait and rec is not None and result.steps > rec.last_step:
            self.late[key] = (result, time.monotonic() + self.LATE_S)
            return None
        self.late.pop(key, None)
        if (rec := self.running.pop(key)) is None:
            return None
        extra = self.ledger.spend(rec, result)
        values: list[float] | None = None
        if result.state == "complete" and not rec.error:
            got = outcomes.objective_values(self.spec, rec, result, extra)
            if isinstance(got, str):
                rec.error = got
            else:
                values = got
        feasible = True
        if self.constraints and not rec.error:
            feasible = self._constrain(rec, result, extra, complete=values is not None)
        if rec.error:
            return self._end_failed(rec, rec.error, result, extra)
        self._record_attrs(rec, extra)
        if values is not None:
            self.teller.tell_linked(rec, values if len(values) > 1 else values[0])
            if len(values) == 1 and feasible:  # an infeasible value reaches no target
                self.budget.record_value(values[0], rec.number)
            end = TrialEnd("COMPLETE", values, result, extra)
        else:
            self.teller.tell_linked(rec, state=outcomes.states().PRUNED)
            end = TrialEnd("PRUNED", None, result, extra)
        self._ended(rec, end)
        return end

    def finish_late(self, all_: bool = False) -> None:
        """End the held trials whose reports came, or are overdue (`all_`: every one)."""
        if not self.late:
            return
        now = time.monotonic()
        for key, (result, until) in list(self.late.items()):
            rec = self.running.get(key)
            if all_ or until <= now or rec is None or rec.last_step >= result.steps:
                self.finish(key, result, wait=False)

    def fail(self, key: TrialKey, error: str) -> TrialEnd | None:
        self.late.pop(key, None)
        rec = self.running.pop(key)
        if rec is None:
            return None
        return self._end_failed(rec, error, None, self.ledger.spend(rec, None))

    def fail_all(self, error: str) -> None:
        """On an abrupt stop, nothing is left RUNNING: trials in flight are FAIL, runs KILLED."""
        for key in self.running.keys():
            rec = self.running.get(key)
            if rec is not None:
                self.killed.add(rec.trial_id)
            self.fail(key, error)

    def drop(self, rec: TrialRecord) -> None:
        """A sampled trial that never ran (its lane shape never came): FAIL, no run."""
        self.teller.tell(rec.trial, state=outcomes.states().FAIL)

    def time_out(self, now: float, recs: list[TrialRecord] | None = None) -> None:
        """Trials past budget.trial_timeout_s end at their next report; one that reaches none
        in `retries.GRACE_S` fails now (its lane ends the code when it returns)."""
        limit = self.spec.budget.trial_timeout_s
        for rec in retries.overdue(recs or self.running.records(), now, limit):
            rec.failure_cause, rec.error = "timeout", retries.timed_out_error(limit or 0.0)
        if recs is not None:
            return
        for rec in retries.stuck(self.running.records(), now, limit):
            self.fail((rec.lane_id, rec.seq), rec.error or retries.TIMED_OUT)

    def live_spend(self) -> tuple[float, float]:
        """The study's finished spend plus what running trials cost so far."""
        return self.ledger.live_spend(self.running.records())

    # ----- what the driver asks -----------------------------------------------------------------
    def failure_limit(self) -> str | None:
        """Why the sweep fails, when its trials reached the failure limit."""
        return self.failures.reason() if self.failures.exhausted() else None

    def sampler_stopped(self) -> bool:
        return self.teller.sampler_stopped

    def first_error(self) -> str:
        return self.failures.first_error

    def spend(self) -> Spend:
        return self.ledger.totals

    def write_overdue_attrs(self, all_: bool = False) -> None:
        self.attrs.write_overdue(all_=all_)

    # ----- internals --------------------------------------------------------------------------
    def _constrain(
        self, rec: TrialRecord, result: TrialResult, extra: dict[str, float], complete: bool
    ) -> bool:
        """Give Optuna the trial's constraint values before its tell: TPE, NSGA-II and GP read
        them from the told trial. A complete trial missing a name fails (`rec.error`), as one
        missing its objective does; a pruned one then goes without. Returns feasibility."""
        got = constraints.violations(
            self.constraints,
            rec.params,
            {**rec.last_metrics, **result.metrics},
            extra,
            self.spec.search_space,
        )
        if isinstance(got, str):
            if complete:
                rec.error = got
            return False
        for key, v in got.items():
            rec.trial.set_constraint(key, v)
        return all(v <= 0 for v in got.values())

    def _record_attrs(self, rec: TrialRecord, extra: dict[str, float]) -> None:
        keys = ("duration_s", "cost_usd", "gpu_hours", "train_seconds")
        self.attrs.add(rec.trial_id, {k: round(extra[k], 6) for k in keys})  # written at tell

    def _end_failed(
        self, rec: TrialRecord, error: str, result: TrialResult | None, extra: dict[str, float]
    ) -> TrialEnd:
        rec.error = error
        killed = rec.trial_id in self.killed
        attrs: dict[str, object] = {names.ERROR: keep_end(error)}
        retry = False
        if killed:  # not the trial's own failure: a resumed sweep runs it again
            attrs[names.CANCELLED] = True
            if rec.trial_id in self.parking.parked:
                attrs[names.PARKED] = self.parking.parked[rec.trial_id] or 0
                if rec.trial_id in self.parking.trials:  # preempted: it runs again in this sweep
                    attrs[names.PREEMPTED] = attrs[names.PARKED]
                    recovery.requeue_params(self.study, rec.params, arbitration.requeue_attrs(rec))
                    self.preempted.add(rec.number)
                    self.retries_waiting += 1  # run like a retry: its trial was counted
        else:
            rec.failure_cause = rec.failure_cause or retries.classify(error)
            r = self.spec.retries
            retry = retries.should_retry(rec.failure_cause, rec.attempt, r.max, r.on)
            attrs[names.FAILURE_CAUSE] = rec.failure_cause
            if retry:  # not counted against max_failed_trials: its params run again
                attrs[names.RETRIED] = True
        self.attrs.add(rec.trial_id, attrs)
        self._record_attrs(rec, extra)
        self.teller.tell_linked(rec, state=outcomes.states().FAIL)
        if retry:
            recovery.requeue_params(self.study, rec.params, retries.retry_attrs(rec))
            self.retries_waiting += 1
            line = retries.retried_line(rec, rec.failure_cause, self.spec.retries.max)
            self.observers.notice(self.ctx, line)
        elif not killed:
            self.failures.record(error)
        end = TrialEnd("FAIL", None, result, extra, killed=killed)
        self._ended(rec, end)
        return end

    def _ended(self, rec: TrialRecord, end: TrialEnd) -> None:
        train_s = round(end.extra.get("train_seconds", 0.0), 4)
        timeline.mark(
            "trial.ended", trial=rec.number, lane=rec.lane_id, state=end.state, train_s=train_s
        )
        self.tracker.end_trial(self.ctx, rec, end)
        self.observers.trial_end(self.ctx, rec, end)
