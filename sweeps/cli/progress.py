"""A rich progress bar as a driver callback: complete / pruned / failed / running, best so far."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sweeps.common import names
from sweeps.contracts.observers import SweepObserver
from sweeps.contracts.records import SweepContext, SweepSummary, TrialEnd, TrialRecord


class RichProgress(SweepObserver):
    def __init__(self, spec: Any, console: Console) -> None:
        self.spec = spec
        self.maximize = spec.objective.direction == "maximize"
        self.counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0}
        self.running = 0
        self.uncounted = 0  # re-queued and warm-start trials: in the study, not in the budget
        self.best: float | None = None
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.task = self.progress.add_task(spec.name, total=spec.budget.trials, status="starting")
        self.progress.start()

    def _update(self) -> None:
        c = self.counts
        best = f"{self.best:.4g}" if self.best is not None else "-"
        status = (
            f"· complete {c['COMPLETE']} · pruned {c['PRUNED']} · failed {c['FAIL']} "
            f"· running {self.running} · best {best}"
        )
        done = max(0, sum(c.values()) - self.uncounted)
        self.progress.update(self.task, completed=done, status=status)

    def on_sweep_start(self, ctx: SweepContext) -> None:
        """Start from the study's true totals: a continued or joined sweep shows all of it."""
        study = ctx.study
        for t in study.get_trials(deepcopy=False) if study is not None else []:
            if t.state.name in self.counts:
                self.counts[t.state.name] += 1
                if t.state.name == "COMPLETE" and t.values and len(t.values) == 1:
                    self._best(t.values[0])
        if study is not None:
            attrs = study.user_attrs
            self.uncounted = int(attrs.get(names.REQUEUED, 0)) + int(attrs.get(names.WARM_COUNT, 0))
        self._update()

    def _best(self, v: float) -> None:
        if self.best is None or (v > self.best if self.maximize else v < self.best):
            self.best = v

    def on_trial_start(self, ctx: SweepContext, t: TrialRecord) -> None:
        self.running += 1
        self._update()

    def on_trial_end(self, ctx: SweepContext, t: TrialRecord, end: TrialEnd) -> None:
        self.running = max(0, self.running - 1)
        self.counts[end.state] = self.counts.get(end.state, 0) + 1
        if end.values:
            self._best(end.values[0])
        self._update()

    def on_notice(self, ctx: SweepContext, line: str) -> None:
        """Above the bar, which stays at the bottom."""
        self.progress.console.print(f"{ctx.study_name}: {line}", highlight=False, markup=False)

    def on_sweep_end(self, ctx: SweepContext, summary: SweepSummary) -> None:
        self._update()

    def close(self, discard: bool = False) -> None:
        """Stop the bar; `discard` leaves nothing of it behind (the sweep never started: the
        error line is all the user should see)."""
        if discard:
            self.progress.live.transient = True
        self.progress.stop()
