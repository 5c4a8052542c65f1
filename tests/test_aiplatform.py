"""Legacy AI Platform jobs run unchanged: config mapping (pure) and a real 2-worker run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

from sweeps.aiplatform import load_config, to_spec
from sweeps.errors import SpecError
from sweeps.spec import spec_from_dict

PKG = ROOT / "examples" / "aiplatform_trainer"


def test_config_maps_to_a_native_spec():
    raw, notes = to_spec(
        load_config(PKG / "config.yaml"),
        name="legacy",
        package_path=str(PKG),
        module_name="trainer.task",
    )
    spec = spec_from_dict(raw)
    assert spec.objective.metric == "accuracy" and spec.objective.direction == "maximize"
    lr = spec.search_space["learning_rate"]
    assert lr.type == "float" and lr.log and (lr.low, lr.high) == (0.001, 0.1)
    assert spec.search_space["hidden_units"].type == "int"
    assert spec.search_space["optimizer"].choices == ["sgd", "adam"]
    assert spec.budget.trials == 4 and spec.budget.max_failed_trials == 2
    assert spec.pruner.name == "median"
    assert spec.resources.workers == 2 and spec.resources.machine_type == "n1-standard-4"


def test_bad_legacy_configs_are_named():
    with pytest.raises(SpecError, match="params\\[0\\].type"):
        to_spec(
            {
                "trainingInput": {
                    "hyperparameters": {"params": [{"parameterName": "x", "type": "FLOATY"}]}
                }
            },
            name="x",
            package_path=".",
            module_name="m",
        )
    with pytest.raises(SpecError, match="trainingInput: required"):
        to_spec({}, name="x", package_path=".", module_name="m")


def test_legacy_package_runs_unchanged_on_two_workers(tmp_path):
    env = {**os.environ, "SWEEPS_HOME": str(tmp_path / "h")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeps.cli",
            "run",
            "--aiplatform",
            str(PKG / "config.yaml"),
            "--package-path",
            str(PKG),
            "--module-name",
            "trainer.task",
            "--name",
            "legacy",
            "--json",
            "--",
            "--epochs=4",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert len(doc["trials"]) == 4
    assert all(t["state"] in ("COMPLETE", "PRUNED") for t in doc["trials"]), doc["trials"]
    assert doc["best"]["value"] > 0.8
    for t in doc["trials"]:
        assert set(t["params"]) == {"learning_rate", "hidden_units", "optimizer"}
    from mlflow.tracking import MlflowClient

    from sweeps import api

    os.environ["SWEEPS_HOME"] = env["SWEEPS_HOME"]
    try:
        number, log = api.logs("legacy", trial=doc["best"]["number"])
    finally:
        os.environ.pop("SWEEPS_HOME", None)
    assert "rank 0 of 2" in log and "epoch 4: accuracy=" in log
    client = MlflowClient(f"sqlite:///{tmp_path}/h/mlflow.db")
    hist = client.get_metric_history(doc["best"]["mlflow_run_id"], "accuracy")
    assert [m.step for m in hist] == [1, 2, 3, 4], "global_step is the step"
