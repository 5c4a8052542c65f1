"""Outcome constraints end to end (real Optuna, the session's real local Ray, MLflow on SQLite):
the same seeded sweep of two digits MLPs, unconstrained and then with a `param_count` bound
that the unconstrained winner breaks; and a sweep where no trial is feasible."""

from __future__ import annotations

from conftest import make_spec
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from sweeps import api
from sweeps.cli import app
from sweeps.common import names
from sweeps.search.study import load_study
from tracking.report import collect, render_markdown

SMALL, BIG = {"hidden": 32}, {"hidden": 256}


def _spec(name: str, constraints: list[str], trials: int = 2):
    return make_spec(
        name=name,
        search_space={"hidden": {"type": "categorical", "choices": [32, 256]}},
        budget={"trials": trials, "parallel": 1},
        trainer={"epochs": 1},
        constraints=constraints,
    )


def _param_counts(out, doc) -> dict[int, float]:
    client = MlflowClient(out.tracking_uri)
    return {
        t["number"]: client.get_run(t["mlflow_run_id"]).data.metrics["final_param_count"]
        for t in doc["trials"]
    }


def test_constrained_sweep_crowns_a_feasible_trial_where_the_unconstrained_one_does_not(
    ray_cluster, home
):
    free = api.run(_spec("free", []), enqueue=[SMALL, BIG], install_signals=False)
    assert free.state == "finished", free.reason
    free_doc = api.show("free")
    winner = free_doc["best"]["number"]
    counts = _param_counts(free, free_doc)
    # A bound between the two models' sizes that the unconstrained winner breaks, whichever won.
    mid = sum(counts.values()) / 2
    op = "<=" if counts[winner] > mid else ">="
    rule = f"param_count {op} {mid:g}"
    key = f"param_count {op} {float(f'{mid:g}'):g}"

    out = api.run(_spec("bounded", [rule]), enqueue=[SMALL, BIG], install_signals=False)
    assert out.state == "finished", out.reason
    doc = api.show("bounded")
    other = 1 - winner
    assert doc["best"]["number"] == other  # the best FEASIBLE trial
    assert doc["best"]["params"] != free_doc["best"]["params"]
    assert [t["infeasible"] for t in doc["trials"]][winner] == [key]
    assert [t["infeasible"] for t in doc["trials"]][other] == []
    # Optuna holds the values (what TPE, NSGA-II and GP read) and its own best_trial agrees.
    study = load_study("bounded", out.storage_url)
    assert set(study.trials[winner].constraints) == {key}
    assert study.trials[winner].constraints[key] > 0 >= study.trials[other].constraints[key]
    assert study.best_trial.number == other
    # The MLflow parent run's best, the report and `show` say the same.
    client = MlflowClient(out.tracking_uri)
    parent = client.get_run(out.parent_run_id)
    assert parent.data.tags[names.BEST_TRIAL] == str(other)
    md = render_markdown(collect(study, out.tracking_uri))
    assert f"| {winner} (infeasible: {key}) |" in md
    assert f"Trial {other}, val_accuracy = " in md
    shown = CliRunner().invoke(app, ["show", "bounded"])
    assert f"#{winner} infeasible: {key}" in shown.output, shown.output


def test_a_sweep_with_no_feasible_trial_fails_saying_so(ray_cluster, home):
    out = api.run(_spec("none-fit", ["param_count <= 10"], trials=1), install_signals=False)
    assert out.state == "failed"  # the CLI's exit code 1
    assert out.reason == (
        "no feasible trial: the only complete trial broke a constraint ('param_count <= 10' by 1)"
    )
    assert api.show("none-fit")["best"] is None
