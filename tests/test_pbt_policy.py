"""Issue 32 #1, the pure part of `search: pbt`: Ray Tune's PBT ranking, exploit and explore
(sweeps/search/pbt.py), the spec's checks, and the segment plan the driver queues
(sweeps/driver/pbt_run.py) against a real in-memory Optuna study. No Ray cluster."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from types import SimpleNamespace

import optuna
import pytest
from conftest import make_spec

from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.driver.pbt_run import PbtRun
from sweeps.search import pbt
from sweeps.spec.params import CategoricalParam, FloatParam, IntParam

SPACE = {
    "lr": FloatParam(type="float", low=1e-4, high=0.1, log=True),
    "hidden": IntParam(type="int", low=16, high=256),
    "optimizer": CategoricalParam(type="categorical", choices=["sgd", "adamw", "adam"]),
}


def test_quantiles_follow_rays_sizes():
    scores = {m: float(m) for m in range(8)}  # member 7 is best when maximizing
    assert pbt.quantiles(scores, 0.25, True) == ([0, 1], [6, 7])
    assert pbt.quantiles(scores, 0.25, False) == ([7, 6], [1, 0])
    # ceil(3 * 0.5) = 2 > 3 / 2: Ray caps the groups at floor(n / 2).
    assert pbt.quantiles({0: 1.0, 1: 2.0, 2: 3.0}, 0.5, True) == ([0], [2])
    assert pbt.quantiles({0: 1.0}, 0.25, True) == ([], [])
    assert pbt.quantiles({0: 1.0, 1: math.nan, 2: 0.5}, 0.25, True) == ([2], [0])
    assert pbt.quantiles(scores, 0.0, True) == ([], [])


def test_a_bottom_member_clones_a_top_member_and_explores():
    params = {m: {"lr": 0.01 * (m + 1)} for m in range(4)}
    scores = {0: 0.1, 1: 0.9, 2: 0.5, 3: 0.6}
    calls = []

    def explore(config, rng):
        calls.append(dict(config))
        return {"lr": config["lr"] * 2}, {"lr": "* 2"}

    rng = random.Random(0)
    c = pbt.decide(0, params, scores, 0.25, True, explore, rng)
    assert (c.clone, c.params, c.ops) == (1, {"lr": 0.04}, {"lr": "* 2"})
    assert calls == [{"lr": 0.02}], "it explores the clone's params, not its own"
    keep = pbt.decide(2, params, scores, 0.25, True, explore, rng)
    assert keep.clone is None and keep.params == {"lr": 0.03} and len(calls) == 1


def test_explore_matches_rays_explore_draw_for_draw():
    """Ray's own `_explore`, as PopulationBasedTraining calls it, against ours on the same
    seeds: where both perturb (no clipping hit), they make the same choices."""
    from ray.tune.schedulers.pbt import _explore

    for seed in range(30):
        config = {"lr": 0.01, "optimizer": "adamw"}
        random.seed(seed)
        mutations = {"lr": lambda: 0.5, "optimizer": ["sgd", "adamw", "adam"]}
        theirs, their_ops = _explore(config, mutations, 0.0, (1.2, 0.8), None)
        perturb = {"lr": [1.2, 0.8], "optimizer": "shift"}
        ours, ops = pbt.explore(config, perturb, SPACE, 0.0, random.Random(seed))
        assert ours["optimizer"] == theirs["optimizer"] and ops == their_ops
        assert ours["lr"] == pytest.approx(theirs["lr"])
        # A categorical value resampled: Ray draws it with random.choice, so do we.
        random.seed(seed)
        theirs, _ = _explore(config, {"optimizer": ["sgd", "adamw", "adam"]}, 1.0, (1.2,), None)
        ours, ops = pbt.explore(config, {"optimizer": "shift"}, SPACE, 1.0, random.Random(seed))
        assert ours == theirs and ops == {"optimizer": "resample"}


def test_explore_keeps_values_inside_the_space():
    rng = random.Random(3)
    for _ in range(200):
        new, ops = pbt.explore(
            {"lr": 0.09, "hidden": 250}, {"lr": [1.2], "hidden": [1.3]}, SPACE, 0.25, rng
        )
        assert 1e-4 <= new["lr"] <= 0.1 and 16 <= new["hidden"] <= 256
        assert isinstance(new["hidden"], int) and set(ops) == {"lr", "hidden"}
    assert pbt.clip(FloatParam(type="float", low=0, high=1, step=0.25), 0.6) == 0.5
    assert pbt.clip(SPACE["hidden"], 20 * 1.2) == 24
    assert pbt.segment_end(6, 4, 8) == 8 and pbt.segment_end(0, 4, 10) == 4


PBT = {"name": "pbt", "population": 4, "interval_epochs": 1, "perturb": {"lr": [0.8, 1.2]}}


def _spec(**over):
    fields = {"search": PBT, "trainer": {"epochs": 3}, "budget": {"trials": 12, "parallel": 2}}
    return make_spec(**{**fields, **over})


@pytest.mark.parametrize(
    ("over", "line"),
    [
        ({"search": {**PBT, "quantile": 0.7}}, "search.quantile: Input should be less than"),
        ({"search": {**PBT, "perturb": {"mom": [1.2]}}}, "search.perturb.mom: not a search_space"),
        ({"search": {**PBT, "perturb": {"lr": [0, 1.2]}}}, "lr: factors must be positive"),
        ({"search": {**PBT, "perturb": {"lr": "shift"}}}, "a float parameter takes factors"),
        ({"search": {**PBT, "interval_epochs": 3}}, "must be below trainer.epochs"),
        ({"budget": {"trials": 5}}, "population x segments = 12 trials"),
        ({"budget": {"trials": 12, "parallel": 5}}, "budget.parallel: at most search.population"),
        ({"pruner": {"name": "median"}}, "pruner: search pbt is its own scheduler"),
        ({"execution": {"checkpoint_min_interval_s": 5}}, "checkpoint_min_interval_s: must be 0"),
        (
            {"search": {**PBT, "interval_epochs": 2}, "execution": {"checkpoint_every": 3}},
            "must divide search.interval_epochs",
        ),
        ({"trainer": {"epochs": 3, "params": {"schedule": "cosine"}}}, "use schedule none"),
        ({"warm_start": {"from": ["other"]}}, "warm_start: not with search pbt"),
    ],
)
def test_bad_pbt_specs_are_one_line(over, line):
    with pytest.raises(SpecError, match=line) as e:
        _spec(**over)
    assert "\n" not in str(e.value) and e.value.exit_code == 2


def test_pbt_sets_the_budget_and_what_it_needs(tmp_path):
    spec = make_spec(search=PBT, trainer={"epochs": 3}, budget={"parallel": 2, "trials": 12})
    assert spec.budget.trials == 12 and spec.pruner.name == "none"
    assert spec.execution.checkpoint_min_interval_s == 0 and spec.execution.keep_checkpoints >= 12
    # The stored spec validates again as it is.
    from sweeps.spec import spec_from_dict

    assert spec_from_dict(spec.model_dump(mode="json", by_alias=True)) == spec
    # `sweeps validate` refuses a bad one: one line, exit 2.
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: p\nsearch_space: {lr: {type: float, low: 0.001, high: 0.1}}\n"
        "trainer: {epochs: 4}\nsearch: {name: pbt, interval_epochs: 2, perturb: {lr: [1.2]},"
        " resample_probability: 1.5}\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "validate", str(bad)], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "search.resample_probability" in out.stderr


def _segment(study, member, gen, value, number_params, ckpt, final=False, parent=None):
    attrs = {
        names.PBT_MEMBER: member,
        names.PBT_GENERATION: gen,
        names.PBT_FINAL: final,
        names.PBT_SCHEDULE: json.dumps([[0, number_params]]),
        names.EXTEND_EPOCHS: gen + 1,
        names.CHECKPOINT: ckpt,
        names.CHECKPOINT_STEP: gen + 1,
        "mlflow_run_id": f"run-{ckpt}",
    }
    if parent is not None:
        attrs[names.PBT_PARENT] = parent
    study.add_trial(
        optuna.trial.create_trial(
            params=number_params,
            distributions={"lr": optuna.distributions.FloatDistribution(1e-3, 0.02, log=True)},
            value=value,
            user_attrs=attrs,
        )
    )


def _run(synch=False, population=4):
    spec = make_spec(
        search={**PBT, "population": population, "synch": synch, "resample_probability": 0.0},
        trainer={"epochs": 3},
        budget={"parallel": 2, "trials": population * 3},
    )
    study = optuna.create_study(direction="maximize")
    ctx = SimpleNamespace(spec=spec, study=study)
    return PbtRun(ctx, tracker=None, clock=lambda: 1e9), study


def test_the_plan_queues_each_ended_members_next_segment():
    run, study = _run()
    for m, v in enumerate([0.2, 0.9, 0.5, 0.6]):
        _segment(study, m, 0, v, {"lr": 0.001 * (m + 1)}, f"/c/m{m}")
    plan = run._plan(study.get_trials(deepcopy=False))
    by_member = {a[names.PBT_MEMBER]: (p, a) for p, a in plan}
    assert sorted(by_member) == [0, 1, 2, 3]
    p0, a0 = by_member[0]  # the worst: continues from the best member's checkpoint
    assert a0[names.PBT_CLONED] == 1 and a0[names.PBT_PARENT] == 1
    assert a0[names.RESUME_CHECKPOINT] == "/c/m1" and a0[names.RESUME_STEP] == 1
    assert a0[names.EXTENDS_RUN] == "run-/c/m1" and a0[names.EXTEND_EPOCHS] == 2
    assert p0["lr"] in (pytest.approx(0.002 * 0.8), pytest.approx(0.002 * 1.2))
    assert json.loads(a0[names.PBT_SCHEDULE]) == [[0, {"lr": 0.002}], [1, p0]]
    p2, a2 = by_member[2]  # the middle: its own checkpoint, its own params
    assert a2[names.PBT_CLONED] == 2 and a2[names.RESUME_CHECKPOINT] == "/c/m2"
    assert p2 == {"lr": 0.003} and a2[names.PBT_GENERATION] == 1 and not a2[names.PBT_FINAL]
    for params, attrs in plan:
        study.enqueue_trial(params, user_attrs=attrs)
    assert run._plan(study.get_trials(deepcopy=False)) == [], "each segment is queued once"


def test_synch_waits_for_the_generation_and_a_missing_checkpoint_is_one_line():
    run, study = _run(synch=True)
    for m, v in enumerate([0.2, 0.9, 0.5]):
        _segment(study, m, 0, v, {"lr": 0.002}, f"/c/m{m}")
    assert run._plan(study.get_trials(deepcopy=False)) == [], "member 3 is not sampled yet"
    study.enqueue_trial({"lr": 0.002}, user_attrs={names.PBT_MEMBER: 3})  # still to run
    assert run._plan(study.get_trials(deepcopy=False)) == []
    run, study = _run()
    for m, v in enumerate([0.2, 0.9, 0.5, 0.6]):
        _segment(study, m, 0, v, {"lr": 0.002}, "" if m == 1 else f"/c/m{m}")
    with pytest.raises(ValueError, match="trial 1 persisted no checkpoint for member 0"):
        run._plan(study.get_trials(deepcopy=False))


def test_the_best_is_a_members_final_segment():
    from sweeps.search.constraints import best_feasible

    def t(n, v, final):
        return SimpleNamespace(
            number=n,
            values=[v],
            state=SimpleNamespace(name="COMPLETE"),
            constraints={},
            user_attrs={names.PBT_FINAL: final},
        )

    assert best_feasible([t(0, 0.99, False), t(1, 0.9, True), t(2, 0.8, True)], True).number == 1


def test_promote_puts_the_members_schedule_on_the_version():
    from tracking.registry import _version_tags

    schedule = json.dumps([[0, {"lr": 0.01}], [4, {"lr": 0.012}]])
    t = SimpleNamespace(number=9, params={"lr": 0.012}, user_attrs={names.PBT_SCHEDULE: schedule})
    run = SimpleNamespace(inputs=None, data=SimpleNamespace(tags={}))
    tags = _version_tags(run, "r9", t, "s", "val_accuracy", "maximize", 0.9, None, False)
    assert json.loads(tags[names.PBT_SCHEDULE]) == [[0, {"lr": 0.01}], [4, {"lr": 0.012}]]
    t.user_attrs = {}
    assert names.PBT_SCHEDULE not in _version_tags(
        run, "r9", t, "s", "val_accuracy", "maximize", 0.9, None, False
    )


def test_requests_wait_while_no_segment_is_queued():
    from sweeps.contracts import protocol as p

    run, study = _run(synch=True, population=2)
    status = SimpleNamespace(launching=True, drained=None)
    status.drain = lambda reason: setattr(status, "drained", reason)
    ask = [p.NextTrial(lane="a", seq=1), p.NextTrial(lane="b", seq=1)]
    assert run.events(list(ask), status) == ask, "two members still to sample"
    _segment(study, 0, 0, 0.5, {"lr": 0.002}, "/c/m0")
    study.enqueue_trial({"lr": 0.002}, user_attrs={names.PBT_MEMBER: 1})  # running, say
    study.ask()
    again = [p.NextTrial(lane="a", seq=2)]
    assert run.events(list(again), status) == [] and run.held == again
    run.polled = 0.0
    assert run.tick(status) == [], "synch: member 1 still runs, so member 0 waits for it"
    # Member 1's segment ends: both next segments are queued and the held request goes.
    _segment(study, 1, 0, 0.9, {"lr": 0.004}, "/c/m1")
    run.polled = 0.0
    assert run.tick(status) == again and run.held == []
    waiting = [t for t in study.get_trials(deepcopy=False) if t.state.name == "WAITING"]
    assert len(waiting) == 2 and status.drained is None


def test_an_extension_of_a_member_is_no_new_member():
    run, _ = _run()
    trial = SimpleNamespace(user_attrs={names.EXTENDS: 5, names.EXTEND_EPOCHS: 6})
    rec = SimpleNamespace(trial=trial, config={"epochs": 6}, retry_of=None, requeued_from=None)
    run.asked(rec)
    assert rec.config["epochs"] == 6 and run.to_log == []
    trial = SimpleNamespace(
        user_attrs={}, set_user_attr=lambda k, v: trial.user_attrs.update({k: v})
    )
    rec = SimpleNamespace(
        trial=trial, config={"epochs": 3}, retry_of=None, requeued_from=None, params={"lr": 0.01}
    )
    run.asked(rec)  # a new member: its first segment trains interval_epochs
    assert rec.config["epochs"] == 1 and trial.user_attrs[names.PBT_MEMBER] == 0
