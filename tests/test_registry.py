"""Champion/challenger promotion on a real MLflow store, with rollback and pyfunc predictions."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlflow
import numpy as np
import pytest
from conftest import make_spec
from typer.testing import CliRunner

from sweeps import api
from sweeps.cli import app
from sweeps.common.errors import NotFoundError, SpecError
from tracking.registry import decide


def test_decide_is_a_pure_gate():
    assert decide(0.9, None, "maximize", True, True) == (True, "no current holder")
    assert decide(0.9, 0.95, "maximize", True, True)[0] is False
    assert decide(0.97, 0.95, "maximize", True, True)[0] is True
    assert decide(0.1, 0.2, "minimize", True, True)[0] is True
    moved, why = decide(0.99, 0.95, "maximize", False, True)
    assert not moved and "different dataset" in why
    assert decide(0.5, 0.95, "maximize", True, False)[0] is True


def test_input_scaling_of_the_built_in_datasets_and_the_range_check():
    from tracking.predict import check_input_range, describe_scaling, model_version_ref
    from trainer.data import input_scaling, load_dataset

    digits = input_scaling("digits")
    assert "[0, 1]" in describe_scaling(digits) and "/ 16" in describe_scaling(digits)
    x = load_dataset("digits").x_val.numpy()
    assert check_input_range(x, digits) is None  # what the model was trained on
    warning = check_input_range(x * 16, digits)  # raw pixels
    assert warning and warning.startswith(f"{int((x * 16 > 1.001).sum())} of {x.size}")
    # MNIST: pixels / 255 standardized; 0 and 255 map to the recorded bounds (rounded)
    mnist = input_scaling("mnist")
    lo, hi = mnist["range"]
    raw = np.array([0.0, 255.0])
    assert check_input_range((raw / 255 - 0.1307) / 0.3081, mnist) is None
    assert check_input_range(raw, mnist) is not None and lo < 0 < 1 < hi
    # CIFAR-10 ranges are per channel
    cifar = input_scaling("cifar10")
    img = np.zeros((1, 3, 2, 2)) + np.array(cifar["range"])[:, 1][None, :, None, None]
    assert check_input_range(img, cifar) is None
    img[0, 2] = cifar["range"][1][1]  # channel 2 at channel 1's max: above channel 2's range
    assert check_input_range(img, cifar) is not None
    assert model_version_ref("m@champion") == ("m", "champion", None)
    assert model_version_ref("models:/m/3") == ("m", None, "3")
    assert model_version_ref("runs:/abc/model") is None
    assert model_version_ref("models:/m-0123abcd") is None


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
def test_champion_challenger_rollback_and_predict(home, tmp_path, monkeypatch):
    _sweep("sweep-a", 0.01, 3)
    _sweep("sweep-b", 0.0003, 1)  # deliberately worse
    _sweep("sweep-c", 0.01, 10)  # better
    va = api.show("sweep-a")["best"]["value"]
    vb = api.show("sweep-b")["best"]["value"]
    vc = api.show("sweep-c")["best"]["value"]
    assert vb < va < vc, (va, vb, vc)

    # the first promotion, through the CLI: v1 is the first champion, not "challenger; ..."
    r = CliRunner().invoke(app, ["promote", "sweep-a", "--model", "digits-mlp", "--if-better"])
    assert r.exit_code == 0, r.output
    assert "v1 is the first champion" in r.stdout and "challenger;" not in r.stdout, r.stdout
    a = api.promote("sweep-a", "digits-mlp", if_better=True)  # again: no second version
    assert a["version"] == "1" and a["existing"] and not a["moved"], a
    assert "already registered" in a["reason"]
    assert len(api.models("digits-mlp")) == 1
    r = CliRunner().invoke(app, ["promote", "sweep-a", "--model", "digits-mlp"])
    assert r.exit_code == 0 and "already registered as v1" in r.stdout, r.stdout
    assert len(api.models("digits-mlp")) == 1
    first_decision = api.models("digits-mlp")[0]["decision"]
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
    rows = {r["version"]: r for r in api.models("digits-mlp")}
    assert rows["3"]["aliases"] == ["champion"] and rows["2"]["aliases"] == ["challenger"]
    assert api.rollback("digits-mlp") == ("3", "1")
    rows = {r["version"]: r for r in api.models("digits-mlp")}
    assert "champion" in rows["1"]["aliases"]
    # the rollback has its own tag; the promote decision of v1 is kept
    assert rows["1"]["decision"] == first_decision
    assert "rolled back to v1 from v3" in rows["1"]["rollback"]
    assert "beats holder" in rows["3"]["decision"] and "v1" in rows["3"]["rollback"]

    # the model version says how its input is scaled (digits: raw pixels / 16, in [0, 1])
    from mlflow.tracking import MlflowClient as _Client

    mv = _Client(f"sqlite:///{home}/mlflow.db").get_model_version("digits-mlp", "1")
    scaling = json.loads(mv.tags["sweeps.input_scaling"])
    assert scaling["dataset"] == "digits" and scaling["range"] == [0.0, 1.0]

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
    assert "input scaling" in r.stdout and "/ 16" in r.stdout, r.stdout
    assert "outside" not in r.stderr, r.stderr

    # raw digits pixels (0..16, not divided by 16): predicted, with a warning on stderr
    raw = tmp_path / "raw.npy"
    np.save(raw, ds.x_val.numpy()[:20] * 16)
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "predict", "digits-mlp@champion", str(raw)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    warn = [ln for ln in r.stderr.splitlines() if "outside" in ln]
    assert len(warn) == 1 and "[0, 1]" in warn[0], r.stderr

    # docs/REGISTRY.md's serve recipe, its two blocks run as written against this champion
    from doc_blocks import run_serve_recipe

    x, served = run_serve_recipe(home, tmp_path / "project")
    assert served.shape == (5, 10), served.shape
    assert (served.argmax(1) == np.asarray(model.predict(x)).argmax(1)).all()

    # errors: unknown sweep, unknown metric, nothing half-registered
    with pytest.raises(NotFoundError):
        api.promote("nope", "digits-mlp")
    with pytest.raises(SpecError, match="--metric: 'f1'"):
        api.promote("sweep-a", "digits-mlp", metric="f1")
    assert len(api.models("digits-mlp")) == 3

    # MLFLOW_REGISTRY_URI: the version goes to that registry, the runs stay where they are
    registry = f"sqlite:///{tmp_path / 'registry.db'}"
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", registry)
    p = api.promote("sweep-c", "team-model")
    assert p["version"] == "1"
    assert [m.name for m in _Client(registry).search_registered_models()] == ["team-model"]
    tracking = f"sqlite:///{home}/mlflow.db"
    names = [m.name for m in _Client(tracking, registry_uri=tracking).search_registered_models()]
    assert "team-model" not in names
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
