"""Team scale, all real and on loopback: PostgreSQL for Optuna and MLflow, two drivers on one
study, an `mlflow server` with basic-auth, GCS (emulator) for data, checkpoints and artifacts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import BYO, byo, make_spec
from mlflow.tracking import MlflowClient
from services import gcs_bucket, start_mlflow_server

from sweeps import api


def _spec_file(tmp_path, name: str, trials: int, sleep: float = 0.2) -> str:
    p = tmp_path / f"{name}.yaml"
    p.write_text(
        f"name: {name}\n"
        "search_space: {lr: {type: float, low: 0.001, high: 0.05}}\n"
        "sampler: {name: random}\n"
        "pruner: {name: none}\n"
        f"budget: {{trials: {trials}, parallel: 1}}\n"
        f"trainer: {{entrypoint: 'byo_tasks:slow', code_dir: '{BYO}', epochs: 2, "
        f"params: {{sleep: {sleep}}}}}\n"
    )
    return str(p)


def test_two_drivers_share_one_postgres_study(postgres, tmp_path):
    optuna_url = postgres.create_database("optuna_two")
    mlflow_url = postgres.create_database("mlflow_two")
    env = {
        **os.environ,
        "SWEEPS_HOME": str(tmp_path / "h"),
        "SWEEPS_STORAGE": optuna_url,
        "MLFLOW_TRACKING_URI": mlflow_url,
    }
    # Slow enough (~3 s a trial) that one driver alone needs far longer than the other's start.
    spec = _spec_file(tmp_path, "shared", 16, sleep=1.5)
    # The first driver creates the study (and MLflow schema) before the second joins it.
    first = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", spec],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if api.show("shared", optuna_url)["trials"]:
                break
        except Exception:
            pass
        time.sleep(0.5)
    second = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", spec, "--join"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    outs = [p.communicate(timeout=600) for p in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outs
    doc = api.show("shared", optuna_url)
    numbers = [t["number"] for t in doc["trials"]]
    assert len(numbers) == len(set(numbers))
    done = [t for t in doc["trials"] if t["state"] == "COMPLETE"]
    assert len(done) == 16, "the launch lock makes the shared budget exact"
    drivers = {t["mlflow_run_id"] for t in doc["trials"]}
    assert len(drivers) == len(doc["trials"]), "one MLflow run per trial"
    client = MlflowClient(mlflow_url)
    runs = client.search_runs([doc["mlflow_experiment_id"]], "tags.`sweeps.role` = 'trial'")
    per_trial: dict[str, int] = {}
    for r in runs:
        n = r.data.tags["sweeps.trial_number"]
        per_trial[n] = per_trial.get(n, 0) + 1
    assert set(per_trial.values()) == {1} and len(per_trial) == len(numbers)
    import optuna

    lanes = {
        t.user_attrs["sweeps.driver"]
        for t in optuna.load_study(study_name="shared", storage=optuna_url).trials
    }
    assert len(lanes) == 2, "both drivers ran trials"


def test_mlflow_server_with_postgres_and_basic_auth(
    postgres,
    home,
    tmp_path,
    monkeypatch,
    ray_cluster,
):
    backend = postgres.create_database("mlflow_auth")
    server = start_mlflow_server(backend, str(tmp_path / "artifacts"), auth=True)
    try:
        env = {
            **os.environ,
            "SWEEPS_HOME": str(home),
            "MLFLOW_TRACKING_URI": server.url,
            "MLFLOW_TRACKING_USERNAME": server.username,
            "MLFLOW_TRACKING_PASSWORD": "wrong",
        }
        r = subprocess.run(
            [sys.executable, "-m", "sweeps.cli", "run", _spec_file(tmp_path, "authed", 2)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 1
        assert "refused the credentials" in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert "wrong" not in r.stderr

        monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", server.username)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", server.password)
        out = api.run(byo("curve", name="authed", budget={"trials": 2}), install_signals=False)
        assert out.state == "finished"
        client = MlflowClient(server.url)
        children = client.search_runs(
            [out.experiment_id], f"tags.mlflow.parentRunId = '{out.parent_run_id}'"
        )
        assert len(children) == 2
    finally:
        server.stop()


@pytest.mark.usefixtures("ray_cluster")
def test_sweep_against_a_tracking_server_rest_view(home, tmp_path, monkeypatch, priced_table):
    server = start_mlflow_server(f"sqlite:///{tmp_path}/server.db", str(tmp_path / "art"))
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
        spec = make_spec(
            name="served",
            budget={"trials": 2},
            resources={"machine_type": "dear"},
            trainer={"epochs": 2},
        )
        out = api.run(spec, install_signals=False)
        client = MlflowClient(server.url)  # REST
        parent = client.get_run(out.parent_run_id)
        kids = client.search_runs(
            [out.experiment_id], f"tags.mlflow.parentRunId = '{out.parent_run_id}'"
        )
        assert len(kids) == 2
        for run in kids:
            m = run.data.metrics
            # price $3600/h = $1/s, 1 worker: cost equals the trial's wall time in seconds
            assert m["cost_usd"] == pytest.approx(m["duration_s"] * 1.0, rel=1e-6)
            digests = {i.tags[0].value: i.dataset.digest for i in run.inputs.dataset_inputs}
            assert len(set(digests.values())) == 2, "each split has its own digest"
            assert run.data.tags["sweeps.dataset_digest"] == digests["validation"]
            assert client.search_logged_models(
                [out.experiment_id], filter_string=f"source_run_id = '{run.info.run_id}'"
            )
        plots = {a.path for a in client.list_artifacts(parent.info.run_id, "plots")}
        assert "plots/optimization_history.png" in plots
    finally:
        server.stop()


@pytest.fixture
def priced_table(tmp_path, monkeypatch):
    table = tmp_path / "machines.yaml"
    table.write_text("machines:\n  dear: {vcpus: 1, memory_gb: 1, price_per_hour: 3600}\n")
    monkeypatch.setenv("SWEEPS_MACHINES", str(table))


@pytest.mark.usefixtures("ray_cluster")
def test_data_checkpoints_and_artifacts_on_gcs(gcs_emulator, home, tmp_path, monkeypatch):
    from test_data import write_idx

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    bucket = gcs_bucket(gcs_emulator, "team-bucket")
    src = tmp_path / "src"
    write_idx(src, "MNIST", n=200)
    for f in src.rglob("*"):
        if f.is_file():
            bucket.blob(f"data/{f.relative_to(src)}").upload_from_filename(str(f))
    monkeypatch.setenv("SWEEPS_CHECKPOINTS", "gs://team-bucket/checkpoints")
    monkeypatch.setenv("SWEEPS_ARTIFACTS", "gs://team-bucket/mlflow")
    monkeypatch.setenv("SWEEPS_DATA_CACHE", str(tmp_path / "cache"))
    spec = make_spec(
        name="gcs",
        budget={"trials": 1},
        execution={"checkpoint_min_interval_s": 0},
        trainer={
            "model": "mlp",
            "dataset": "mnist",
            "data_dir": "gs://team-bucket/data",
            "epochs": 2,
        },
    )
    out = api.run(spec, install_signals=False)
    (t,) = api.show("gcs")["trials"]
    assert t["state"] == "COMPLETE", t
    names = [b.name for b in bucket.list_blobs()]
    assert any(n.startswith("checkpoints/") and n.endswith("state.pt") for n in names), names
    assert any(n.startswith("mlflow/") and "model" in n for n in names), names
    run = MlflowClient(out.tracking_uri).get_run(t["mlflow_run_id"])
    sources = [json.loads(i.dataset.source)["uri"] for i in run.inputs.dataset_inputs]
    assert sources == ["gs://team-bucket/data"] * 2
