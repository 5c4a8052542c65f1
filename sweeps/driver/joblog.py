"""Progress in a submitted sweep's driver log (`sweeps logs NAME --driver -f`): one line when
the sweep starts and one per trial as it ends, where a terminal would show the progress bar.
The job's log is a file, so each line is flushed at once: a follower sees it as it happens."""

from __future__ import annotations

import sys
from typing import TextIO

from sweeps.common.errors import error_summary
from sweeps.contracts.observers import SweepObserver
from sweeps.contracts.records import SweepContext, TrialEnd, TrialRecord


class ProgressLines(SweepObserver):
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.ended = 0
        self.total = 0
        self.maximize = False
        self.best: float | None = None

    def _say(self, line: str) -> None:
        stream = self.stream or sys.stdout
        stream.write(line + "\n")
        stream.flush()

    def on_sweep_start(self, ctx: SweepContext) -> None:
        spec = ctx.spec
        self.total = spec.budget.trials
        self.maximize = spec.objective.direction == "maximize"
        self._say(
            f"{ctx.study_name}: started ({self.total} trials, {spec.budget.parallel} at a time)"
        )

    def on_notice(self, ctx: SweepContext, line: str) -> None:
        self._say(f"{ctx.study_name}: {line}")

    def on_trial_end(self, ctx: SweepContext, t: TrialRecord, end: TrialEnd) -> None:
        self.ended += 1
        value = end.values[0] if end.values else None
        if value is not None and (
            self.best is None or (value > self.best if self.maximize else value < self.best)
        ):
            self.best = value
        what = f"{value:.6g}" if value is not None else ("KILLED" if end.killed else end.state)
        best = f"{self.best:.6g}" if self.best is not None else "-"
        error = f" ({error_summary(t.error)})" if end.state == "FAIL" and t.error else ""
        self._say(
            f"{ctx.study_name}: trial #{t.number} {end.state.lower()}: {what}{error}; "
            f"{self.ended}/{self.total} ended, best {best}"
        )
