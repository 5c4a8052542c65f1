"""Optuna's terminator (`optuna.terminator`), the one module that names it.

`budget.stop_when.terminator` is Optuna's `Terminator` with its `RegretBoundEvaluator`: the
search ends once the regret bound (the room left for improvement, from a Gaussian process fit
to the top trials) falls below the statistical error. Optuna's default error is the
cross-validation scores' variance, which trials here do not report, so the error is either a
fixed number (`StaticErrorEvaluator`) or, by default, `MedianErrorEvaluator`: 1% of the median
regret bound over the first trials after a warm-up of 10 (so it needs 30 completed trials).
Optuna deprecated the module in 4.9 and removes it in 6.0; its GP needs torch and scipy.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from sweeps.common.errors import SpecError, one_line

# What Optuna's terminator imports on first use: the module itself (gone in Optuna 6) and
# its Gaussian process (torch, scipy).
NEEDS = ("optuna.terminator", "optuna._gp.gp", "optuna._gp.acqf", "optuna._gp.optim_sample")


def check_available() -> None:
    """One line, before any store is touched, when this installation cannot run it."""
    for module in NEEDS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                importlib.import_module(module)
        except ImportError as e:
            missing = getattr(e, "name", None) or module
            raise SpecError(
                f"budget.stop_when.terminator: Optuna's terminator cannot run here: {missing} "
                f"is missing ({one_line(e)}); it needs optuna>=5,<6 with torch and scipy"
            ) from None


def make(error: float | None, min_trials: int, seed: int | None) -> Any:
    """Optuna's Terminator: regret bound against `error` (None: the median heuristic)."""
    with warnings.catch_warnings():
        # Optuna warns that the module is deprecated and experimental on every construction;
        # docs/SEARCH.md says so once, where the setting is documented.
        warnings.simplefilter("ignore")
        from optuna.terminator import (
            MedianErrorEvaluator,
            RegretBoundEvaluator,
            StaticErrorEvaluator,
            Terminator,
        )

        regret = RegretBoundEvaluator(seed=seed)
        err = StaticErrorEvaluator(error) if error is not None else MedianErrorEvaluator(regret)
        return Terminator(
            improvement_evaluator=regret, error_evaluator=err, min_n_trials=min_trials
        )


def evaluate(terminator: Any, study: Any) -> tuple[bool, float | None, float | None]:
    """(should terminate, regret bound, error) on the study's trials now. The two numbers
    are the evidence; they are None below `min_trials`, where Optuna does not compute them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from optuna.trial import TrialState

        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if len(done) < terminator._min_n_trials:
            return False, None, None
        trials, direction = study.get_trials(deepcopy=False), study.direction
        # Terminator.should_terminate is exactly `improvement < error` on these two, computed
        # here so the evidence can say both numbers.
        regret = terminator._improvement_evaluator.evaluate(trials, direction)
        error = terminator._error_evaluator.evaluate(trials, direction)
    return bool(regret < error), float(regret), float(error)
