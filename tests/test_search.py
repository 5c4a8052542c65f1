"""Search beyond the anchors: every sampler and pruner, conditional spaces, multi-objective
sweeps with a selection rule, budgets in money, warm starts."""

from __future__ import annotations

import warnings

import optuna
import pytest
from conftest import byo, make_spec
from mlflow.tracking import MlflowClient

from sweeps import api
from sweeps.search import space
from sweeps.search.samplers import make_pruner, make_sampler
from sweeps.spec import spec_from_dict

COND = {
    "optimizer": {"type": "categorical", "choices": ["sgd", "adamw"]},
    "momentum": {
        "type": "float",
        "low": 0.5,
        "high": 0.95,
        "step": 0.05,
        "when": {"optimizer": "sgd"},
    },
    "lr": {"type": "float", "low": 0.01, "high": 0.1, "step": 0.01},
}


@pytest.mark.parametrize("sampler", ["tpe", "random", "grid", "cmaes", "gp", "nsga2", "qmc"])
def test_every_sampler_honours_conditions_and_seeds(sampler):
    spec = spec_from_dict(
        {"name": "s", "search_space": COND, "sampler": {"name": sampler, "seed": 3}}
    )

    def run() -> list[dict]:
        study = optuna.create_study(direction="maximize", sampler=make_sampler(spec))
        seen = []
        for _ in range(8):
            t = study.ask()
            p = space.suggest(t, spec)
            seen.append(p)
            study.tell(t, p["lr"] - p.get("momentum", 0.0) / 10)
        return seen

    first = run()
    for p in first:
        assert ("momentum" in p) == (p["optimizer"] == "sgd"), p
    assert first == run(), "a seed makes the sampler reproducible"


def test_tpe_models_a_conditional_space_in_groups():
    from sweeps.search.samplers import tpe_options

    def spec(space: dict, **options) -> object:
        sampler = {"name": "tpe", "seed": 0, "options": options}
        return spec_from_dict({"name": "s", "search_space": space, "sampler": sampler})

    plain = {"lr": COND["lr"]}
    assert tpe_options(spec(plain)) == {}, "an unconditional space keeps Optuna's defaults"
    assert tpe_options(spec(COND)) == {"multivariate": True, "group": True}
    assert tpe_options(spec(COND, group=False)) == {"group": False}, "the user's choice wins"
    assert tpe_options(spec(COND, multivariate=False)) == {"multivariate": False}

    s = spec(COND, n_startup_trials=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", optuna.exceptions.ExperimentalWarning)
        study = optuna.create_study(direction="maximize", sampler=make_sampler(s))
    for _ in range(12):  # ten of them sampled by the grouped model, not at random
        t = study.ask()
        p = space.suggest(t, s)
        assert ("momentum" in p) == (p["optimizer"] == "sgd"), p
        study.tell(t, p["lr"] - p.get("momentum", 0.0) / 10)


@pytest.mark.parametrize(
    "pruner",
    [
        {"name": "median", "options": {"n_startup_trials": 1}},
        {"name": "percentile", "options": {"percentile": 50.0, "n_startup_trials": 1}},
        {"name": "successive_halving"},
        {"name": "hyperband", "options": {"max_resource": 6}},
        {
            "name": "patient",
            "wraps": {"name": "median", "options": {"n_startup_trials": 1}},
            "options": {"patience": 1},
        },
        {"name": "none"},
    ],
)
def test_every_pruner_prunes_a_hopeless_trial_or_never(pruner):
    p = make_pruner(spec_from_dict({"name": "p", "pruner": pruner}).pruner)
    study = optuna.create_study(
        direction="maximize", pruner=p, sampler=optuna.samplers.RandomSampler(seed=0)
    )
    for _ in range(12):  # enough finished trials for every Hyperband bracket to compare
        t = study.ask()
        for step in range(1, 7):
            t.report(0.5 + 0.08 * step, step)
            assert not t.should_prune()  # rung-based pruners record promotions here
        study.tell(t, 0.98)
    bad = study.ask()
    pruned = False
    for step in range(1, 7):
        bad.report(0.01 if pruner["name"] != "patient" else 0.01 - 0.001 * step, step)
        if bad.should_prune():
            pruned = True
            break
    assert pruned == (pruner["name"] != "none")


# Every sampler drives a real sweep of the built-in trainer, each paired with one pruner so
# that every pruner also sees real per-epoch reports (its decisions are tested above).
PAIRS = [
    ("tpe", {"name": "median", "options": {"n_startup_trials": 1}}),
    ("random", {"name": "percentile"}),
    ("grid", {"name": "successive_halving", "options": {"min_resource": 1}}),
    ("cmaes", {"name": "hyperband", "options": {"min_resource": 1, "max_resource": 2}}),
    ("gp", {"name": "patient", "options": {"patience": 1}, "wraps": {"name": "median"}}),
    ("nsga2", {"name": "none"}),
    ("qmc", {"name": "none"}),
]


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize(("sampler", "pruner"), PAIRS, ids=[p[0] for p in PAIRS])
def test_every_sampler_and_pruner_drive_a_tiny_built_in_sweep(home, sampler, pruner):
    name = f"s-{sampler}"
    spec = make_spec(
        name=name,
        sampler={"name": sampler, "seed": 1},
        pruner=pruner,
        # discrete, so the grid sampler can walk it; two dimensions, so CMA-ES really runs
        search_space={
            "lr": {"type": "float", "low": 0.005, "high": 0.02, "step": 0.005},
            "hidden": {"type": "int", "low": 16, "high": 32, "step": 16},
        },
        trainer={"epochs": 2},
        budget={"trials": 4, "parallel": 2},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished"
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{home}/optuna.db")
    trials = study.trials
    assert len(trials) == 4
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED"}
    for t in trials:
        assert t.intermediate_values, "per-epoch reports reached the pruner"
        assert 0.0 < t.intermediate_values[max(t.intermediate_values)] <= 1.0
    if sampler == "grid":
        assert len({(t.params["lr"], t.params["hidden"]) for t in trials}) == 4
    params = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(out.parent_run_id).data.params
    assert (params["sampler"], params["pruner"]) == (sampler, pruner["name"])


@pytest.mark.usefixtures("ray_cluster")
def test_conditional_params_are_absent_from_mlflow_when_inactive(home):
    spec = byo(
        "curve",
        name="cond",
        sampler={"name": "random", "seed": 7},
        search_space=COND,
        budget={"trials": 6},
    )
    api.run(spec, install_signals=False)
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    seen = set()
    for t in api.show("cond")["trials"]:
        params = client.get_run(t["mlflow_run_id"]).data.params
        seen.add(t["params"]["optimizer"])
        assert ("momentum" in params) == (t["params"]["optimizer"] == "sgd")
    assert seen == {"sgd", "adamw"}


@pytest.fixture
def priced(tmp_path, monkeypatch):
    """A price table where a worker costs $1 per second: budgets bite within a test."""
    table = tmp_path / "machines.yaml"
    table.write_text(
        "machines:\n  dear: {vcpus: 1, memory_gb: 1, price_per_hour: 3600}\n"
        "  gpu-box: {vcpus: 8, memory_gb: 32, price_per_hour: 7200, gpu: l4, "
        "gpu_count: 1}\n"
    )
    monkeypatch.setenv("SWEEPS_MACHINES", str(table))
    return table


@pytest.mark.usefixtures("ray_cluster")
def test_money_budget_stops_launching_before_it_is_exceeded(home, priced):
    spec = byo(
        "slow",
        name="money",
        budget={"trials": 40, "max_cost_usd": 3.0},
        resources={"machine_type": "dear"},
        trainer={"epochs": 2, "params": {"sleep": 0.25}},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished" and "money budget" in out.reason, out.reason
    doc = api.show("money")
    costs = [t["cost_usd"] for t in doc["trials"]]
    assert 2 <= len(costs) < 40
    assert sum(costs) <= 3.0 + max(costs) - min(costs) + 1e-9, costs  # + one forecast error
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    parent = client.get_run(doc["parent_run_id"])
    assert "money budget" in parent.data.tags["sweeps.stop_reason"]
    assert parent.data.metrics["cost_usd"] == pytest.approx(sum(costs), rel=1e-6)


@pytest.mark.usefixtures("ray_cluster")
def test_multi_objective_pareto_front_and_promote_with_a_rule(home, priced):
    spec = make_spec(
        name="mo",
        objectives=[
            {"metric": "val_accuracy", "direction": "maximize"},
            {"metric": "param_count", "direction": "minimize"},
        ],
        search_space={"hidden": {"type": "int", "low": 8, "high": 128, "log": True}},
        sampler={"name": "nsga2", "seed": 2},
        budget={"trials": 4},
        trainer={"epochs": 2, "params": {"lr": 0.01}},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished"
    study = optuna.load_study(study_name="mo", storage=f"sqlite:///{home}/optuna.db")
    assert len(study.directions) == 2
    front = study.best_trials
    assert front
    smallest = min(t.values[1] for t in front)
    p = api.promote("mo", "mo-model", select=f"val_accuracy max; param_count <= {smallest}")
    chosen = [t for t in front if t.values[1] <= smallest]
    assert p["trial"] == max(chosen, key=lambda t: t.values[0]).number
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    arts = {a.path for a in client.list_artifacts(out.parent_run_id, "plots")}
    assert "plots/pareto_front.png" in arts


@pytest.mark.usefixtures("ray_cluster")
def test_warm_start_reuses_earlier_trials(home):
    api.run(
        byo(
            "curve",
            name="warm-a",
            budget={"trials": 4},
            sampler={"name": "random", "seed": 1},
            search_space={"lr": {"type": "float", "low": 0.001, "high": 0.05}},
        ),
        install_signals=False,
    )
    a = {t["number"]: t for t in api.show("warm-a")["trials"]}
    spec = byo(
        "curve",
        name="warm-b",
        budget={"trials": 2},
        search_space={"lr": {"type": "float", "low": 0.001, "high": 0.03}},
        warm_start={"from": ["warm-a"], "top_k": 1},
    )
    out = api.run(spec, install_signals=False)
    study = optuna.load_study(study_name="warm-b", storage=f"sqlite:///{home}/optuna.db")
    warm = [t for t in study.trials if "sweeps.warm_from" in t.user_attrs]
    fits = [t for t in a.values() if t["params"]["lr"] <= 0.03]
    copied = [
        t
        for t in warm
        if t.state.name == "COMPLETE"
        and "mlflow_run_id" in t.user_attrs
        and t.user_attrs["mlflow_run_id"] in {x["mlflow_run_id"] for x in a.values()}
    ]
    assert len(copied) == len(fits)
    new = [t for t in study.trials if t.user_attrs.get("sweeps.driver")]
    assert len(new) == 2, "warm trials do not use the new sweep's budget"
    best_a = max(fits, key=lambda t: t["value"])
    assert new[0].params == best_a["params"], "the top configuration was enqueued first"
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    tags = client.get_run(out.parent_run_id).data.tags
    assert tags["sweeps.warm_start.from"] == "warm-a"
    assert f"copied {len(fits)} of 4" in tags["sweeps.warm_start.notes"]


@pytest.mark.usefixtures("ray_cluster")
def test_resources_are_searched_like_any_parameter(home, priced):
    spec = byo(
        "nodes",
        name="shapes",
        budget={"trials": 4, "parallel": 1},
        sampler={"name": "grid"},
        search_space={
            "lr": {"type": "categorical", "choices": [0.01]},
            "resources.workers": {"type": "categorical", "choices": [1, 2]},
            "resources.machine_type": {"type": "categorical", "choices": ["dear", "gpu-box"]},
        },
        trainer={"epochs": 1},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished", out.reason
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    seen = set()
    for t in api.show("shapes")["trials"]:
        assert t["state"] == "COMPLETE", t
        run = client.get_run(t["mlflow_run_id"])
        workers = t["params"]["resources.workers"]
        assert run.data.tags["sweeps.hw.world_size"] == str(workers)
        assert run.data.params["resources.workers"] == str(workers)
        # dear: 1 vCPU, a 1-CPU worker fills it; gpu-box: 8 vCPUs, a 1-CPU worker pays 1/8
        dear = t["params"]["resources.machine_type"] == "dear"
        price, share = (3600, 1.0) if dear else (7200, 1 / 8)
        assert run.data.metrics["cost_usd"] == pytest.approx(
            price / 3600 * workers * share * run.data.metrics["duration_s"], rel=1e-6
        )
        seen.add((workers, t["params"]["resources.machine_type"]))
    assert len(seen) == 4


def test_only_some_resources_are_searchable():
    with pytest.raises(Exception, match="resources.cpus_per_worker: only"):
        spec_from_dict(
            {
                "name": "x",
                "search_space": {"resources.cpus_per_worker": {"type": "int", "low": 1, "high": 2}},
            }
        )
