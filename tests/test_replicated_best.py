"""The sweep's best once replicates ran: the best replicate mean, not the best single seed
(`show`'s document, `promote`'s default pick). Pure: Optuna's FrozenTrials, no Ray."""

from __future__ import annotations

import optuna

from sweeps.common import names
from sweeps.search.replicated import best_by_replicates


def _trial(number: int, value: float) -> optuna.trial.FrozenTrial:
    t = optuna.trial.create_trial(value=value, params={}, distributions={})
    t.number = number
    return t


def _rec(mean: float) -> dict:
    return {"mean": mean, "ci95_low": mean - 0.01, "ci95_high": mean + 0.01, "n": 5}


def test_the_lucky_seed_loses_to_the_better_mean():
    trials = [_trial(0, 0.99), _trial(1, 0.95), _trial(2, 0.90)]
    attrs = {names.replicates_of_trial(0): _rec(0.91), names.replicates_of_trial(1): _rec(0.94)}
    assert best_by_replicates(attrs, trials, maximize=True).number == 1
    assert best_by_replicates(attrs, trials, maximize=False).number == 0
    assert best_by_replicates({}, trials, maximize=True) is None  # no replicates: Optuna's best


def test_show_and_promote_rank_by_the_mean(tmp_path):
    from sweeps.queries import describe
    from sweeps.search.select import pick_trial

    study = optuna.create_study(
        study_name="rep", storage=f"sqlite:///{tmp_path}/s.db", direction="maximize"
    )
    for v in (0.99, 0.95, 0.90):
        study.add_trial(optuna.trial.create_trial(value=v, params={}, distributions={}))
    study.set_user_attr(names.replicates_of_trial(0), _rec(0.91))
    study.set_user_attr(names.replicates_of_trial(1), _rec(0.94))
    doc = describe(study)
    assert doc["best"]["number"] == 1 and doc["best"]["replicates"]["mean"] == 0.94
    assert [r["number"] for r in doc["replicated"]] == [1, 0]
    assert pick_trial(study, None, None).number == 1
