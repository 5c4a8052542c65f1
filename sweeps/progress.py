"""A rich progress bar as a driver callback: done / pruned / failed / running, best so far."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sweeps.callbacks import DriverCallback, SweepContext, SweepSummary, TrialRecord


class RichProgress(DriverCallback):
    def __init__(self, spec: Any, console: Console) -> None:
        self.spec = spec
        self.maximize = spec.objective.direction == "maximize"
        self.counts = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0}
        self.running = 0
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
            f"done {c['COMPLETE']} pruned {c['PRUNED']} failed {c['FAIL']} "
            f"running {self.running} best {best}"
        )
        self.progress.update(self.task, completed=sum(c.values()), status=status)

    def on_sweep_start(self, ctx: SweepContext) -> None:
        self._update()

    def on_trial_start(self, ctx: SweepContext, t: TrialRecord) -> str | None:
        self.running += 1
        self._update()
        return None

    def on_trial_end(
        self,
        ctx: SweepContext,
        t: TrialRecord,
        state: str,
        values: list[float] | None,
        result: dict[str, Any],
        extra: dict[str, float],
    ) -> None:
        self.running = max(0, self.running - 1)
        self.counts[state] = self.counts.get(state, 0) + 1
        if values:
            v = values[0]
            if self.best is None or (v > self.best if self.maximize else v < self.best):
                self.best = v
        self._update()

    def on_sweep_end(self, ctx: SweepContext, summary: SweepSummary) -> None:
        self._update()

    def close(self) -> None:
        self.progress.stop()
