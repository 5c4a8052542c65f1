"""`search: pbt`: the driver's side of population-based training (the policy is pure:
sweeps/search/pbt.py).

A member trains in segments of `interval_epochs`, and each segment is an Optuna trial of its
own, as an extension is (sweeps/driver/extend.py): a finished trial cannot be reopened. The
first `population` trials the sampler gives are the members' first segments (generation 0).
When a member's segment ends, it is ranked against the others' latest results (at once, as
Ray's default; with `synch`, once the whole generation ended) and its next segment is queued
with fixed params: its own, from its own last checkpoint, or, in the bottom quantile, a top
member's explored params from that member's last checkpoint. The link is explicit on the
trial (`names.PBT_*`, and the extend attrs: `RESUME_CHECKPOINT`/`RESUME_STEP`, `EXTENDS` and
`EXTENDS_RUN`, which tag its MLflow run with the run it continues), and each segment's run
logs the perturbed params as metrics `pbt.<param>` at its steps, so the chart draws each
member's schedule. A member's result is its final segment's (`PBT_FINAL`), which carries the
whole schedule (`PBT_SCHEDULE`): the sweep's best is the best final segment.

A lane that asks for a trial while every member is sampled and no segment is queued waits
(its request is held) until one is, or until the search is over.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Any

from sweeps.common import names
from sweeps.contracts import protocol as p
from sweeps.contracts.records import SweepContext, TrialRecord
from sweeps.search import pbt
from sweeps.search.study import run_id_of
from sweeps.spec.params import CategoricalParam
from sweeps.spec.pbt import segments

POLL_S = 0.5  # how often the study is read for ended segments
# What a retry of a segment (or a re-queued one) takes from it, to stay that segment.
INHERITED = (
    names.PBT_MEMBER,
    names.PBT_GENERATION,
    names.PBT_PARENT,
    names.PBT_CLONED,
    names.PBT_FINAL,
    names.PBT_SCHEDULE,
    names.PBT_OPS,
    names.EXTEND_EPOCHS,
)


class PbtRun:
    def __init__(
        self, ctx: SweepContext, tracker: Any, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ctx, self.tracker, self.clock = ctx, tracker, clock
        self.spec, self.study, self.conf = ctx.spec, ctx.study, ctx.spec.search
        self.active = self.conf is not None
        self.held: list[p.NextTrial] = []
        self.to_log: list[TrialRecord] = []
        self.polled = 0.0
        self.rng = random.Random(ctx.spec.sampler.seed)

    # ----- hooks of the driver ------------------------------------------------------------------
    def events(self, polled: list[Any], status: Any) -> list[Any]:
        """The events the driver dispatches this turn: held requests given back first (see
        `tick`), then the polled ones, less the requests for a trial that would find none:
        every member sampled and no segment queued (the sampler would otherwise start a trial
        that is no member of the population). They wait, held, until one is queued."""
        out = self.tick(status)
        if not (
            self.active and status.launching and any(isinstance(e, p.NextTrial) for e in polled)
        ):
            return [*out, *polled]
        room = self._room(self.study.get_trials(deepcopy=False)) - len(out)
        for ev in polled:
            if isinstance(ev, p.NextTrial):
                if room <= 0:
                    self.held.append(ev)
                    continue
                room -= 1
            out.append(ev)
        return out

    def _room(self, trials: list[Any]) -> int:
        """How many requests for a trial may go to the book now: queued trials (segments,
        retries) and members not yet sampled."""
        waiting = sum(t.state.name == "WAITING" for t in trials)
        return waiting + max(0, self.conf.population - len(_members(trials)))

    def asked(self, rec: TrialRecord) -> None:
        """A trial the book just asked for: a new member's first segment, a queued segment, or
        a retry of one (which carries its segment's attrs)."""
        attrs = dict(rec.trial.user_attrs) if self.active else {}
        if not self.active or (names.EXTENDS in attrs and names.PBT_MEMBER not in attrs):
            return  # `sweeps extend` of a member's final segment: no member of its own
        if names.PBT_MEMBER not in attrs:
            source = rec.retry_of if rec.retry_of is not None else rec.requeued_from
            new = self._inherited(source) or self._first_segment(rec)
            for key, value in new.items():
                rec.trial.set_user_attr(key, value)
            attrs.update(new)
        rec.config["epochs"] = int(attrs[names.EXTEND_EPOCHS])
        self.to_log.append(rec)

    def tick(self, status: Any) -> list[p.NextTrial]:
        """One turn: log assigned segments' params, queue the next segments, and give back the
        held requests (to dispatch again) once one is queued or the search is over."""
        if not self.active:
            return []
        self._log_schedules()
        if not status.launching:
            return self._release()
        now = self.clock()
        if now - self.polled < POLL_S:
            return []
        self.polled = now
        trials = self.study.get_trials(deepcopy=False)
        try:
            queued = self._plan(trials)
        except ValueError as e:
            status.fail(str(e))
            return self._release()
        for params, attrs in queued:
            self.study.enqueue_trial(params, user_attrs=attrs)
        if queued or (self.held and self._room(trials)):
            return self._release()
        if self.held and self._over(trials):
            status.drain(f"pbt: {self._ended_line(trials)}")
            return self._release()
        return []

    # ----- segments -----------------------------------------------------------------------------
    def _first_segment(self, rec: TrialRecord) -> dict[str, Any]:
        member = len(_members(self.study.get_trials(deepcopy=False)))
        epochs = self.spec.trainer.epochs
        end = pbt.segment_end(0, self.conf.interval_epochs, epochs)
        return {
            names.PBT_MEMBER: member,
            names.PBT_GENERATION: 0,
            names.PBT_CLONED: member,
            names.PBT_FINAL: end >= epochs,
            names.PBT_SCHEDULE: json.dumps([[0, rec.params]]),
            names.EXTEND_EPOCHS: end,
        }

    def _inherited(self, source: int | None) -> dict[str, Any] | None:
        if source is None:
            return None
        for t in self.study.get_trials(deepcopy=False):
            if t.number == source and names.PBT_MEMBER in t.user_attrs:
                return {k: v for k, v in t.user_attrs.items() if k in INHERITED}
        return None

    def _plan(self, trials: list[Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """The next segments to queue now: (params, attrs) each."""
        if len(_members(trials)) < self.conf.population:
            return []  # unsampled members first (Ray runs the least-trained trial first)
        latest = _latest(trials)
        followed = {t.user_attrs.get(names.PBT_PARENT) for t in trials}
        live = {m: t for m, t in latest.items() if t.state.name not in ("FAIL", "PRUNED")}
        ready = [
            m
            for m, t in sorted(live.items())
            if t.state.name == "COMPLETE"
            and not t.user_attrs.get(names.PBT_FINAL)
            and t.number not in followed
        ]
        busy = any(t.state.name in ("RUNNING", "WAITING") for t in live.values())
        if not ready or (self.conf.synch and busy):
            return []
        done = _done(trials)  # each member's latest COMPLETE segment
        scores = {
            m: t.value
            for m, t in done.items()
            if m in live and not t.user_attrs.get(names.PBT_FINAL)
        }
        params = {m: dict(t.params) for m, t in done.items()}
        maximize = self.study.direction.name == "MAXIMIZE"

        def explore(config: dict[str, Any], rng: random.Random) -> Any:
            c, space = self.conf, self.spec.search_space
            return pbt.explore(config, c.perturb, space, c.resample_probability, rng)

        out = []
        for m in ready:
            choice = pbt.decide(m, params, scores, self.conf.quantile, maximize, explore, self.rng)
            parent = done[m if choice.clone is None else choice.clone]
            out.append((choice.params, self._attrs(m, latest[m], parent, choice)))
        return out

    def _attrs(self, member: int, own: Any, parent: Any, choice: pbt.Choice) -> dict[str, Any]:
        checkpoint = parent.user_attrs.get(names.CHECKPOINT)
        step = parent.user_attrs.get(names.CHECKPOINT_STEP)
        if not checkpoint or step is None:
            raise ValueError(
                f"pbt: trial {parent.number} persisted no checkpoint for member {member} to "
                "continue from"
            )
        end = pbt.segment_end(int(step), self.conf.interval_epochs, self.spec.trainer.epochs)
        schedule = json.loads(parent.user_attrs.get(names.PBT_SCHEDULE, "[]"))
        schedule = [e for e in schedule if e[0] < int(step)] + [[int(step), choice.params]]
        return {
            names.PBT_MEMBER: member,
            names.PBT_GENERATION: int(own.user_attrs.get(names.PBT_GENERATION, 0)) + 1,
            names.PBT_PARENT: parent.number,
            names.PBT_CLONED: member if choice.clone is None else choice.clone,
            names.PBT_FINAL: end >= self.spec.trainer.epochs,
            names.PBT_SCHEDULE: json.dumps(schedule),
            names.PBT_OPS: json.dumps(choice.ops),
            names.EXTENDS: parent.number,
            names.EXTENDS_RUN: run_id_of(self.study.user_attrs, parent),
            names.EXTEND_EPOCHS: end,
            names.RESUME_CHECKPOINT: checkpoint,
            names.RESUME_STEP: int(step),
            names.RESUMED_FROM_TRIAL: parent.number,
        }

    def _over(self, trials: list[Any]) -> bool:
        """Nothing runs, nothing is queued, every member is sampled and none can go on."""
        if any(t.state.name in ("RUNNING", "WAITING") for t in trials):
            return False
        return len(_members(trials)) >= self.conf.population and not self._plan(trials)

    def _ended_line(self, trials: list[Any]) -> str:
        latest = _latest(trials)
        final = sum(
            1
            for t in latest.values()
            if t.state.name == "COMPLETE" and t.user_attrs.get(names.PBT_FINAL)
        )
        n = segments(self.spec.trainer.epochs, self.conf.interval_epochs)
        return f"{final} of {len(latest)} members trained all {n} segments"

    def _release(self) -> list[p.NextTrial]:
        out, self.held = self.held, []
        return out

    def _log_schedules(self) -> None:
        """Each assigned segment's perturbed params, as metrics at each of its steps."""
        keep = []
        for rec in self.to_log:
            if not rec.lane_id:
                keep.append(rec)
                continue
            values = {
                f"{names.PBT_METRIC_PREFIX}{k}": _number(self.spec.search_space[k], rec.params[k])
                for k in self.conf.perturb
                if k in rec.params
            }
            start = int(rec.trial.user_attrs.get(names.RESUME_STEP) or 0)
            for step in range(start + 1, int(rec.config["epochs"]) + 1):
                self.tracker.log_metrics(self.ctx, rec, step, values)
        self.to_log = keep


def _number(p: Any, v: Any) -> float:
    """A param as a metric value: a categorical one as its choice's index."""
    return float(p.choices.index(v)) if isinstance(p, CategoricalParam) else float(v)


def _members(trials: list[Any]) -> set[int]:
    return {t.user_attrs[names.PBT_MEMBER] for t in trials if names.PBT_MEMBER in t.user_attrs}


def _latest(trials: list[Any]) -> dict[int, Any]:
    """Each member's latest segment: its highest generation, a COMPLETE attempt over a failed
    one (a retry), the newest otherwise."""
    rank = {"COMPLETE": 2, "RUNNING": 1, "WAITING": 1}
    out: dict[int, Any] = {}
    for t in sorted(trials, key=lambda t: t.number):
        m = t.user_attrs.get(names.PBT_MEMBER)
        if m is None:
            continue
        key = (t.user_attrs.get(names.PBT_GENERATION, 0), rank.get(t.state.name, 0))
        cur = out.get(m)
        if cur is None or key >= (
            cur.user_attrs.get(names.PBT_GENERATION, 0),
            rank.get(cur.state.name, 0),
        ):
            out[m] = t
    return out


def _done(trials: list[Any]) -> dict[int, Any]:
    """Each member's latest COMPLETE segment."""
    out: dict[int, Any] = {}
    for t in sorted(trials, key=lambda t: t.number):
        m = t.user_attrs.get(names.PBT_MEMBER)
        if m is not None and t.state.name == "COMPLETE":
            out[m] = t
    return out
