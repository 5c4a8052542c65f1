"""Replicated winners on the search's lanes: the driver's side of `evaluate`.

When the search ends (budget reached, `sweeps stop`), a lane that asks for its next trial is
not told to stop: its request is held here. Once no search trial is left running or untold,
the top_k complete trials are planned (`sweeps.driver.replicates`) and each held lane is
answered with a replicate: an Assignment like a trial's, with a number and seed of its own and
the trial's params. Its events come here, not to the trial book: replicates are not Optuna
trials, so the sampler never learns from them. Each runs as an MLflow run nested under its
trial's run; at the end `conclude` writes each configuration's values, mean and 95% interval
on the trial's run and on the study, and ranks the sweep's best by the mean.
"""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from sweeps.common import names
from sweeps.common.errors import one_line
from sweeps.contracts import protocol as p
from sweeps.contracts.records import SweepContext, SweepSummary, TrialEnd, TrialRecord
from sweeps.driver import outcomes, replicates
from sweeps.driver.replicates import Source, WorkItem
from sweeps.driver.state import Ending

TrialKey = tuple[str, int]
RUN_ID_ATTR = "mlflow_run_id"  # the Optuna trial attr the teller links its run under


@dataclasses.dataclass
class _Running:
    item: WorkItem
    rec: TrialRecord
    ctx: SweepContext  # the sweep's, with the trial's run as the parent run
    late: tuple[p.TrialResult, float] | None = None  # an end that overtook its last reports


class ReplicateRuns:
    LATE_S = 10.0  # as the trial book: how long an end waits for the reports it overtook

    def __init__(self, ctx: SweepContext, channel: Any, pool: Any, book: Any) -> None:
        self.ctx, self.spec, self.channel, self.pool, self.book = ctx, ctx.spec, channel, pool, book
        self.tracker, self.observers = book.tracker, book.observers
        self.evaluate = getattr(ctx.spec, "evaluate", None)
        self.held: dict[str, tuple[int, p.Stop]] = {}  # lane -> (seq, the Stop it would get)
        self.items: list[WorkItem] | None = None  # None until planned
        self.sources: dict[int, Source] = {}
        self.running: dict[TrialKey, _Running] = {}
        self.values: dict[int, list[float]] = {}
        self.seeds: dict[int, list[int]] = {}
        self.failed: dict[int, int] = {}
        self.results: dict[int, replicates.Stats] = {}
        self._next_id = -1  # a replicate's id in the tracker: negative, no Optuna trial has it

    # ----- lanes ----------------------------------------------------------------------------
    def hold(self, ev: p.NextTrial, stop: p.Stop, status: Any) -> bool:
        """Keep a lane's request for its next trial unanswered (True) while replicates may
        still want it: the search ended as finished or stopped, and the lane would stay warm."""
        if not (self.wanted(status) and stop.keep_warm):
            return False
        self.held[ev.lane] = (ev.seq, stop)
        return True

    def wanted(self, status: Any) -> bool:
        """Whether replicates may still run: asked for, not all assigned, a sweep not failing."""
        if (
            self.evaluate is None
            or status.cancelling
            or (self.items is not None and not self.items)
        ):
            return False
        return getattr(status.state, "ends_as", None) in (Ending.FINISHED, Ending.STOPPED)

    def wants_lanes(self, status: Any) -> bool:
        """A lane that stopped (recycled) is replaced while replicates wait for one."""
        return self.wanted(status) and not status.launching

    def serve(self, status: Any, search_busy: bool) -> None:
        """One turn: once the search is over, plan, then answer held lanes with replicates (or
        with their Stop, once none is left); overdue ends are recorded."""
        for key, r in list(self.running.items()):
            if r.late is not None and r.late[1] <= time.monotonic():
                self._end(key, r.late[0])
        if self.held and not self.wanted(status):  # a cancel, a failure: no more replicates
            for lane_id in list(self.held):
                self._release(lane_id)
        if not self.held or status.launching or search_busy:
            return
        if self.items is None:
            self._plan()
        for lane_id in list(self.held):
            lane = self.pool.get(lane_id)
            if self.wanted(status) and lane is not None and not lane.stopping:
                self._assign(lane, *self.held.pop(lane_id))
            else:
                self._release(lane_id)

    def _release(self, lane_id: str) -> None:
        seq, stop = self.held.pop(lane_id)
        lane = self.pool.get(lane_id)
        if lane is not None and not lane.stopping:  # else answered already (lane start-up)
            self.channel.answer(p.next_key(lane_id, seq), stop)
            self.pool.mark_stopping(lane_id)

    def lane_lost(self, lane_id: str, error: str) -> None:
        """A lane died: its replicate failed, its held request is void."""
        self.held.pop(lane_id, None)
        for key in [k for k in self.running if k[0] == lane_id]:
            self.running[key].rec.error = f"worker group failed: {error}"
            self._end(key, None)

    # ----- planning and assigning -----------------------------------------------------------
    def _plan(self) -> None:
        ev, study = self.evaluate, self.ctx.study
        maximize = study.directions[0].name == "MAXIMIZE"
        top = replicates.top_trials(study.get_trials(deepcopy=False), maximize, ev.top_k)
        attrs = study.user_attrs
        for t in top:
            run_id = t.user_attrs.get(RUN_ID_ATTR) or attrs.get(names.run_of_trial(t.number))
            if run_id is None:  # told before its run was linked: the store knows it
                run_id = self.tracker.find_trial_run(self.ctx, t.number)
            self.sources[t.number] = Source(t.number, dict(t.params), t.value, run_id)
        self.items = replicates.plan(list(self.sources.values()), ev.replicates)
        if top:
            which = ", ".join(f"#{t.number}" for t in top)
            line = f"evaluate: rerunning trials {which}, {ev.replicates}x each with new seeds"
        else:
            line = "evaluate: no complete trial to replicate"
        self.observers.notice(self.ctx, line)

    def _assign(self, lane: Any, seq: int, stop: p.Stop) -> None:
        assert self.items
        item = self.items.pop(0)
        src, now = item.source, self.book.clock()
        rec = outcomes.new_record(self.spec, item.number, self._next_id, dict(src.params), {}, now)
        self._next_id -= 1
        rec.replicate = (src.number, item.index, item.count)
        rec.lane_id, rec.seq = lane.lane_id, seq
        ctx = dataclasses.replace(self.ctx, parent_run_id=src.run_id or self.ctx.parent_run_id)
        self.tracker.start_trial(ctx, rec)
        self.running[(lane.lane_id, seq)] = _Running(item, rec, ctx)
        self.seeds.setdefault(src.number, []).append(rec.seed)
        lane.trials_run += 1
        a = p.Assignment(rec.number, rec.seed, rec.params, rec.config, seq, self.book.settings)
        self.channel.answer(p.next_key(lane.lane_id, seq), a)

    # ----- a replicate's events -------------------------------------------------------------
    def handle(self, ev: Any, cancel: str) -> bool:
        """The event, if it is about a replicate (True); `cancel`: what cancels running work."""
        if not self.running or not isinstance(ev, p.Event) or isinstance(ev, p.NextTrial):
            return False  # what is not a replicate's (an unknown event fails in the driver)
        r = self.running.get(ev.key)
        if r is None:
            return False
        rec = r.rec
        if isinstance(ev, p.Report):
            rec.last_step, rec.last_metrics = ev.step, ev.metrics
            self.tracker.log_epoch(r.ctx, rec, ev.step, ev.metrics)
            if cancel and not rec.error:
                rec.error = cancel
            answer = p.Decision.CANCEL if cancel else p.Decision.CONTINUE
            self.channel.answer(p.step_key(ev.lane, ev.seq, ev.step), answer)
            if r.late is not None and rec.last_step >= r.late[0].steps:
                self._end(ev.key, r.late[0])
        elif isinstance(ev, p.Finished):
            self.pool.record_rss(ev.lane, ev.result.worker_rss_mb)
            if ev.result.steps > rec.last_step:  # its last reports are still on their way
                r.late = (ev.result, time.monotonic() + self.LATE_S)
            else:
                self._end(ev.key, ev.result)
        elif isinstance(ev, p.Failed):
            rec.error = ev.error
            self._end(ev.key, None)
        elif isinstance(ev, p.Log):
            rec.log += ev.text
        elif isinstance(ev, p.Restarted):
            rec.restarts = ev.restarts
        elif isinstance(ev, p.UserMetrics):
            self.tracker.log_metrics(r.ctx, rec, ev.step, ev.metrics)
        elif isinstance(ev, p.Suggest):  # define-by-run: the trial's own value, not a sample
            got = rec.params.get(ev.name)
            why = f"trial.{ev.method}: '{ev.name}' is not among the replicated trial's params"
            known = ev.name in rec.params
            got = p.Suggested(ev.name, got) if known else p.Suggested(ev.name, error=why)
            self.channel.answer(p.suggest_key(ev.lane, ev.seq, ev.call), got)
        return True  # checkpoints, files and attrs of a replicate are not kept

    def _end(self, key: TrialKey, result: p.TrialResult | None) -> None:
        r = self.running.pop(key)
        rec, number = r.rec, r.item.source.number
        extra = self.book.ledger.spend(rec, result)  # replicates cost money too
        value: float | None = None
        if result is not None and not rec.error:
            got = outcomes.objective_values(self.spec, rec, result, extra)
            if result.state != "complete":
                rec.error = f"ended {result.state}, not complete"
            elif isinstance(got, str):
                rec.error = got
            else:
                value = got[0]
        if value is None:
            rec.error = rec.error or "ended without a result"
            self.failed[number] = self.failed.get(number, 0) + 1
            end = TrialEnd("FAIL", None, result, extra, killed=bool(self._cancelled(rec)))
        else:
            self.values.setdefault(number, []).append(value)
            end = TrialEnd("COMPLETE", [value], result, extra)
        self.tracker.end_trial(r.ctx, rec, end)

    @staticmethod
    def _cancelled(rec: TrialRecord) -> bool:
        return (rec.error or "").startswith(("cancelled", "interrupted", "terminated"))

    # ----- the end --------------------------------------------------------------------------
    def conclude(self, s: SweepSummary, cancel: str) -> SweepSummary:
        """At the sweep's end: replicates still out fail (`cancel` says why), every replicated
        configuration's record is written, and the summary's best is the best mean."""
        for lane_id in list(self.held):
            self._release(lane_id)
        for key in list(self.running):
            self.running[key].rec.error = cancel
            self._end(key, None)
        if not self.sources:
            return s
        objective = self.spec.objective.metric
        for number, src in self.sources.items():
            st = replicates.stats(self.values.get(number, []))
            self.results[number] = st
            record = replicates.summary(st, self.failed.get(number, 0), self.seeds.get(number, []))
            self._write(src, objective, st, record)
        maximize = self.ctx.study.directions[0].name == "MAXIMIZE"
        order = replicates.ranked(self.results, maximize)
        if not order:
            return s
        best = self.results[order[0]]
        note = f"best by replicate mean: trial {order[0]}, {objective} {best.text()}"
        self.observers.notice(self.ctx, note)
        return dataclasses.replace(s, best_number=order[0], best_value=best.mean)

    def _write(self, src: Source, objective: str, st: Any, record: dict[str, Any]) -> None:
        """One configuration's record: on the study (Optuna keeps the finished trial read-only)
        and on the trial's MLflow run (metrics, the values as a tag, the record as JSON)."""
        try:
            self.ctx.study.set_user_attr(names.replicates_of_trial(src.number), record)
        except Exception as e:
            self.observers.notice(self.ctx, f"evaluate: study record failed: {one_line(e)}")
        if src.run_id is None:
            return
        self.tracker.log_run_metrics(src.run_id, replicates.metrics(objective, st))
        self.tracker.set_tags(src.run_id, {names.REPLICATE_VALUES: json.dumps(list(st.values))})
        self.tracker.log_text(src.run_id, json.dumps(record, indent=2), "replicates.json")
