"""The trial book: every trial this driver asked for, from `ask` to `tell`.

It asks Optuna (claiming the trial at once, so a driver joining the study never mistakes it for
a crashed driver's), samples the params, builds what the training function receives, binds the
trial to a lane, turns each epoch's report into a prune decision, and records the end: the
Optuna state, the MLflow run (through the tracker), the trial's cost. What a trial's end means
for the sweep (a failure limit, an exhausted sampler) the driver reads from `failures` and
`sampler_stopped`: the book keeps trials, the driver keeps the sweep.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from sweeps import space, timeline, trial_logs
from sweeps import study as st
from sweeps.callbacks import CallbackManager, SweepContext, Tracker, TrialEnd, TrialRecord
from sweeps.execution.lane import Lane, LaneShape
from sweeps.policies import BudgetPolicy, FailurePolicy
from sweeps.protocol import Assignment, Decision, TrialResult, UserMetrics
from sweeps.spec import COMPUTED_METRICS
from sweeps.trial_attrs import PendingAttrs
from sweeps.trialconf import (
    final_step,
    trainer_settings,
    trial_config,
    trial_resources,
    trial_seed,
)

TrialKey = tuple[str, int]  # (lane, seq): a running trial


class TrialBook:
    def __init__(
        self,
        ctx: SweepContext,
        tracker: Tracker,
        observers: CallbackManager,
        budget: BudgetPolicy,
        driver_id: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        spec = ctx.spec
        self.spec, self.study, self.ctx = spec, ctx.study, ctx
        self.tracker, self.observers, self.budget = tracker, observers, budget
        self.driver_id = driver_id
        self.clock = clock
        self.settings = trainer_settings(spec)
        self.failures = FailurePolicy(spec.budget.max_failed_trials)
        self.running: dict[tuple[str, int], TrialRecord] = {}
        self.attrs = PendingAttrs(self.study, lambda: self.clock())  # with its next write
        # Ended trials whose Optuna tell waits for their MLflow run's id (trial_id -> the
        # record, the tell's values and state, and the monotonic time it waits until).
        self.untold: dict[int, tuple[TrialRecord, Any, Any, float]] = {}
        self.cost_usd = 0.0
        self.gpu_hours = 0.0
        self.trial_seconds = 0.0
        self.sampler_stopped = False
        reported = [o.metric for o in spec.objective_list() if o.metric not in COMPUTED_METRICS]
        self.reported_objectives = reported
        # Can a report's answer prune? If not, one-worker trials do not wait for it (`runtime.
        # report`), and a trial's end may overtake its last reports: it waits in `late`.
        nop = type(getattr(ctx.study, "pruner", None)).__name__ == "NopPruner"
        self.settings["prunes"] = bool(reported) and not (spec.multi_objective or nop)
        self.late: dict[TrialKey, tuple[TrialResult, float]] = {}

    # ----- ask / assign -----------------------------------------------------------------------
    def ask(self) -> TrialRecord:
        """A new trial, claimed and sampled. Raises what the sampler raises (the trial is then
        already told FAIL)."""
        # Claimed as it is created: a driver joining now must not take it for a crashed one's.
        trial = st.ask(self.study, {"sweeps.driver": self.driver_id})
        now = self.clock()
        try:
            params = space.suggest(trial, self.spec)
        except Exception:
            self._tell(trial, state=_states().FAIL)
            raise
        res = trial_resources(self.spec, params)
        attrs = trial.user_attrs
        rec = TrialRecord(
            number=trial.number,
            trial_id=st.trial_id(trial),
            params=params,
            config=trial_config(self.spec, params),
            seed=trial_seed(self.spec, trial.number),
            asked_at=now,
            assigned_at=now,
            requeued_from=attrs.get("sweeps.requeued_from"),
            resumed_from_trial=attrs.get("sweeps.resumed_from_trial"),
            resume_from=attrs.get("sweeps.resume_checkpoint"),
            **res,
        )
        rec.trial = trial
        placement = self.spec.resources.placement
        rec.shape = LaneShape(rec.workers, rec.cpus_per_worker, rec.gpus_per_worker, placement)
        return rec

    def assign(self, rec: TrialRecord, lane: Lane, seq: int) -> Assignment:
        """Bind a sampled trial to a lane: MLflow run, Optuna links, the workers' assignment."""
        now = self.clock()
        rec.lane_id, rec.seq, rec.assigned_at = lane.lane_id, seq, now
        rec.startup_s = (now - lane.started_at) if lane.trials_run == 0 else 0.0
        self.attrs.add(rec.trial_id, {"sweeps.lane": lane.lane_id, "sweeps.seed": rec.seed})
        self.tracker.start_trial(self.ctx, rec)  # its run id comes back through link_run
        self.observers("on_trial_start", self.ctx, rec)
        self.running[(lane.lane_id, seq)] = rec
        if lane.trials_run == 0:
            timeline.mark("lane.first_request", lane=lane.lane_id)
        timeline.mark("trial.assigned", trial=rec.number, lane=lane.lane_id)
        lane.trials_run += 1
        return Assignment(
            trial_number=rec.number,
            seed=rec.seed,
            params=rec.params,
            config=rec.config,
            seq=seq,
            trainer=self.settings,
            resume_from=rec.resume_from,
        )

    def link_run(self, trial_id: int, run_id: str) -> None:
        """The tracker created a trial's MLflow run: link it both ways. A trial that finished
        first (its run was made late, a tracking server that blinked) keeps the link in the
        study instead: Optuna's finished trials are read-only."""
        import optuna

        live = trial_id in self.untold  # ended, not told yet
        for rec in self.running.values():
            if rec.trial_id == trial_id:
                rec.run_id, live = run_id, True
        if live:
            self.attrs.add(trial_id, {"mlflow_run_id": run_id})
        else:
            try:
                st.set_trial_attr(self.study, trial_id, "mlflow_run_id", run_id)
            except optuna.exceptions.UpdateFinishedTrialError:
                number = st.trial_number(self.study, trial_id)
                self.study.set_user_attr(f"sweeps.run_of_trial.{number}", run_id)
        if trial_id in self.untold:  # linked while still RUNNING: now it may be told
            self._tell_untold(trial_id)

    # An ended trial waits this long for its run's id before it is told anyway (the id then
    # goes on the study: `sweeps.run_of_trial.N`).
    LINK_WAIT_S = 10.0

    def _tell_linked(self, rec: TrialRecord, values: Any = None, state: Any = None) -> None:
        """Tell Optuna once the trial's MLflow run is linked: a told trial is read-only. A
        tiny trial can end before the writer process has made its run; the driver used to
        sleep for it (14% of its time in a sweep of 300 tiny trials), now it serves the lanes
        and `link_run` tells the trial when the id comes."""
        if rec.run_id is not None:
            self._tell(rec.trial, values, state)
        else:
            self.untold[rec.trial_id] = (rec, values, state, time.monotonic() + self.LINK_WAIT_S)

    def tell_overdue(self, wait_s: float = 0.0) -> None:
        """Tell the ended trials whose run id has not come within LINK_WAIT_S; with `wait_s`
        (the sweep's end), first give the ids that long to come."""
        deadline = time.monotonic() + wait_s
        while self.untold and time.monotonic() < deadline:
            for trial_id, run_id in self.tracker.created_runs():
                self.link_run(trial_id, run_id)
            if self.untold:
                time.sleep(0.02)
        now = time.monotonic()
        for trial_id in [k for k, v in self.untold.items() if wait_s or v[3] <= now]:
            self._tell_untold(trial_id)

    def _tell_untold(self, trial_id: int) -> None:
        rec, values, state, _ = self.untold.pop(trial_id)
        self._tell(rec.trial, values, state)

    # ----- while it runs ----------------------------------------------------------------------
    def report(
        self, key: tuple[str, int], step: int, metrics: dict[str, float], cancel: bool
    ) -> Decision:
        rec = self.running.get(key)
        if rec is None:
            return Decision.CANCEL  # ended already (the driver failed it): its workers move on
        if not rec.last_metrics:
            timeline.mark("trial.first_report", trial=rec.number)
        rec.last_step, rec.last_metrics = step, metrics
        self.tracker.log_epoch(self.ctx, rec, step, metrics)
        self.observers("on_epoch", self.ctx, rec, step, metrics)
        if cancel:
            rec.error = rec.error or "cancelled: sweep interrupted"
            return Decision.CANCEL
        missing = [m for m in self.reported_objectives if m not in metrics]
        if missing:
            rec.error = _missing(missing[0], metrics)
            return Decision.CANCEL
        if self.spec.multi_objective or not self.reported_objectives:
            return Decision.CONTINUE  # Optuna prunes single-objective studies only
        rec.trial.report(metrics[self.reported_objectives[0]], step)
        last = final_step(self.spec, rec.config)
        if last is not None and step >= last:
            return Decision.CONTINUE  # trained to the end: a complete result, not a pruned one
        return Decision.PRUNE if rec.trial.should_prune() else Decision.CONTINUE

    def restarted(self, key: tuple[str, int], restarts: int) -> None:
        rec = self.running.get(key)
        if rec is None:
            return
        rec.restarts = restarts
        self.attrs.write(rec.trial_id, {"sweeps.restarts": restarts})
        self.tracker.trial_restarted(self.ctx, rec)
        self.observers("on_trial_restart", self.ctx, rec)

    def log(self, key: tuple[str, int], text: str, rank: int = 0) -> None:
        """A rank's output: into the live log file and the run's log, each line prefixed with
        its rank when the trial has several."""
        rec = self.running.get(key)
        if rec is None:
            return
        if rec.workers > 1:
            text = "".join(f"[rank {rank}] {line}" for line in text.splitlines(True))
        rec.log += text
        trial_logs.append(self.spec.name, rec.number, text)

    def user_logged(self, ev: Any) -> None:
        """What training code logged with sweeps.log / log_artifact / log_figure."""
        rec = self.running.get(ev.key)
        if rec is None:
            return
        if isinstance(ev, UserMetrics):
            self.tracker.log_metrics(self.ctx, rec, ev.step, ev.metrics)
        else:
            self.tracker.log_bytes(self.ctx, rec, ev.name, ev.data)

    def checkpointed(self, key: tuple[str, int], step: int, path: str) -> None:
        """Remember the trial's latest persisted checkpoint in Optuna: if this driver dies, a
        resumed sweep continues the trial from there."""
        rec = self.running.get(key)
        if rec is not None:
            rec.checkpoint = path
            attrs = {"sweeps.checkpoint": path, "sweeps.checkpoint_step": step}
            self.attrs.write(rec.trial_id, attrs)  # now: a resumed sweep starts from it

    # ----- the end ----------------------------------------------------------------------------
    LATE_S = 10.0  # how long an end waits for the reports it overtook (Ray orders nothing)

    def finish(self, key: TrialKey, result: TrialResult, wait: bool = True) -> TrialEnd | None:
        rec = self.running.get(key)
        if wait and rec is not None and result.steps > rec.last_step:
            self.late[key] = (result, time.monotonic() + self.LATE_S)
            return None
        self.late.pop(key, None)
        if (rec := self.running.pop(key, None)) is None:
            return None
        extra = self._spend(rec, result)
        values: list[float] | None = None
        if result.state == "complete" and not rec.error:
            values = self._objective_values(rec, result, extra)
        if rec.error:
            return self._end_failed(rec, rec.error, result, extra)
        self._record_attrs(rec, extra)
        if values is not None:
            self._tell_linked(rec, values if len(values) > 1 else values[0])
            if len(values) == 1:
                self.budget.record_value(values[0])
            end = TrialEnd("COMPLETE", values, result, extra)
        else:
            self._tell_linked(rec, state=_states().PRUNED)
            end = TrialEnd("PRUNED", None, result, extra)
        self._ended(rec, end)
        return end

    def finish_late(self, all_: bool = False) -> None:
        """End the held trials whose reports came, or are overdue (`all_`: every one)."""
        now = time.monotonic()
        for key, (result, until) in list(self.late.items()):
            rec = self.running.get(key)
            if all_ or until <= now or rec is None or rec.last_step >= result.steps:
                self.finish(key, result, wait=False)

    def fail(self, key: tuple[str, int], error: str) -> TrialEnd | None:
        self.late.pop(key, None)
        rec = self.running.pop(key, None)
        if rec is None:
            return None
        return self._end_failed(rec, error, None, self._spend(rec, None))

    def fail_all(self, reason: str) -> None:
        """On an abrupt stop, nothing is left RUNNING: trials in flight are FAIL, runs KILLED."""
        for key in list(self.running):
            self.fail(key, f"cancelled: {reason}")

    def drop(self, rec: TrialRecord) -> None:
        """A sampled trial that never ran (its lane shape never came): FAIL, no run."""
        self._tell(rec.trial, state=_states().FAIL)

    def costs(self, rec: TrialRecord) -> tuple[float, float, float]:
        """(seconds, cost_usd, gpu_hours) of a trial so far."""
        from tracking.costs import resources_cost

        seconds = self.clock() - rec.assigned_at
        return (seconds, *resources_cost(rec, seconds))

    def live_spend(self) -> tuple[float, float]:
        """The study's finished spend plus what running trials cost so far."""
        cost, gpuh = sum(self.budget.costs), sum(self.budget.gpu_hours)
        for rec in self.running.values():
            _, c, g = self.costs(rec)
            cost, gpuh = cost + c, gpuh + g
        return cost, gpuh

    # ----- internals --------------------------------------------------------------------------
    def _objective_values(
        self, rec: TrialRecord, result: TrialResult, extra: dict[str, float]
    ) -> list[float] | None:
        metrics = {**rec.last_metrics, **result.metrics}
        computed = {
            "cost_usd": extra["cost_usd"],
            "gpu_hours": extra["gpu_hours"],
            "train_seconds": extra["train_seconds"],
            "param_count": metrics.get("param_count"),
        }
        values = []
        for o in self.spec.objective_list():
            v = metrics.get(o.metric, computed.get(o.metric))
            if v is None or not math.isfinite(v):
                rec.error = _missing(o.metric, metrics)
                return None
            values.append(float(v))
        return values

    def _spend(self, rec: TrialRecord, result: TrialResult | None) -> dict[str, float]:
        seconds, cost, gpuh = self.costs(rec)
        self.cost_usd += cost
        self.gpu_hours += gpuh
        self.trial_seconds += seconds
        self.budget.record(cost, gpuh)
        extra = {
            "duration_s": seconds,
            "train_seconds": float(result.train_seconds if result else seconds),
            "startup_seconds": rec.startup_s,
            "queued_seconds": rec.assigned_at - rec.asked_at,
            "cost_usd": cost,
            "gpu_hours": gpuh,
            "restarts": float(rec.restarts),
        }
        if result is not None and result.worker_rss_mb:
            extra["worker_rss_mb"] = float(result.worker_rss_mb)
        return extra

    def _record_attrs(self, rec: TrialRecord, extra: dict[str, float]) -> None:
        keys = ("duration_s", "cost_usd", "gpu_hours", "train_seconds")
        self.attrs.add(rec.trial_id, {k: round(extra[k], 6) for k in keys})  # written at tell

    def _end_failed(
        self, rec: TrialRecord, error: str, result: TrialResult | None, extra: dict[str, float]
    ) -> TrialEnd:
        rec.error = error
        self.attrs.add(rec.trial_id, {"sweeps.error": error[:2000]})
        self._record_attrs(rec, extra)
        self._tell_linked(rec, state=_states().FAIL)
        self.failures.record(error)
        end = TrialEnd("FAIL", None, result, extra)
        self._ended(rec, end)
        return end

    def _ended(self, rec: TrialRecord, end: TrialEnd) -> None:
        train_s = end.extra.get("train_seconds", 0.0)
        timeline.mark(
            "trial.ended",
            trial=rec.number,
            lane=rec.lane_id,
            state=end.state,
            train_s=round(train_s, 4),
        )
        self.tracker.end_trial(self.ctx, rec, end)
        self.observers("on_trial_end", self.ctx, rec, end)

    def _tell(self, trial: Any, values: Any = None, state: Any = None) -> None:
        self.attrs.write(st.trial_id(trial))  # its last write: a told trial is read-only
        if st.tell(self.study, trial, values, state=state):
            self.sampler_stopped = True


def _missing(metric: str, metrics: dict[str, float]) -> str:
    return (
        f"objective metric '{metric}' is not among the reported metrics "
        f"({', '.join(sorted(metrics)) or 'none'})"
    )


def _states() -> Any:
    import optuna

    return optuna.trial.TrialState
