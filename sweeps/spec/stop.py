"""`budget.stop_when`: when a search has converged (see sweeps.driver.convergence)."""

from __future__ import annotations

from pydantic import Field, model_validator

from sweeps.spec.params import HUGE, _Model


class TerminatorSpec(_Model):
    """Optuna's Terminator with its RegretBoundEvaluator (see docs/SEARCH.md)."""

    # The statistical error the regret bound is compared with: a number is Optuna's
    # StaticErrorEvaluator; None is its MedianErrorEvaluator (trials report no CV scores).
    error: float | None = Field(None, ge=0, le=HUGE)
    min_trials: int = Field(20, ge=1, le=1_000_000)  # Terminator(min_n_trials=...)
    seed: int | None = None  # RegretBoundEvaluator(seed=...)


class StopWhen(_Model):
    """End the search once it converged: running trials finish, no new ones start."""

    # Keras-style patience: this many completed trials in a row without beating the best by
    # more than min_delta.
    no_improvement_trials: int | None = Field(None, ge=1, le=1_000_000)
    min_delta: float = Field(0.0, ge=0, le=HUGE)
    terminator: bool | TerminatorSpec = False

    @model_validator(mode="after")
    def _some_rule(self) -> StopWhen:
        if self.no_improvement_trials is None and self.terminator is False:
            raise ValueError("set no_improvement_trials, terminator, or both")
        if self.min_delta and self.no_improvement_trials is None:
            raise ValueError("min_delta: only with no_improvement_trials")
        return self
