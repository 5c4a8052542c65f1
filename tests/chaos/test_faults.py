"""Faults a long sweep meets: failing trials, a dead tracking server or database, secrets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import BYO, byo

from sweeps import api


def _cli(*args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.mark.usefixtures("ray_cluster")
def test_max_failed_trials_stops_the_sweep_cleanly(home):
    spec = byo(
        "flaky",
        name="allbad",
        budget={"trials": 10, "max_failed_trials": 2},
        search_space={"lr": {"type": "float", "low": 0.05, "high": 0.1}},
    )
    out = api.run(spec, install_signals=False)
    assert out.state == "failed"
    assert "2 trials failed (budget.max_failed_trials=2)" in out.reason
    assert "too hot" in out.reason
    trials = api.show("allbad")["trials"]
    assert [t["state"] for t in trials] == ["FAIL", "FAIL"]


def _spec(tmp_path: Path) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(
        f"name: svc\ntrainer: {{entrypoint: 'byo_tasks:curve', code_dir: '{BYO}'}}\n"
        "search_space: {lr: {type: float, low: 0.01, high: 0.1}}\n"
    )
    return p


def test_unreachable_tracking_server_fails_before_any_trial(home, tmp_path):
    env = {**os.environ, "SWEEPS_HOME": str(home), "MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}
    r = _cli("run", str(_spec(tmp_path)), env=env)
    assert r.returncode == 1
    assert "MLflow tracking server http://127.0.0.1:9 is unreachable" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (home / "optuna.db").exists(), "no study was created"


def test_unreachable_optuna_database_is_a_clear_error(home, tmp_path):
    env = {
        **os.environ,
        "SWEEPS_HOME": str(home),
        "SWEEPS_STORAGE": "postgresql+psycopg://u:hunter2@127.0.0.1:9/db",
    }
    r = _cli("run", str(_spec(tmp_path)), env=env)
    assert r.returncode == 1, r.stderr
    assert "Optuna storage postgresql+psycopg://u:***@127.0.0.1:9/db is unusable" in r.stderr
    assert "hunter2" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


SECRETS = ("sk-live-4f9a8b7c6d5e", "hunter2-db-pass", "tok-XYZ-987654")


@pytest.mark.usefixtures("ray_cluster")
def test_secrets_never_reach_mlflow_reports_or_output(home, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", SECRETS[2])
    spec = byo(
        "curve",
        name="secretive",
        budget={"trials": 2},
        trainer={
            "params": {
                "api_key": SECRETS[0],
                "db_password": SECRETS[1],
                "nested": {"auth_token": SECRETS[2]},
            }
        },
    )
    api.run(spec, install_signals=False)
    api.note("secretive", "rotated the key")
    files = api.report("secretive", str(tmp_path / "rep"))
    r = _cli("show", "secretive", "--json", env={**os.environ, "SWEEPS_HOME": str(home)})
    assert r.returncode == 0
    blobs = [r.stdout, r.stderr, Path(files["markdown"]).read_text()]
    for path in list(home.rglob("*")) + list((tmp_path / "rep").rglob("*")):
        if path.is_file():
            blobs.append(path.read_bytes().decode("latin-1"))
    for secret in SECRETS:
        assert not any(secret in b for b in blobs), f"{secret} leaked"
    from mlflow.tracking import MlflowClient

    run_id = api.show("secretive")["trials"][0]["mlflow_run_id"]
    params = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(run_id).data.params
    assert params["fixed.api_key"] == "***" and params["fixed.db_password"] == "***"
