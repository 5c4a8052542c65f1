"""The backbone end to end on the embedded default: Optuna + Ray Train + MLflow (SQLite)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlflow
import numpy as np
import optuna
import pytest
import torch
from conftest import ROOT, make_spec
from mlflow.tracking import MlflowClient

from sweeps import api
from sweeps.spec import load_spec


@pytest.fixture(scope="module")
def digits_sweep(ray_cluster, tmp_path_factory):
    """A real sweep of the quickstart spec, made smaller: 6 trials, 2 lanes, median pruning.

    Two good configurations are enqueued first so the accuracy check does not depend on luck.
    """
    home = tmp_path_factory.mktemp("home")
    old = os.environ.get("SWEEPS_HOME")
    os.environ["SWEEPS_HOME"] = str(home)
    spec = load_spec(
        ROOT / "conf" / "quickstart.yaml",
        [
            "budget.trials=6",
            "trainer.epochs=8",
            "pruner.options.n_startup_trials=2",
            "pruner.options.n_warmup_steps=2",
            # The last epoch's weights, as before issue 32 (tests/test_best_model.py: `best`).
            "tracking.model=last",
        ],
    )
    good = {"lr": 0.01, "hidden": 128, "dropout": 0.1, "batch_size": 32}
    bad = {"lr": 0.0005, "hidden": 32, "dropout": 0.4, "batch_size": 128}
    try:
        out = api.run(
            spec,
            enqueue=[good, {**good, "hidden": 256}, bad, bad | {"hidden": 64}],
            install_signals=False,
        )
        yield home, spec, out
    finally:
        if old is None:
            os.environ.pop("SWEEPS_HOME", None)
        else:
            os.environ["SWEEPS_HOME"] = old


def test_sweep_finishes_with_every_trial_in_optuna_and_mlflow(digits_sweep):
    home, spec, out = digits_sweep
    assert out.state == "finished", out.reason
    doc = api.show("quickstart")
    assert len(doc["trials"]) == 6
    assert {t["state"] for t in doc["trials"]} <= {"COMPLETE", "PRUNED"}
    assert doc["best"]["value"] >= 0.95

    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    parent = client.get_run(doc["parent_run_id"])
    assert parent.data.tags["sweeps.role"] == "sweep"
    assert parent.data.params["sampler"] == "tpe"
    assert parent.data.tags["sweeps.best_trial"] == str(doc["best"]["number"])
    arts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "spec.yaml" in arts
    children = client.search_runs(
        [doc["mlflow_experiment_id"]],
        filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
    )
    assert len(children) == 6
    by_id = {c.info.run_id: c for c in children}
    study = optuna.load_study(study_name="quickstart", storage=f"sqlite:///{home}/optuna.db")
    for t in study.trials:
        run = by_id[t.user_attrs["mlflow_run_id"]]
        assert run.data.tags["sweeps.trial_number"] == str(t.number)
        for k, v in t.params.items():
            assert run.data.params[k] == str(v)
        hist = client.get_metric_history(run.info.run_id, "val_accuracy")
        assert [m.step for m in hist] == list(range(1, len(hist) + 1)), "one point per epoch"
        assert sorted(t.intermediate_values) == [m.step for m in hist]
        assert run.data.tags["sweeps.state"] == t.state.name
        if t.state.name == "PRUNED":
            assert len(hist) < spec.trainer.epochs
        else:
            assert len(hist) == spec.trainer.epochs
            assert run.info.status == "FINISHED"
        assert run.data.metrics["duration_s"] > 0
        assert run.data.metrics["cost_usd"] > 0  # e2-standard-2 has a price


def test_the_spec_a_driver_stored_is_the_same_sweep_when_run_again(digits_sweep):
    """Issue 29 #7: what the driver stored reads back as the same sweep, so running the spec
    again under its name says the budget is spent, and a larger budget continues it."""
    from sweeps.common import paths
    from sweeps.common.errors import SpecError
    from sweeps.search.reuse import check_reuse

    _, spec, _ = digits_sweep
    with pytest.raises(SpecError, match=r"\(finished, 6 trials\), and a budget of 6 trials"):
        check_reuse(spec, paths.storage_url())
    more = spec.model_copy(update={"budget": spec.budget.model_copy(update={"trials": 8})})
    note = check_reuse(more, paths.storage_url())
    assert note == "continuing sweep 'quickstart' (finished, 6 trials): up to 2 trials more"


def test_a_bad_trial_was_pruned_in_both_stores(digits_sweep):
    home, _, _ = digits_sweep
    doc = api.show("quickstart")
    pruned = [t for t in doc["trials"] if t["state"] == "PRUNED"]
    assert pruned, "the poor enqueued configurations should be pruned by the median pruner"
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    for t in pruned:
        assert client.get_run(t["mlflow_run_id"]).data.tags["sweeps.state"] == "PRUNED"


def test_best_model_loads_and_scores_on_validation_split(digits_sweep):
    home, spec, _ = digits_sweep
    doc = api.show("quickstart")
    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
    # A built-in model loads without unpickling anything: weights + build config, rebuilt.
    pyfunc = mlflow.pyfunc.load_model(f"runs:/{doc['best']['mlflow_run_id']}/model")
    from trainer.data import load_dataset

    ds = load_dataset("digits", val_fraction=spec.trainer.val_fraction, seed=0)
    pred = np.asarray(pyfunc.predict(ds.x_val.numpy()))
    acc = float((pred.argmax(1) == ds.y_val.numpy()).mean())
    assert acc >= 0.95
    assert acc == pytest.approx(doc["best"]["value"], abs=1e-6)
    net = pyfunc.unwrap_python_model().model
    assert isinstance(net, torch.nn.Module)
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    run = client.get_run(doc["best"]["mlflow_run_id"])
    assert run.data.tags["sweeps.model_format"] == "pyfunc"
    digests = {i.tags[0].value: i.dataset.digest for i in run.inputs.dataset_inputs}
    assert digests == {"training": ds.digest_train, "validation": ds.digest_val}
    # The LoggedModel carries the final metrics, measured on the validation split.
    (logged,) = client.search_logged_models(
        [doc["mlflow_experiment_id"]], filter_string=f"source_run_id = '{run.info.run_id}'"
    )
    m = {x.key: x for x in logged.metrics}
    assert m["final_val_accuracy"].value == pytest.approx(doc["best"]["value"])
    assert m["final_val_accuracy"].dataset_digest == ds.digest_val


def test_show_json_from_the_cli(digits_sweep):
    home, _, _ = digits_sweep
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "show", "quickstart", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"name", "state", "best", "trials", "mlflow_experiment_id", "parent_run_id"} <= set(doc)
    for t in doc["trials"]:
        assert t["mlflow_run_id"] and t["state"] in ("COMPLETE", "PRUNED")
        assert {"number", "state", "value", "params", "duration_s"} <= set(t)
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "ls", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    rows = json.loads(r.stdout)
    assert rows[0]["name"] == "quickstart" and rows[0]["trials"]["COMPLETE"] >= 1


def test_ddp_trial_runs_on_two_workers_with_half_the_data_each(ray_cluster, home):
    spec = make_spec(
        name="ddp",
        resources={"workers": 2},
        budget={"trials": 1},
        trainer={"model": "mlp", "dataset": "digits", "epochs": 2},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished", out.reason
    (t,) = api.show("ddp")["trials"]
    assert t["state"] == "COMPLETE", t
    run = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(t["mlflow_run_id"])
    m = run.data.metrics
    from trainer.data import load_dataset

    n_train = len(load_dataset("digits", val_fraction=0.2, seed=0).x_train)
    assert m["world_size"] == 2
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    for name, expect in (
        ("shard_size", n_train // 2),
        ("shard_overlap", 0),
        ("shard_coverage", (n_train // 2) * 2 / n_train),
        ("val_rank_spread", 0.0),
    ):
        hist = client.get_metric_history(t["mlflow_run_id"], name)
        assert len(hist) == 2, name  # every epoch
        assert all(h.value == pytest.approx(expect) for h in hist), (name, hist)


def test_input_example_roundtrip_numpy(digits_sweep):
    home, _, _ = digits_sweep
    doc = api.show("quickstart")
    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
    pyfunc = mlflow.pyfunc.load_model(f"runs:/{doc['best']['mlflow_run_id']}/model")
    x = np.zeros((3, 1, 8, 8), dtype=np.float32)
    assert np.asarray(pyfunc.predict(x)).shape == (3, 10)
