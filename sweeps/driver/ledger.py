"""What this driver's trials cost: seconds, dollars and GPU-hours, finished and running.

The book asks it at each trial's end (`spend`) and the budget reads it while trials run
(`live_spend`); the summary reads `totals`. Prices come from `tracking.costs`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sweeps.contracts.protocol import TrialResult
from sweeps.contracts.records import TrialRecord
from sweeps.driver.policies import BudgetPolicy


@dataclass(frozen=True)
class Spend:
    """This driver's spend so far."""

    cost_usd: float = 0.0
    gpu_hours: float = 0.0
    trial_seconds: float = 0.0


class Ledger:
    def __init__(self, budget: BudgetPolicy, clock: Callable[[], float] = time.time) -> None:
        self.budget = budget
        self.clock = clock
        self._totals = Spend()
        self.booked = 0  # trials this driver ran to their end

    @property
    def totals(self) -> Spend:
        return self._totals

    def costs(self, rec: TrialRecord) -> tuple[float, float, float]:
        """(seconds, cost_usd, gpu_hours) of a trial so far."""
        from tracking.costs import resources_cost

        seconds = self.clock() - rec.assigned_at
        return (seconds, *resources_cost(rec, seconds))

    def spend(self, rec: TrialRecord, result: TrialResult | None) -> dict[str, float]:
        """Book a trial that ended; returns its figures as the tracker logs them."""
        seconds, cost, gpuh = self.costs(rec)
        t = self._totals
        self._totals = Spend(t.cost_usd + cost, t.gpu_hours + gpuh, t.trial_seconds + seconds)
        self.booked += 1
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

    def live_spend(self, running: Iterable[TrialRecord]) -> tuple[float, float]:
        """The study's finished spend plus what running trials cost so far."""
        cost, gpuh = sum(self.budget.costs), sum(self.budget.gpu_hours)
        for rec in running:
            _, c, g = self.costs(rec)
            cost, gpuh = cost + c, gpuh + g
        return cost, gpuh

    def running_cost(self, running: Iterable[TrialRecord]) -> float:
        """What this driver's running trials cost so far (`ls` shows it while they run)."""
        return sum(self.costs(rec)[1] for rec in running)
