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


class BudgetPolicy:
    """`budget.trials` counts every trial of the study that used budget (all drivers together),
    so a resumed or joined sweep finishes the same total rather than starting over."""

    def __init__(self, spec: Spec) -> None:
        self.trials = spec.budget.trials

    def check(self, study: Any, driver: Any = None) -> LaunchDecision:
        from sweeps.study import counted_trials

        used = counted_trials(study)
        remaining = self.trials - used
        if remaining <= 0:
            return LaunchDecision(False, f"budget reached: {used}/{self.trials} trials", 0)
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
