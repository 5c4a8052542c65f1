"""Outcome constraints, the pure parts: the parser, violation values in Optuna's convention, the
best feasible trial (against real Optuna trials and Optuna's own `best_trial`), promote's
default choice, and what `sweeps validate` says. No Ray here: tests/test_constrained_sweep.py
runs the sweeps."""

from __future__ import annotations

import math

import optuna
import pytest
from conftest import make_spec
from optuna.distributions import FloatDistribution
from optuna.trial import create_trial

from sweeps.common import names
from sweeps.common.errors import NotFoundError, SpecError
from sweeps.search import constraints as cons
from sweeps.search.select import pick_trial


@pytest.mark.parametrize(
    ("text", "name", "op", "bound", "key"),
    [
        ("param_count <= 2e5", "param_count", "<=", 200000.0, "param_count <= 200000"),
        ("  epoch_seconds<0.5 ", "epoch_seconds", "<", 0.5, "epoch_seconds < 0.5"),
        ("cost_usd >= -1E-2", "cost_usd", ">=", -0.01, "cost_usd >= -0.01"),
        ("resources.workers > 1", "resources.workers", ">", 1.0, "resources.workers > 1"),
        ("x <= .5", "x", "<=", 0.5, "x <= 0.5"),
    ],
)
def test_parse_reads_name_op_number(text, name, op, bound, key):
    c = cons.parse(text)
    assert (c.name, c.op, c.bound, c.key) == (name, op, bound, key)


@pytest.mark.parametrize(
    "text",
    [
        "x == 1",
        "x <= y",
        "1 <= x",
        "x <= 1; y >= 2",
        "__import__('os').system('true') <= 1",
        "x <= 1e999",
        "x <= nan",
        "x <=",
        "",
        5,
    ],
)
def test_parse_refuses_anything_else_with_one_line(text):
    with pytest.raises(SpecError) as e:
        cons.parse(text, "constraints.3")
    msg = str(e.value)
    assert msg.startswith("constraints.3: ") and "\n" not in msg


def test_violation_is_optuna_convention_and_strict_bounds_exclude_their_edge():
    le, lt, ge, gt = (cons.parse(f"x {op} 10") for op in ("<=", "<", ">=", ">"))
    assert le.violation(10) == 0 and le.violation(9) < 0 and le.violation(12) == 2
    assert lt.violation(10) > 0 and lt.violation(math.nextafter(10, 0)) <= 0
    assert ge.violation(10) == 0 and ge.violation(7) == 3 and ge.violation(11) < 0
    assert gt.violation(10) > 0 and gt.violation(math.nextafter(10, 99)) <= 0


def test_violations_read_metrics_costs_and_params():
    c = cons.parse_all(["param_count <= 100", "cost_usd <= 0.5", "lr >= 0.1", "momentum <= 1"])
    got = cons.violations(
        c, {"lr": 0.05}, {"param_count": 150, "val_accuracy": 0.9}, {"cost_usd": 0.25},
        space=["lr", "momentum"],
    )  # fmt: skip
    # momentum is a conditional param this trial lacks: its constraint does not apply (0.0)
    assert got == pytest.approx(
        {"param_count <= 100": 50, "cost_usd <= 0.5": -0.25, "lr >= 0.1": 0.05, "momentum <= 1": 0}
    )
    missing = cons.violations(cons.parse_all(["latency_ms <= 5"]), {}, {"val_loss": 1.0}, {})
    assert missing == (
        "constraint 'latency_ms <= 5': 'latency_ms' is not a reported number (metrics: val_loss)"
    )


def _done(number: int, value: float, **constraints: float):
    t = create_trial(
        value=value,
        params={"lr": 0.01},
        distributions={"lr": FloatDistribution(0.001, 0.1)},
        constraints=constraints or None,
    )
    t.number = number
    return t


def test_best_feasible_skips_broken_trials_and_says_when_none_is_feasible():
    trials = [_done(0, 0.9, a=1.0), _done(1, 0.8, a=0.0), _done(2, 0.85, a=-2.0, b=0.5)]
    assert cons.best_feasible(trials, maximize=True).number == 1
    assert cons.best_feasible(trials, maximize=False).number == 1
    assert cons.violated(trials[2]) == ["b"]
    assert cons.none_feasible(trials) is None
    assert cons.best_feasible([_done(0, 0.5), _done(1, 0.5)], True).number == 0  # ties: earliest
    broken = [trials[0], trials[2]]
    assert cons.best_feasible(broken, maximize=True) is None
    assert cons.none_feasible(broken) == (
        "no feasible trial: all 2 complete trials broke a constraint ('a' by 1, 'b' by 1)"
    )
    assert cons.none_feasible([_done(0, 0.1)]) is None  # no constraint: nothing to say


def _study_with(values_and_violations: list[tuple[float, float]]) -> optuna.Study:
    """A real in-memory study told the way the driver tells: set_constraint, then tell."""
    study = optuna.create_study(direction="maximize", study_name="c")
    study.set_user_attr(names.OBJECTIVE, "val_accuracy")  # as the driver records it
    for value, violation in values_and_violations:
        trial = study.ask({"lr": FloatDistribution(0.001, 0.1)})
        trial.set_constraint("param_count <= 200000", violation)
        study.tell(trial, value)
    return study


def test_our_best_is_optunas_best_trial_and_promote_takes_it():
    study = _study_with([(0.95, 5000.0), (0.90, -10.0), (0.70, -1.0)])
    trials = study.get_trials()
    assert cons.best_feasible(trials, True).number == study.best_trial.number == 1
    assert pick_trial(study, None, None).number == 1  # promote's default: best feasible
    # a rule chooses among feasible trials only
    assert pick_trial(study, None, "val_accuracy max").number == 1
    assert pick_trial(study, 0, None).number == 0  # a trial named outright is the user's call


def test_promote_with_no_feasible_trial_says_so():
    study = _study_with([(0.95, 1.0), (0.90, 2.0)])
    with pytest.raises(ValueError):  # Optuna's own best_trial: "No feasible trials ..."
        _ = study.best_trial
    with pytest.raises(NotFoundError, match="has no feasible trial to promote"):
        pick_trial(study, None, None)
    with pytest.raises(NotFoundError, match="no trial satisfies"):
        pick_trial(study, None, "val_accuracy max")


def test_validate_knows_the_names_it_can():
    ok = make_spec(constraints=["param_count <= 2e5", "epoch_seconds <= 0.5", "lr < 0.01"])
    cons.check(ok)
    with pytest.raises(SpecError, match=r"^constraints\.1: 'param_cnt' is not a param, a cost"):
        cons.check(make_spec(constraints=["cost_usd <= 0.01", "param_cnt <= 2e5"]))
    with pytest.raises(SpecError, match=r"^constraints\.2: repeats constraints\.0 \(lr < 0\.01\)"):
        cons.check(make_spec(constraints=["lr < 0.01", "lr <= 1", "lr<1e-2"]))
    with pytest.raises(SpecError, match=r"^constraints\.0: cannot read 'x = 1'"):
        cons.check(make_spec(constraints=["x = 1"]))
    space = {"opt": {"type": "categorical", "choices": ["adam", "sgd"]}}
    with pytest.raises(SpecError, match="param 'opt' has choices that are not numbers"):
        cons.check(make_spec(search_space=space, constraints=["opt <= 1"]))
    # the user's code reports what it reports: a name only it knows is not refused
    user = make_spec(trainer={"entrypoint": "m:f"}, constraints=["latency_ms <= 5"])
    cons.check(user)


@pytest.mark.parametrize(
    ("sampler", "aware"),
    [("tpe", True), ("gp", True), ("nsga2", True), ("random", False), ("cmaes", False)],
)
def test_validate_says_which_samplers_only_check_after_the_fact(sampler, aware):
    spec = make_spec(sampler={"name": sampler}, constraints=["param_count <= 2e5"])
    assert cons.sampler_aware(spec) is aware
    note = cons.sampler_note(spec)
    assert (note is None) is aware
    if note:
        assert f"sampler '{sampler}'" in note and "checked after the fact only" in note
    assert cons.sampler_note(make_spec(sampler={"name": sampler})) is None


def test_validate_cli_exits_2_with_one_line_on_an_unknown_name(tmp_path, home):
    from typer.testing import CliRunner

    from sweeps.cli import app

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: c\nsearch_space: {lr: {type: float, low: 0.001, high: 0.1}}\n"
        "trainer: {model: mlp, dataset: digits, epochs: 1}\n"
        "constraints: ['param_cnt <= 2e5']\n"
    )
    r = CliRunner().invoke(app, ["validate", str(path)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "constraints.0: 'param_cnt' is not a param" in lines[0]
    path.write_text(path.read_text().replace("param_cnt", "param_count") + "sampler: {name: qmc}\n")
    r = CliRunner().invoke(app, ["validate", str(path)])
    assert r.exit_code == 0, r.output
    assert "sampler 'qmc' does not use constraints" in r.output
