"""TPE's bounded history (sweeps/search/tpe.py): the same suggestions as Optuna's TPESampler
while a study fits the window, and beyond it a model read from the best 25 and the latest
`history` trials only. In-memory studies, no Ray."""

from __future__ import annotations

import random

import optuna
import pytest
from conftest import make_spec
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from sweeps.common.errors import SpecError
from sweeps.search import samplers, tpe

optuna.logging.set_verbosity(optuna.logging.ERROR)
SPACE = {"lr": FloatDistribution(1e-4, 1e-1, log=True), "hidden": IntDistribution(32, 256)}


def _study(sampler, n: int, pruned_share: float = 0.8):
    study = optuna.create_study(direction="maximize", sampler=sampler)
    rng = random.Random(1)
    trials = []
    for _ in range(n):
        p = {"lr": 10 ** rng.uniform(-4, -1), "hidden": rng.randint(32, 256)}
        if rng.random() < pruned_share:
            trials.append(
                create_trial(
                    state=TrialState.PRUNED,
                    params=p,
                    distributions=SPACE,
                    intermediate_values={0: p["lr"]},
                )
            )
        else:
            trials.append(
                create_trial(
                    state=TrialState.COMPLETE, params=p, distributions=SPACE, value=p["lr"]
                )
            )
    study.add_trials(trials)
    return study


def _asks(study, k: int) -> list[dict]:
    out = []
    for _ in range(k):
        t = study.ask()
        t.suggest_float("lr", 1e-4, 1e-1, log=True)
        t.suggest_int("hidden", 32, 256)
        out.append(t.params)
        study.tell(t, t.params["lr"])
    return out


def test_within_the_window_it_suggests_what_optunas_tpe_does():
    ours = _asks(_study(tpe.TPESampler(seed=3, history=200), 150), 20)
    theirs = _asks(_study(optuna.samplers.TPESampler(seed=3), 150), 20)
    assert ours == theirs


def test_beyond_the_window_the_model_reads_the_best_and_the_latest(monkeypatch):
    seen: list[list] = []
    split = tpe._tpe._split_trials

    def spy(study, trials, n_below):
        seen.append(trials)
        return split(study, trials, n_below)

    monkeypatch.setattr(tpe._tpe, "_split_trials", spy)
    study = _study(tpe.TPESampler(seed=0, history=100), 2000)
    _asks(study, 1)
    (trials,) = seen
    complete = [t for t in study.trials[:-1] if t.state == TrialState.COMPLETE]
    best = sorted(complete, key=lambda t: -t.value)[:25]
    numbers = [t.number for t in trials]
    assert len(trials) <= 100 + 25 and numbers == sorted(numbers)
    assert {t.number for t in best} <= set(numbers), "the good group is the whole study's"
    latest = [t.number for t in study.trials[-100:-1]]  # less the asked trial itself
    assert set(latest) <= set(numbers)


def test_while_few_are_complete_the_best_pruned_fill_the_good_group():
    study = _study(optuna.samplers.RandomSampler(), 400, pruned_share=1.0)
    trials = study.get_trials(deepcopy=False)
    got = {t.number for t in tpe.window(study, trials, 50)}
    best = sorted(trials, key=lambda t: -t.intermediate_values[0])[:25]  # Optuna's pruned score
    assert {t.number for t in best} | {t.number for t in trials[-50:]} == got
    assert tpe.window(study, trials[:60], 50) == trials[:60]


def test_history_is_a_spec_option_checked_like_optunas():
    spec = make_spec(sampler={"name": "tpe", "seed": 0, "options": {"history": 300}})
    assert samplers.make_sampler(spec).history == 300
    assert "history" in samplers.sampler_option_names("tpe")
    assert "n_ei_candidates" in samplers.sampler_option_names("tpe")
    bad = make_spec(sampler={"name": "tpe", "options": {"history": -1}})
    with pytest.raises(SpecError, match="history must be an int >= 0"):
        samplers.make_sampler(bad)


def test_the_best_kept_from_ask_to_ask_is_the_best_of_the_whole_list():
    """`BestSoFar` reads only the trials that finished since the last ask: after each of many
    growing lists (running trials in them, some finishing late, ties in value) it holds what a
    sort of the whole list gives."""
    study = optuna.create_study(direction="maximize")
    rng = random.Random(5)
    best = tpe.BestSoFar()
    states = [TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING]
    running: list = []
    for _ in range(300):
        if running and rng.random() < 0.3:  # a trial that ran long finishes now
            t = running.pop(rng.randrange(len(running)))
            study.tell(t, round(rng.random(), 1))  # few distinct values: ties
        t = study.ask()
        if rng.random() < 0.2:
            running.append(t)
            continue
        if rng.random() < 0.2:
            study.tell(t, state=TrialState.PRUNED)
        else:
            study.tell(t, round(rng.random(), 1))
        trials = study._get_trials(deepcopy=False, states=states, use_cache=False)
        got = [t.number for t in best.update(study, trials, states)]
        assert got == [t.number for t in tpe._best_complete(study, trials)]
    assert len(got) == tpe.GOOD
    finished = study.get_trials(deepcopy=False, states=states[:2])
    assert tpe._unseen(finished[:-3], best.seen) is None  # a list lacking some: read again
