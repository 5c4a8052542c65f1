"""TPE with a bounded history: the sampler behind `sampler: {name: tpe}`.

Optuna's TPESampler reads every finished trial on each ask: splitting them into the good and
the bad group, turning their params into arrays and scoring its candidates against one kernel
per trial are all O(trials) in Python. Measured in one process with an in-memory study (2 CPUs,
loaded): 9-30 ms an ask at 100 trials, 18-50 ms at 1,000, 214 ms at 5,000, 396 ms at 10,000.
Optuna offers no cap of its own (`n_ei_candidates` only scales the scoring part, `n_startup`
only delays the model, `gamma`/`weights` are deprecated), so this subclass gives the model the
trials that decide it:

- the good group exactly as Optuna forms it: `gamma(n)` is at most 25, and the best 25
  feasible complete trials of the whole study (or, while fewer are complete, the best pruned
  ones by Optuna's own score) are always kept;
- the bad group from the latest `history` trials, the ones Optuna's default weights count most
  (its ramp gives the oldest trials of a 10,000-trial study a weight near 1/10,000).

`sampler.options.history` sets the window (default 1,000; 0 reads the whole study, as Optuna
does; so does a multi-objective study or a `gamma` of the user's, whose good group can be
larger). Below the window nothing changes: the sampler then sees what Optuna's would. Within one
ask the model reads the trial list the ask already read (Optuna re-reads the storage there
when `constant_liar` is on, a few milliseconds later, to see other workers' running trials).
Optuna's private names used here (`_sample`, `_get_trials`, the split's scores) are exercised
by tests/test_tpe_window.py against the pinned release.
"""

from __future__ import annotations

import heapq
import inspect
from collections.abc import Container
from typing import Any

import optuna
from optuna.samplers._tpe import sampler as _tpe

HISTORY = 1000  # the default window: the trials the bad group is modelled on
GOOD = 25  # Optuna's default gamma never puts more trials in the good group


class TPESampler(optuna.samplers.TPESampler):
    """Optuna's TPESampler, reading at most the best 25 and the latest `history` trials."""

    def __init__(self, *, history: int = HISTORY, **options: Any) -> None:
        if not isinstance(history, int) or isinstance(history, bool) or history < 0:
            raise ValueError(f"history must be an int >= 0 (0: every trial), got {history!r}")
        super().__init__(**options)
        self.history = history
        self._best = BestSoFar()

    def _sample(self, study: Any, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        # A multi-objective or a user's gamma may put more than 25 trials in the good group.
        own_gamma = self._gamma not in (None, _tpe.default_gamma)
        if not self.history or own_gamma or len(study.directions) > 1:
            return super()._sample(study, trial, search_space)
        return super()._sample(_Window(study, self.history, self._best), trial, search_space)


# The options are Optuna's plus `history`: spec validation reads them from the signature.
_optuna_params = list(inspect.signature(optuna.samplers.TPESampler).parameters.values())
TPESampler.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        *_optuna_params,
        inspect.Parameter("history", inspect.Parameter.KEYWORD_ONLY, default=HISTORY),
    ]
)


class _Window:
    """A study as TPE's model sees it: every call passes through, but the trial list."""

    def __init__(self, study: Any, history: int, best: BestSoFar | None = None) -> None:
        self._study, self._history, self._best = study, history, best

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(
        self,
        deepcopy: bool = False,
        states: Container[Any] | None = None,
        use_cache: bool = False,
    ) -> list[Any]:
        trials = self._study._get_trials(deepcopy=deepcopy, states=states, use_cache=True)
        best = self._best.update(self._study, trials, states) if self._best else None
        return window(self._study, trials, self._history, best)


def window(study: Any, trials: list[Any], history: int, best: list[Any] | None = None) -> list[Any]:
    """The latest `history` of `trials` (ordered by number) and, from the older ones, those
    Optuna would put in the good group; in number order, as Optuna's list is. `best`: the
    study's best feasible complete trials, where already known."""
    if len(trials) <= history + GOOD:
        return trials
    S = optuna.trial.TrialState  # noqa: N806
    good = list(best) if best is not None else _best_complete(study, trials)
    if len(good) < GOOD:  # few complete trials: Optuna fills the good group with pruned ones
        pruned = [t for t in trials if t.state == S.PRUNED]
        good += heapq.nsmallest(
            GOOD - len(good), pruned, key=lambda t: _tpe._get_pruned_trial_score(t, study)
        )
    recent = trials[-history:]
    first = recent[0].number
    older = sorted((t for t in good if t.number < first), key=lambda t: t.number)
    return older + recent


def _best_complete(study: Any, trials: list[Any]) -> list[Any]:
    S = optuna.trial.TrialState  # noqa: N806
    complete = [t for t in trials if t.state == S.COMPLETE]
    return _top(study, complete)


def _top(study: Any, complete: list[Any]) -> list[Any]:
    """The best GOOD feasible trials of `complete`, ties in number order (Optuna's sort is
    stable over a list in number order)."""
    sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
    out: list[Any] = []
    for t in sorted(complete, key=lambda t: (sign * t.value, t.number)):
        if _tpe._get_infeasible_trial_score(t) <= 0:
            out.append(t)
            if len(out) == GOOD:
                break
    return out


class BestSoFar:
    """The best feasible complete trials of a study, kept from ask to ask: a finished trial
    never changes, so an ask reads only the trials that finished since the last one (sorting a
    10,000-trial study's values took 8 ms of each ask)."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.seen: set[int] = set()  # numbers of the finished trials already read
        self.best: list[Any] = []

    def update(self, study: Any, trials: list[Any], states: Container[Any] | None) -> list[Any]:
        key = (study, None if states is None else frozenset(states))  # one Study per sampler
        if self.key is None or key[0] is not self.key[0] or key[1] != self.key[1]:
            self.key, self.seen, self.best = key, set(), []
        fresh = _unseen(trials, self.seen)
        if fresh is None:  # the list is not a superset of the last one: read it all again
            self.seen, self.best = set(), []
            fresh = [t for t in trials if t.state in _FINISHED]
        self.seen.update(t.number for t in fresh)
        complete = [t for t in fresh if t.state == optuna.trial.TrialState.COMPLETE]
        if complete:
            self.best = _top(study, self.best + complete)
        return self.best


_FINISHED = {
    optuna.trial.TrialState.COMPLETE,
    optuna.trial.TrialState.PRUNED,
    optuna.trial.TrialState.FAIL,
}


def _unseen(trials: list[Any], seen: set[int]) -> list[Any] | None:
    """The finished trials of `trials` (ordered by number) not in `seen`, read from the end
    until every trial left is one of `seen`; None if `trials` lacks some of `seen`. New trials
    are the latest, but for one that ran long; running ones come and go."""
    fresh: list[Any] = []
    left = len(seen)  # trials of `seen` not passed yet
    i = len(trials) - 1
    while i + 1 > left:
        t = trials[i]
        if t.number in seen:
            left -= 1
        elif t.state in _FINISHED:
            fresh.append(t)
        i -= 1
    return fresh if i + 1 == left else None
