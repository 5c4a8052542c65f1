"""A second Ctrl-C cancels the running trials: consistent stores, nothing RUNNING, exit 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from conftest import BYO
from mlflow.tracking import MlflowClient

from sweeps import api


def test_second_sigint_cancels_running_trials(home, tmp_path):
    spec = tmp_path / "c.yaml"
    spec.write_text(
        "name: twice\nsearch_space: {lr: {type: float, low: 0.001, high: 0.02}}\n"
        "pruner: {name: none}\nbudget: {trials: 10, parallel: 1}\n"
        f"trainer: {{entrypoint: 'byo_tasks:slow', code_dir: '{BYO}', epochs: 30, "
        "params: {sleep: 0.3}}\n"
    )
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    p = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", str(spec)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    end = time.time() + 180
    while time.time() < end:
        try:
            trials = api.show("twice")["trials"]
            if trials and trials[0]["state"] == "RUNNING":
                break
        except Exception:
            pass
        time.sleep(0.3)
    time.sleep(1.5)  # a few epochs into the first trial
    p.send_signal(signal.SIGINT)
    time.sleep(0.5)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=180)
    assert p.returncode == 130, err
    (t,) = api.show("twice")["trials"]
    # Its error names what stopped it, and its run is KILLED as the README says (issue 29 #11).
    assert t["state"] == "FAIL" and t["error"] == "interrupted (Ctrl-C)", t
    run = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(t["mlflow_run_id"])
    assert run.info.status == "KILLED" and run.data.tags["sweeps.state"] == "KILLED"
