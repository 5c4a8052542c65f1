"""A driver SIGKILLed deep into a long trial: `sweeps resume` continues that trial from its last
persisted checkpoint (same params), not from epoch 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
from conftest import BYO
from mlflow.tracking import MlflowClient

from sweeps import api


def _spec(tmp_path) -> str:
    p = tmp_path / "long.yaml"
    p.write_text(
        "name: long\n"
        "search_space: {lr: {type: float, low: 0.001, high: 0.02}}\n"
        "sampler: {name: random, seed: 3}\n"
        "pruner: {name: none}\n"
        "budget: {trials: 1, parallel: 1}\n"
        "execution: {checkpoint_min_interval_s: 0}\n"
        f"trainer: {{entrypoint: 'byo_tasks:long_resumable', code_dir: '{BYO}', epochs: 120}}\n"
    )
    return str(p)


def _steps(home) -> list[int]:
    study = optuna.load_study(study_name="long", storage=f"sqlite:///{home}/optuna.db")
    return sorted(study.trials[-1].intermediate_values)


def test_resume_continues_the_killed_trial_from_its_checkpoint(home, tmp_path):
    # Ray Train hands each checkpoint to its controller at the next poll: a short poll keeps
    # 120 checkpointed epochs quick.
    env = {**os.environ, "SWEEPS_HOME": str(home), "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.05"}
    spec = _spec(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", spec],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                steps = _steps(home)
                if len(steps) >= 30:
                    break
            except Exception:  # the study may not exist yet
                pass
            time.sleep(0.2)
        else:
            raise AssertionError("the trial never reached epoch 30")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    (killed,) = api.show("long")["trials"]
    assert killed["state"] == "RUNNING"
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "resume", "long"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    first, again = api.show("long")["trials"]
    assert first["state"] == "FAIL" and "re-queued" in first["error"]
    assert again["state"] == "COMPLETE" and again["params"] == first["params"]
    assert again["resumed_from_trial"] == first["number"]
    study = optuna.load_study(study_name="long", storage=f"sqlite:///{home}/optuna.db")
    steps = sorted(study.trials[again["number"]].intermediate_values)
    assert steps[0] >= 10, f"continued from epoch {steps[0] - 1}, not from its checkpoint"
    assert steps[-1] == 120
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    run = client.get_run(again["mlflow_run_id"])
    assert run.data.tags["sweeps.resumed_from_trial"] == str(first["number"])
    assert run.data.tags["sweeps.resumed_from_checkpoint"].endswith(f"step{steps[0] - 1:05d}-0")
    hist = client.get_metric_history(again["mlflow_run_id"], "val_accuracy")
    assert min(m.step for m in hist) == steps[0], "MLflow's metrics start at the same step"
    assert run.data.metrics["final_started_at"] == steps[0] - 1
