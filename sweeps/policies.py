"""Launch policies: small objects the driver consults before it hands out a trial.

Keeping them apart from the driver keeps the rules testable without Ray: the budget policy
answers "may another trial start, and if not, why", the failure policy counts failed trials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweeps.spec import Spec


@dataclass(frozen=True)
class LaunchDecision:
    launch: bool
    reason: str = ""
    remaining: int = 0


def forecast_exceeds(spent: float, finished: list[float], running: int, limit: float) -> bool:
    """Pure: would one more trial likely cross `limit`? The forecast of a trial is the mean of
    the finished ones; running trials are counted at that mean too. With nothing finished yet
    there is no forecast, so only what was already spent counts."""
    if spent >= limit:
        return True
    if not finished:
        return False
    mean = sum(finished) / len(finished)
    return spent + (running + 1) * mean > limit


def target_reached(best: float | None, target: float | None, maximize: bool) -> bool:
    if best is None or target is None:
        return False
    return best >= target if maximize else best <= target


class BudgetPolicy:
    """`budget.trials` counts every trial of the study that used budget (all drivers together),
    so a resumed or joined sweep finishes the same total rather than starting over. Money and
    GPU-hours are enforced before each launch from a forecast; `target` ends the search early."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.trials = spec.budget.trials
        self.costs: list[float] = []  # per finished trial, this study (loaded at start)
        self.gpu_hours: list[float] = []
        self.best: float | None = None

    def load(self, study: Any) -> None:
        """What earlier drivers spent on this study counts against the same budget."""
        for t in study.get_trials(deepcopy=False):
            if t.state.is_finished():
                self.record(t.user_attrs.get("cost_usd", 0.0), t.user_attrs.get("gpu_hours", 0.0))
                if t.state.name == "COMPLETE" and t.values and len(t.values) == 1:
                    self.record_value(t.values[0])

    def record(self, cost: float, gpu_hours: float) -> None:
        self.costs.append(float(cost or 0.0))
        self.gpu_hours.append(float(gpu_hours or 0.0))

    def record_value(self, value: float) -> None:
        maximize = self.spec.objective.direction == "maximize"
        if self.best is None or (value > self.best if maximize else value < self.best):
            self.best = value

    def check(self, study: Any, driver: Any = None) -> LaunchDecision:
        from sweeps.study import counted_trials

        b = self.spec.budget
        used = counted_trials(study)
        remaining = self.trials - used
        if remaining <= 0:
            return LaunchDecision(False, f"budget reached: {used}/{self.trials} trials", 0)
        maximize = self.spec.objective.direction == "maximize"
        if not self.spec.multi_objective and target_reached(self.best, b.target, maximize):
            return LaunchDecision(False, f"target reached: best {self.best:.6g} vs {b.target:g}")
        running = len(getattr(driver, "running", {}) or {})
        spent = sum(self.costs)
        if b.max_cost_usd is not None and forecast_exceeds(
            spent, self.costs, running, b.max_cost_usd
        ):
            return LaunchDecision(
                False,
                f"money budget: spent ${spent:.4f} of ${b.max_cost_usd:g}; the next trial "
                f"is forecast to cross it",
            )
        gpuh = sum(self.gpu_hours)
        if b.max_gpu_hours is not None and forecast_exceeds(
            gpuh, self.gpu_hours, running, b.max_gpu_hours
        ):
            return LaunchDecision(
                False,
                f"GPU budget: {gpuh:.4f} of {b.max_gpu_hours:g} GPU-hours used; the next "
                f"trial is forecast to cross it",
            )
        return LaunchDecision(True, "", remaining)


class FailurePolicy:
    """Stop launching after `budget.max_failed_trials` failures (None: never)."""

    def __init__(self, max_failed: int | None) -> None:
        self.max_failed = max_failed
        self.failed = 0
        self.last_error = ""

    def record(self, error: str) -> None:
        self.failed += 1
        self.last_error = error

    def exhausted(self) -> bool:
        return self.max_failed is not None and self.failed >= self.max_failed

    def reason(self) -> str:
        return (
            f"{self.failed} trials failed (budget.max_failed_trials={self.max_failed}); "
            f"last error: {self.last_error[:200]}"
        )
