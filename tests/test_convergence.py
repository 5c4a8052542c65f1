"""budget.stop_when, the pure parts: the no-improvement rule (both directions, min_delta,
ties), Optuna's terminator on in-memory studies (against Optuna's own `should_terminate`), the
budget policy's launch decision, and what `sweeps validate` says. No Ray here:
tests/test_convergence_sweep.py runs a sweep that converges."""

from __future__ import annotations

import json
import warnings

import optuna
import pytest
from conftest import make_spec
from optuna.distributions import FloatDistribution
from optuna.trial import create_trial

from sweeps.common.errors import SpecError
from sweeps.driver import convergence as conv
from sweeps.driver.policies import BudgetPolicy
from sweeps.driver.state import Ending
from sweeps.search import terminator as optuna_terminator
from sweeps.spec.stop import StopWhen


def numbered(values: list[float]) -> list[tuple[int, float]]:
    return list(enumerate(values))


def test_constant_values_converge_after_patience_trials_past_the_first():
    values = numbered([0.5] * 5)
    assert conv.no_improvement(values, True, 5) is None  # 4 after the first
    c = conv.no_improvement(numbered([0.5] * 6), True, 5)
    assert c is not None
    assert c.reason == (
        "converged: no improvement over the best in the last 5 trials; best 0.5 at trial 0"
    )
    assert c.evidence["trials_without_improvement"] == 5
    assert c.evidence["best_trial"] == 0 and c.evidence["completed_trials"] == 6


@pytest.mark.parametrize("maximize", [True, False])
def test_an_improvement_resets_the_count_in_either_direction(maximize):
    sign = 1 if maximize else -1
    vals = [sign * v for v in (0.1, 0.2, 0.2, 0.2, 0.3, 0.1, 0.1)]
    assert conv.no_improvement(numbered(vals), maximize, 3) is None  # 0.3 at trial 4 reset it
    c = conv.no_improvement(numbered([*vals, sign * 0.05]), maximize, 3)
    assert c is not None and c.evidence["best_trial"] == 4
    assert c.evidence["best_value"] == pytest.approx(sign * 0.3)
    # The other direction reads the same values as getting worse from trial 0 on.
    worse = conv.no_improvement(numbered(vals), not maximize, 3)
    assert worse is not None and worse.evidence["reference_trial"] == 0


def test_a_tie_is_no_improvement():
    assert conv.no_improvement(numbered([0.9, 0.9, 0.9]), True, 2) is not None
    assert conv.no_improvement(numbered([0.9, 0.9, 0.9]), False, 2) is not None


def test_min_delta_counts_only_gains_beyond_it_and_keeps_the_reference_best():
    # Each gains less than 0.001 over trial 0: no improvement; the reference stays trial 0
    # (Keras's rule: small gains do not add up by moving the reference).
    creeping = [0.9, 0.9004, 0.9007, 0.9009]
    c = conv.no_improvement(numbered(creeping), True, 3, min_delta=0.001)
    assert c is not None
    assert c.evidence["reference_trial"] == 0 and c.evidence["best_trial"] == 3
    assert "no improvement > 0.001 in the last 3 trials; best 0.9009 at trial 3" in c.reason
    assert conv.no_improvement(numbered(creeping), True, 3) is None  # without min_delta: gains
    jump = [0.9, 0.9005, 0.9025, 0.9026]  # 0.9025 beats 0.9 by more than 0.001
    assert conv.no_improvement(numbered(jump), True, 2, min_delta=0.001) is None
    down = [1.0, 0.9995, 0.998]  # minimize: 0.998 beats 1.0 by more than 0.001
    assert conv.no_improvement(numbered(down), False, 2, min_delta=0.001) is None
    assert conv.no_improvement(numbered(down[:2] + [0.9992]), False, 2, 0.001) is not None


def test_no_values_never_converge():
    assert conv.no_improvement([], True, 1) is None


def policy(stop_when: dict, **fields) -> BudgetPolicy:
    return BudgetPolicy(make_spec(budget={"trials": 30, "stop_when": stop_when}, **fields))


def test_budget_policy_stops_launching_once_converged():
    b = policy({"no_improvement_trials": 2})
    for number, value in enumerate([0.7, 0.8, 0.8]):
        b.record_value(value, number)
        assert b.check(used=number + 1, running=0).launch
    b.record_value(0.75, 3)
    d = b.check(used=4, running=0)
    assert not d.launch and d.ends_as is Ending.FINISHED and not d.cancels
    assert d.reason.startswith("converged: no improvement over the best in the last 2 trials")
    assert b.converged is not None and b.converged.reason == d.reason
    assert b.converged.evidence["best_trial"] == 1


def test_watch_loads_a_studys_completed_trials_in_the_order_they_finished():
    study = optuna.create_study(direction="maximize")
    dist = {"x": FloatDistribution(0, 1)}
    for value, second in [(0.9, 30), (0.5, 10), (0.5, 20)]:
        t = create_trial(params={"x": 0.1}, distributions=dist, value=value)
        t.datetime_complete = t.datetime_complete.replace(microsecond=0, second=second)
        study.add_trial(t)
    w = conv.Watch(StopWhen(no_improvement_trials=2), maximize=True)
    w.load(study)
    assert w.values == [(1, 0.5), (2, 0.5), (0, 0.9)]
    assert w.check() is None  # trial 0 finished last and improved


def flat_study(n: int, seed: int = 0) -> optuna.Study:
    """A study whose objective does not depend on its one parameter: nothing left to gain."""
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed))
    study.optimize(lambda t: 0.5 + 0 * t.suggest_float("x", 0, 1), n_trials=n)
    return study


def test_terminator_matches_optunas_own_should_terminate():
    study = flat_study(12)
    for error in (1.0, 0.0):
        ours = optuna_terminator.make(error, min_trials=10, seed=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            theirs = optuna.terminator.Terminator(
                improvement_evaluator=optuna.terminator.RegretBoundEvaluator(seed=1),
                error_evaluator=optuna.terminator.StaticErrorEvaluator(error),
                min_n_trials=10,
            )
            expected = bool(theirs.should_terminate(study))
        should, regret, err = optuna_terminator.evaluate(ours, study)
        assert should is expected is (error == 1.0)
        assert regret is not None and regret < 1.0 and err == error


def test_watch_with_the_terminator_converges_with_its_evidence():
    study = flat_study(12)
    w = conv.Watch(StopWhen(terminator={"error": 1.0, "min_trials": 12, "seed": 0}), True)
    w.load(study)
    c = w.check()
    assert isinstance(c, conv.Converged)
    assert c.evidence["rule"] == "terminator" and c.evidence["completed_trials"] == 12
    assert c.evidence["regret_bound"] < c.evidence["error"] == 1.0
    assert c.reason.startswith("converged: Optuna's terminator: regret bound ")
    below = conv.Watch(StopWhen(terminator={"error": 1.0, "min_trials": 13}), True)
    below.load(study)
    assert below.check() is None  # Optuna's min_n_trials not reached


def test_a_terminator_that_cannot_evaluate_fails_the_sweep_with_one_line():
    study = optuna.create_study(direction="maximize")
    for _ in range(3):  # no parameters: Optuna's regret bound has no search space
        study.add_trial(create_trial(params={}, distributions={}, value=0.5))
    b = policy({"terminator": {"error": 0.1, "min_trials": 2}})
    assert b.watch is not None
    b.watch.load(study)
    d = b.check(used=3, running=0)
    assert not d.launch and d.ends_as is Ending.FAILED
    assert d.reason.startswith("budget.stop_when.terminator: Optuna's terminator failed: ")
    assert "search space is empty" in d.reason and "\n" not in d.reason


def test_check_rejects_multi_objective_and_passes_the_terminator_here():
    objectives = [
        {"metric": "val_accuracy", "direction": "maximize"},
        {"metric": "val_loss", "direction": "minimize"},
    ]
    spec = make_spec(budget={"stop_when": {"no_improvement_trials": 3}}, objectives=objectives)
    with pytest.raises(SpecError, match="budget.stop_when: only with a single objective"):
        conv.check(spec)
    conv.check(make_spec(budget={"stop_when": {"terminator": True}}))


def test_a_missing_terminator_module_is_one_line_naming_it(monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "optuna._gp.gp":
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake)
    with pytest.raises(SpecError) as e:
        optuna_terminator.check_available()
    assert "torch is missing" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("stop_when", "message"),
    [
        ("{}", "set no_improvement_trials, terminator, or both"),
        ("{min_delta: 0.1, terminator: true}", "min_delta: only with no_improvement_trials"),
        ("{no_improvement_trials: 0}", "greater than or equal to 1"),
        ("{no_improvement_trials: 5, min_delta: -1}", "greater than or equal to 0"),
    ],
)
def test_validate_cli_exits_2_with_one_line(tmp_path, home, stop_when, message):
    from typer.testing import CliRunner

    from sweeps.cli import app

    path = tmp_path / "s.yaml"
    path.write_text(
        "name: c\nsearch_space: {lr: {type: float, low: 0.001, high: 0.1}}\n"
        "trainer: {model: mlp, dataset: digits, epochs: 1}\n"
        f"budget: {{trials: 30, stop_when: {stop_when}}}\n"
    )
    r = CliRunner().invoke(app, ["validate", str(path)])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "budget.stop_when" in lines[0] and message in lines[0], r.output
    path.write_text(path.read_text().replace(stop_when, "{no_improvement_trials: 5}"))
    assert CliRunner().invoke(app, ["validate", str(path)]).exit_code == 0


def test_the_driver_drains_once_converged_and_records_the_evidence():
    """Against the driver's fakes (tests/driver_fakes.py): the trial running when the search
    converged finishes normally, no new one starts, and the evidence reaches the study and the
    parent run's tags."""
    from driver_fakes import Harness
    from optuna.trial import TrialState

    from sweeps.common import names
    from sweeps.contracts.protocol import Assignment, Stop

    h = Harness(budget={"trials": 30, "parallel": 2, "stop_when": {"no_improvement_trials": 2}})
    tags: list[tuple[str, dict]] = []
    h.tracker.set_tags = lambda run_id, t: tags.append((run_id, t))  # type: ignore[method-assign]
    h.driver.start()
    a, b = h.lanes
    first, second = h.next(a), h.next(b)
    h.finish(first, a, val_accuracy=0.8)
    h.finish(second, b, val_accuracy=0.7)  # 1 without improvement
    third, running = h.next(a), h.next(b)
    assert isinstance(third, Assignment) and isinstance(running, Assignment)
    h.finish(third, a, val_accuracy=0.8)  # a tie: 2 without improvement
    stop = h.next(a)
    assert isinstance(stop, Stop) and stop.reason.startswith("converged: no improvement")
    h.report(running, b, 1, val_accuracy=0.9)  # the running trial goes on to its end
    h.finish(running, b, val_accuracy=0.9)
    assert isinstance(h.next(b), Stop)
    h.end_lane(a)
    h.end_lane(b)
    out = h.driver.finish()
    assert out.state == "finished"
    assert out.reason == (
        "converged: no improvement over the best in the last 2 trials; best 0.8 at trial 0"
    )
    states = [t.state for t in h.study.get_trials()]
    assert states == [TrialState.COMPLETE] * 4
    evidence = h.study.user_attrs[names.CONVERGED]
    assert evidence["trials_without_improvement"] == 2 and evidence["completed_trials"] == 3
    assert [(rid, json.loads(t[names.CONVERGED])) for rid, t in tags] == [("parent", evidence)]
