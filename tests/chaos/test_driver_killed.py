"""A driver SIGKILLed mid-sweep: `sweeps resume` finishes the budget, nothing stays RUNNING."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from conftest import BYO
from mlflow.tracking import MlflowClient

from sweeps import api


def test_resume_after_driver_sigkill(home, tmp_path):
    spec = tmp_path / "resumable.yaml"
    spec.write_text(
        "name: resumable\n"
        "search_space: {lr: {type: float, low: 0.001, high: 0.02}}\n"
        "sampler: {name: random, seed: 2}\n"
        "pruner: {name: none}\n"
        "budget: {trials: 5, parallel: 1}\n"
        f"trainer: {{entrypoint: 'byo_tasks:slow', code_dir: '{BYO}', epochs: 6, "
        "params: {sleep: 0.4}}\n"
    )
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", str(spec)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 240
    try:
        while time.time() < deadline:
            try:
                trials = api.show("resumable")["trials"]
            except Exception:
                trials = []
            done = [t for t in trials if t["state"] == "COMPLETE"]
            running = [t for t in trials if t["state"] == "RUNNING" and t["mlflow_run_id"]]
            if done and running:  # a trial mid-training, its MLflow run open
                break
            time.sleep(0.3)
        else:
            raise AssertionError("sweep never reached a completed + a running trial")
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and everything it started
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    before = {t["number"]: t for t in api.show("resumable")["trials"]}
    completed = {n: t for n, t in before.items() if t["state"] == "COMPLETE"}
    stale = [t for t in before.values() if t["state"] == "RUNNING"]
    assert stale

    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "resume", "resumable"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    after = api.show("resumable")["trials"]
    numbers = [t["number"] for t in after]
    assert len(numbers) == len(set(numbers)), "trial numbers never repeat"
    assert not [t for t in after if t["state"] == "RUNNING"]
    for n, t in completed.items():  # completed trials untouched
        assert after[n]["state"] == "COMPLETE" and after[n]["value"] == t["value"]
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    for s in stale:
        old = after[s["number"]]
        assert old["state"] == "FAIL" and "re-queued" in old["error"]
        assert client.get_run(s["mlflow_run_id"]).info.status == "KILLED"
        again = [t for t in after if t["params"] == s["params"] and t["number"] > s["number"]]
        assert again and again[0]["state"] == "COMPLETE", "re-queued with the same params"
    assert sum(t["state"] == "COMPLETE" for t in after) == 5, "the whole budget is finished"
