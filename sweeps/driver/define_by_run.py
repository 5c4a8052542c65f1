"""The driver's side of a define-by-run objective (`sweeps.optimize`).

Each `trial.suggest_*` of rank 0 arrives as a `Suggest` event: the same method is called on the
driver's `optuna.Trial` (the one `study.ask` gave), so the sampler samples it and the study
records the param with its distribution, exactly as in `study.optimize`. The answer goes back
under the suggest key, for every rank. `set_user_attr` reaches the trial with its next write;
an exception the objective's `catch` does not cover stops the study (`StopStudy`).
"""

from __future__ import annotations

from typing import Any

from sweeps.common.errors import one_line
from sweeps.contracts.protocol import StopStudy, Suggest, Suggested, TrialAttr
from sweeps.driver.running import RunningTrials

METHODS = ("suggest_float", "suggest_int", "suggest_categorical")


class DefineByRun:
    """`sampler` / `pruner`: Optuna objects given to `optimize` (as to `optuna.create_study`);
    they replace the spec's on the study the driver opens."""

    def __init__(self, sampler: Any = None, pruner: Any = None) -> None:
        self.sampler, self.pruner = sampler, pruner
        self.raised: bytes | None = None  # the exception that stopped the study, cloudpickled
        self.stop_reason = ""

    def bind(self, study: Any) -> None:
        """Put the user's sampler and pruner on the study, before any trial is asked."""
        if self.sampler is not None:
            study.sampler = self.sampler
        if self.pruner is not None:
            study.pruner = self.pruner

    def suggest(self, running: RunningTrials, ev: Suggest) -> Suggested:
        rec = running.get(ev.key)
        if rec is None or rec.trial is None:
            return Suggested(ev.name, error=f"trial.{ev.method}: the trial has already ended")
        if ev.method not in METHODS:
            return Suggested(ev.name, error=f"trial.{ev.method}: not one of {', '.join(METHODS)}")
        try:
            value = getattr(rec.trial, ev.method)(ev.name, **ev.args)
        except Exception as e:  # Optuna's own check (low > high, a changed distribution...)
            return Suggested(ev.name, error=one_line(e, 2000))
        rec.params[ev.name] = value
        return Suggested(ev.name, value)

    def set_attr(self, running: RunningTrials, ev: TrialAttr) -> None:
        rec = running.get(ev.key)
        if rec is not None:
            running.attrs.add(rec.trial_id, {ev.name: ev.value})  # written with its next write

    def stop(self, ev: StopStudy) -> str:
        """The first exception not in `catch`: kept for `optimize` to raise again."""
        if not self.stop_reason:
            self.stop_reason, self.raised = ev.reason, ev.error
        return self.stop_reason
