"""`budget.stop_when`: has the search converged? Then no new trial starts (running ones finish)
and the sweep ends `finished (converged: …)`.

Two rules, either may end the search:
- `no_improvement_trials` / `min_delta`: Keras EarlyStopping's patience over completed trials
  in the order they finished. A trial improves when it beats the best so far by more than
  `min_delta` (a tie, or a gain of `min_delta` or less, is no improvement, and does not move
  the reference best). The first completed trial sets the best.
- `terminator`: Optuna's Terminator (regret bound vs statistical error, `search/terminator.py`).

`no_improvement` is pure; `Watch` keeps the history the driver feeds it and asks Optuna's
terminator only when a trial completed since it last asked (the GP fit takes a fraction of a
second, and the median error's first evaluation several seconds).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sweeps.common import names
from sweeps.common.errors import one_line


@dataclass(frozen=True)
class Converged:
    reason: str  # "converged: no improvement > 0.001 in the last 20 trials; best 0.97 at trial 12"
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> str:
        return json.dumps(self.evidence, sort_keys=True)


@dataclass(frozen=True)
class Unusable:
    """The terminator could not evaluate the study: the sweep fails, saying why."""

    reason: str


def _better(value: float, best: float, maximize: bool, min_delta: float) -> bool:
    return value > best + min_delta if maximize else value < best - min_delta


def no_improvement(
    values: Sequence[tuple[int, float]], maximize: bool, patience: int, min_delta: float = 0.0
) -> Converged | None:
    """Pure: (trial number, value) of completed trials in the order they finished -> Converged
    once the last `patience` of them brought no improvement greater than `min_delta`."""
    best_n, best = -1, 0.0
    since = 0  # completed trials since the reference best
    for i, (number, value) in enumerate(values):
        if i == 0 or _better(value, best, maximize, min_delta):
            best_n, best, since = number, value, 0
        else:
            since += 1
    if not values or since < patience:
        return None
    top_n, top = (
        max(values, key=lambda nv: nv[1]) if maximize else min(values, key=lambda nv: nv[1])
    )
    gain = f"> {min_delta:g}" if min_delta else "over the best"
    reason = (
        f"converged: no improvement {gain} in the last {since} trials; "
        f"best {top:.6g} at trial {top_n}"
    )
    evidence = {
        "rule": "no_improvement_trials",
        "no_improvement_trials": patience,
        "min_delta": min_delta,
        "trials_without_improvement": since,
        "reference_trial": best_n,
        "reference_value": best,
        "best_trial": top_n,
        "best_value": top,
        "completed_trials": len(values),
    }
    return Converged(reason, evidence)


def terminated(should: bool, regret: float | None, error: float | None, n: int) -> Converged | None:
    """Pure: Optuna's terminator said stop (regret bound below the statistical error)."""
    if not should or regret is None or error is None:
        return None
    reason = (
        f"converged: Optuna's terminator: regret bound {regret:.4g} < statistical error "
        f"{error:.4g} after {n} completed trials"
    )
    evidence = {"rule": "terminator", "regret_bound": regret, "error": error, "completed_trials": n}
    return Converged(reason, evidence)


class Watch:
    """The completed trials' values as the driver learns them, and the stop rules over them."""

    def __init__(self, stop_when: Any, maximize: bool) -> None:
        self.rules = stop_when
        self.maximize = maximize
        self.values: list[tuple[int, float]] = []
        self.study: Any = None
        self._terminator: Any = None
        self._asked_at = -1  # len(values) when the terminator last answered
        self._answer: Converged | Unusable | None = None

    def load(self, study: Any) -> None:
        """A resumed or joined sweep: the study's completed trials, in the order they finished."""
        self.study = study
        done = [
            t
            for t in study.get_trials(deepcopy=False)
            if t.state.name == "COMPLETE" and t.values is not None and len(t.values) == 1
        ]
        done.sort(key=lambda t: (t.datetime_complete is None, t.datetime_complete, t.number))
        self.values = [(t.number, float(t.values[0])) for t in done]

    def record(self, number: int, value: float) -> None:
        self.values.append((number, float(value)))

    def check(self) -> Converged | Unusable | None:
        r = self.rules
        if r.no_improvement_trials is not None:
            c = no_improvement(self.values, self.maximize, r.no_improvement_trials, r.min_delta)
            if c is not None:
                return c
        if r.terminator is False or self.study is None:
            return None
        if self._asked_at != len(self.values):
            self._asked_at = len(self.values)
            self._answer = self._ask_terminator()
        return self._answer

    def _ask_terminator(self) -> Converged | Unusable | None:
        from sweeps.search import terminator as optuna_terminator

        t = self.rules.terminator
        error, min_trials, seed = (None, 20, None) if t is True else (t.error, t.min_trials, t.seed)
        try:
            if self._terminator is None:
                self._terminator = optuna_terminator.make(error, min_trials, seed)
            should, regret, err = optuna_terminator.evaluate(self._terminator, self.study)
        except Exception as e:  # Optuna's ValueError (e.g. an empty search space) and the like
            return Unusable(
                f"budget.stop_when.terminator: Optuna's terminator failed: {one_line(e)}"
            )
        return terminated(should, regret, err, len(self.values))


def record(study: Any, tracker: Any, parent_run_id: str | None, c: Converged) -> None:
    """The evidence, as JSON, on the study (`show`) and on the MLflow parent run."""
    study.set_user_attr(names.CONVERGED, c.evidence)
    if parent_run_id:
        tracker.set_tags(parent_run_id, {names.CONVERGED: c.as_json()})


def check(spec: Any) -> None:
    """`validate`: what the schema cannot say about budget.stop_when, one line."""
    from sweeps.common.errors import SpecError

    rules = spec.budget.stop_when
    if rules is None:
        return
    if spec.multi_objective:
        raise SpecError(
            "budget.stop_when: only with a single objective (objective:, not objectives:)"
        )
    if rules.terminator is not False:
        from sweeps.search import terminator as optuna_terminator

        optuna_terminator.check_available()
