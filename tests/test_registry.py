"""Champion/challenger promotion on a real MLflow store, with rollback and pyfunc predictions."""

from __future__ import annotations

import os
import subprocess
import sys

import mlflow
import numpy as np
import pytest
from conftest import make_spec

from sweeps import api
from sweeps.errors import NotFoundError, SpecError
from tracking.registry import decide


def test_decide_is_a_pure_gate():
    assert decide(0.9, None, "maximize", True, True) == (True, "no current holder")
    assert decide(0.9, 0.95, "maximize", True, True)[0] is False
    assert decide(0.97, 0.95, "maximize", True, True)[0] is True
    assert decide(0.1, 0.2, "minimize", True, True)[0] is True
    moved, why = decide(0.99, 0.95, "maximize", False, True)
    assert not moved and "different dataset" in why
    assert decide(0.5, 0.95, "maximize", True, False)[0] is True


def _sweep(name: str, lr: float, epochs: int) -> None:
    spec = make_spec(
        name=name,
        budget={"trials": 1},
        search_space={"lr": {"type": "float", "low": lr, "high": lr * 1.0001}},
        trainer={"model": "mlp", "dataset": "digits", "epochs": epochs},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "finished", out.reason


@pytest.mark.usefixtures("ray_cluster")
def test_champion_challenger_rollback_and_predict(home, tmp_path):
    _sweep("sweep-a", 0.01, 3)
    _sweep("sweep-b", 0.0003, 1)  # deliberately worse
    _sweep("sweep-c", 0.01, 10)  # better
    va = api.show("sweep-a")["best"]["value"]
    vb = api.show("sweep-b")["best"]["value"]
    vc = api.show("sweep-c")["best"]["value"]
    assert vb < va < vc, (va, vb, vc)

    a = api.promote("sweep-a", "digits-mlp", if_better=True)
    assert a["moved"] and a["version"] == "1"
    b = api.promote("sweep-b", "digits-mlp", if_better=True)
    assert not b["moved"] and "does not beat" in b["reason"]
    rows = {r["version"]: r for r in api.models("digits-mlp")}
    assert rows["1"]["aliases"] == ["champion"] and rows["2"]["aliases"] == ["challenger"]
    assert "does not beat" in rows["2"]["decision"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    parent_b = api.show("sweep-b")["parent_run_id"]
    assert "does not beat" in client.get_run(parent_b).data.tags["sweeps.promotion.digits-mlp.v2"]

    c = api.promote("sweep-c", "digits-mlp", if_better=True)
    assert c["moved"] and c["previous_version"] == "1"
    assert {r["version"]: r for r in api.models("digits-mlp")}["3"]["aliases"] == [
        "challenger",
        "champion",
    ]
    assert api.rollback("digits-mlp") == ("3", "1")
    assert "champion" in {r["version"]: r for r in api.models("digits-mlp")}["1"]["aliases"]

    # models:/digits-mlp@champion predicts the validation split with the recorded accuracy
    from trainer.data import load_dataset

    ds = load_dataset("digits", val_fraction=0.2, seed=0)
    mlflow.set_tracking_uri(f"sqlite:///{home}/mlflow.db")
    model = mlflow.pyfunc.load_model("models:/digits-mlp@champion")
    pred = np.asarray(model.predict(ds.x_val.numpy())).argmax(1)
    acc = float((pred == ds.y_val.numpy()).mean())
    assert acc == pytest.approx(a["value"], abs=0.001)

    # the CLI predict path, from a CSV with one flattened image per row
    csv = tmp_path / "x.csv"
    np.savetxt(csv, ds.x_val.numpy().reshape(len(ds.x_val), -1)[:20], delimiter=",")
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeps.cli",
            "predict",
            "digits-mlp@champion",
            str(csv),
            "--out",
            str(tmp_path / "y.npy"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    y = np.load(tmp_path / "y.npy")
    assert y.shape == (20, 10)
    assert (y.argmax(1) == pred[:20]).all()

    # errors: unknown sweep, unknown metric, nothing half-registered
    with pytest.raises(NotFoundError):
        api.promote("nope", "digits-mlp")
    with pytest.raises(SpecError, match="--metric: 'f1'"):
        api.promote("sweep-a", "digits-mlp", metric="f1")
    assert len(api.models("digits-mlp")) == 3
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "promote", "nope", "--model", "m"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "no sweep named 'nope'" in r.stderr


def test_registry_unreachable_is_exit_1(home):
    env = {**os.environ, "SWEEPS_HOME": str(home), "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "rollback", "m"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "unreachable" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
