"""The bring-your-own example runs from the CLI like a built-in sweep."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT
from mlflow.tracking import MlflowClient

from sweeps import api


def test_byo_example_from_the_cli(home, tmp_path):
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    bad = tmp_path / "bad.json"
    # Two good configurations first, then poor ones the median pruner must stop.
    bad.write_text(
        json.dumps(
            [
                {"lr": 0.1, "units": 64},
                {"lr": 0.2, "units": 128},
                {"lr": 0.001, "units": 16},
                {"lr": 0.0012, "units": 16},
            ]
        )
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeps.cli",
            "run",
            str(ROOT / "examples/byo_trainer/sweep.yaml"),
            "--enqueue",
            str(bad),
            "--set",
            "budget.parallel=1",
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    states = [t["state"] for t in doc["trials"]]
    assert "PRUNED" in states and "COMPLETE" in states, states
    assert doc["best"]["value"] > 0.9
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    best = client.get_run(doc["best"]["mlflow_run_id"])
    assert best.data.tags["mlflow.parentRunId"] == doc["parent_run_id"]
    assert len(client.get_metric_history(best.info.run_id, "val_accuracy")) == 8
    arts = {a.path for a in client.list_artifacts(best.info.run_id, "logs")}
    assert "logs/worker.log" in arts
    number, text = api.logs("byo-digits", trial=doc["best"]["number"])
    assert "epoch 8: val_accuracy=" in text
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
    model = mlflow.pytorch.load_model(f"runs:/{best.info.run_id}/model")
    assert sum(p.numel() for p in model.parameters()) > 0
    assert best.data.tags["sweeps.model_format"] == "pt2", "exported, not pickled"
    assert "sweeps.model_error" not in best.data.tags
