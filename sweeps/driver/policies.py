"""Stop rules: small objects the driver consults, pure enough to test without Ray or Optuna.

`BudgetPolicy` owns every rule that ends a sweep's launching (trials, wall time, money,
GPU-hours, a target value) and the hard limits that cancel running trials; each answer says how
the sweep then ends (`finished` when the budget or target is reached, `stopped` when a limit cut
it short). `FailurePolicy` counts failed trials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sweeps.common.errors import error_summary
from sweeps.common.words import plural
from sweeps.driver.convergence import Converged, Unusable, Watch
from sweeps.driver.state import Ending

if TYPE_CHECKING:
    from sweeps.spec import Spec


@dataclass(frozen=True)
class LaunchDecision:
    launch: bool
    reason: str = ""
    remaining: int = 0
    ends_as: Ending = Ending.FINISHED
    cancels: bool = False  # running trials are to be stopped too (hard limits)


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
        self.budget = spec.budget
        self.maximize = spec.objective.direction == "maximize"
        self.single = not spec.multi_objective
        self.costs: list[float] = []  # per finished trial, this study (loaded at start)
        self.gpu_hours: list[float] = []
        self.best: float | None = None
        stop_when = spec.budget.stop_when if self.single else None
        self.watch = Watch(stop_when, self.maximize) if stop_when is not None else None
        self.converged: Converged | None = None  # why the search ended early, with evidence
        self.quota: Any = None  # quota_watch.QuotaWatch, where a quota applies

    def load(self, finished: list[tuple[float, float, float | None]]) -> None:
        """What earlier drivers spent on this study counts against the same budget:
        (cost, gpu_hours, single objective value or None) per finished trial."""
        for cost, gpuh, value in finished:
            self.record(cost, gpuh)
            if value is not None:
                self.record_value(value)

    def record(self, cost: float, gpu_hours: float) -> None:
        self.costs.append(float(cost or 0.0))
        self.gpu_hours.append(float(gpu_hours or 0.0))

    def record_value(self, value: float, number: int = -1) -> None:
        if self.watch is not None:
            self.watch.record(number, value)
        if self.best is None or (value > self.best if self.maximize else value < self.best):
            self.best = value

    def check(self, used: int, running: int) -> LaunchDecision:
        """May another trial start? `used`: the study's trials that count against the budget;
        `running`: this driver's trials in flight (forecast at the mean cost)."""
        b = self.budget
        remaining = b.trials - used
        if remaining <= 0:
            return LaunchDecision(False, f"budget reached: {used}/{b.trials} trials", 0)
        if self.single and target_reached(self.best, b.target, self.maximize):
            return LaunchDecision(False, f"target reached: best {self.best:.6g} vs {b.target:g}")
        if self.watch is not None and (c := self.watch.check()) is not None:
            if isinstance(c, Unusable):
                return LaunchDecision(False, c.reason, ends_as=Ending.FAILED)
            self.converged = c
            return LaunchDecision(False, c.reason)
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

    def timed_out(self, elapsed_s: float) -> LaunchDecision | None:
        t = self.budget.timeout_s
        if t and elapsed_s > t:
            return LaunchDecision(False, f"timeout after {t:g} s")
        return None

    def hard_crossed(self, live_cost: float, live_gpu_hours: float) -> LaunchDecision | None:
        """budget.hard: spend including running trials crossed a limit; running trials are to
        be cancelled. `live_*` are this study's finished spend plus the running trials' so far."""
        b = self.budget
        if not b.hard:
            return None
        over = (b.max_cost_usd is not None and live_cost > b.max_cost_usd) or (
            b.max_gpu_hours is not None and live_gpu_hours > b.max_gpu_hours
        )
        if not over:
            return None
        return LaunchDecision(
            False,
            f"hard budget crossed (${live_cost:.4f}, {live_gpu_hours:.4f} GPU-h): running "
            "trials cancelled",
            ends_as=Ending.STOPPED,
            cancels=True,
        )

    def limits(self, elapsed_s: float, live_spend: Any) -> list[LaunchDecision]:
        """The limits crossed now: wall time, and (budget.hard) spend including running
        trials; `live_spend()` is asked only when a hard limit is set."""
        out = [d for d in (self.timed_out(elapsed_s),) if d is not None]
        if self.quota is not None and self.quota.line:  # spent, by this sweep and its team's
            out.append(LaunchDecision(False, self.quota.line, ends_as=Ending.STOPPED))
        if self.budget.hard:
            over = self.hard_crossed(*live_spend())
            if over is not None:
                out.append(over)
        return out

    def stop_watching(self) -> None:
        if self.quota is not None:
            self.quota.stop()


class FailurePolicy:
    """Stop launching after `budget.max_failed_trials` failures (None: never)."""

    def __init__(self, max_failed: int | None) -> None:
        self.max_failed = max_failed
        self.failed = 0
        self.first_error = ""
        self.last_error = ""

    def record(self, error: str) -> None:
        self.failed += 1
        self.first_error = self.first_error or error
        self.last_error = error

    def exhausted(self) -> bool:
        return self.max_failed is not None and self.failed >= self.max_failed

    def reason(self) -> str:
        return (
            f"{plural(self.failed, 'trial')} failed (budget.max_failed_trials={self.max_failed}); "
            f"last error: {error_summary(self.last_error)}"
        )
