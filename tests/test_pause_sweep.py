"""`sweeps pause` then `sweeps resume` on a real local Ray: the `sweeps run` process ends
`paused` with its trial parked at a checkpoint, and the resumed trial goes on from there, so no
epoch up to that checkpoint is run (or logged in MLflow) twice."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time

import optuna
import pytest
import yaml
from conftest import BYO
from mlflow.tracking import MlflowClient

from sweeps import api
from sweeps.common import names

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.timeout(300)]
NAME, EPOCHS = "parked", 8


def _spec(path):
    spec = {
        "name": NAME,
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "search_space": {"lr": {"type": "float", "low": 0.001, "high": 0.02, "log": True}},
        "sampler": {"name": "random", "seed": 3},
        "pruner": {"name": "none"},
        "budget": {"trials": 1, "parallel": 1},
        "execution": {"checkpoint_every": 1, "checkpoint_min_interval_s": 0},
        "trainer": {
            "entrypoint": "retry_tasks:endless",  # a checkpoint every epoch
            "code_dir": str(BYO),
            "epochs": EPOCHS,
            "params": {"epoch_s": 0.8},
        },
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def _checkpoint_step(db: str) -> int:
    """The trial's latest checkpoint step, read-only: opening the database with Optuna while
    the driver creates it would race the driver's own table creation."""
    if not os.path.exists(db):
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as c:
            rows = c.execute(
                "SELECT value_json FROM trial_user_attributes WHERE key = ?",
                (names.CHECKPOINT_STEP,),
            ).fetchall()
    except sqlite3.OperationalError:
        return 0  # its tables are not made yet
    return max((int(json.loads(v) or 0) for (v,) in rows), default=0)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_pause_parks_the_running_trial_and_resume_continues_it(home, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a Ray of its own
    env["COLUMNS"] = "200"
    storage = f"sqlite:///{home}/optuna.db"
    run = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", str(_spec(tmp_path / "s.yaml"))],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 150
        while _checkpoint_step(f"{home}/optuna.db") < 2 and run.poll() is None:
            assert time.monotonic() < deadline, "the trial never reached epoch 2"
            time.sleep(0.2)
        asked = _cli("pause", NAME, env=env)
        assert asked.returncode == 0, asked.stderr
        assert f"pause requested for {NAME}" in asked.stdout
        stdout, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, stderr[-3000:]
    assert f"{NAME}: paused: 1 trial parked at its checkpoint; sweeps resume {NAME}" in stdout

    doc = api.show(NAME)
    assert doc["state"] == "paused"
    (parked,) = doc["trials"]
    study = optuna.load_study(study_name=NAME, storage=storage)
    at = study.trials[0].user_attrs[names.PARKED]
    assert 2 <= at < EPOCHS, "parked mid-trial, at a checkpoint"
    assert f"{NAME}: paused: trial 0 parked at its checkpoint (step {at})" in stdout + stderr
    assert study.trials[0].user_attrs[names.CHECKPOINT_STEP] == at
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    first = client.get_run(parked["mlflow_run_id"])
    assert first.info.status == "KILLED" and first.data.tags[names.PARKED] == str(at)
    parent = client.get_run(doc["parent_run_id"])
    assert parent.data.tags[names.STATE] == "paused"
    refused = _cli("pause", NAME, env=env)
    assert refused.returncode == 2 and "is not running (it is paused)" in refused.stderr

    out = api.resume(NAME, install_signals=False)
    assert out.state == "finished", out.reason
    _, again = api.show(NAME)["trials"]
    assert again["state"] == "COMPLETE" and again["params"] == parked["params"]
    assert again["resumed_from_trial"] == parked["number"]
    steps_before = [m.step for m in client.get_metric_history(first.info.run_id, "val_accuracy")]
    resumed = client.get_metric_history(again["mlflow_run_id"], "val_accuracy")
    steps_after = [m.step for m in resumed]
    assert sorted(steps_before) == list(range(1, at + 1)), "the parked epoch is not logged"
    assert min(steps_after) == at + 1 > 1, "the resumed trial starts past its checkpoint"
    assert sorted(steps_before + steps_after) == list(range(1, EPOCHS + 1)), "each epoch once"
    started = client.get_metric_history(again["mlflow_run_id"], "started_at")
    assert {m.value for m in started} == {float(at)}, "trained from the checkpoint's epoch"
