"""budget.trial_timeout_s and `retries` on a real local Ray: a trial past its time limit fails as
`timed out`, keeping its checkpoint; a trial whose worker is SIGKILLed runs again, with the same
params, from its last checkpoint."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import BYO, make_spec
from mlflow.tracking import MlflowClient

from sweeps import api

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.timeout(300)]


def _spec(name: str, entrypoint: str, **fields):
    trainer = {"entrypoint": f"retry_tasks:{entrypoint}", "code_dir": str(BYO)}
    trainer.update(fields.pop("trainer", {}))
    return make_spec(
        name=name,
        sampler={"name": "random", "seed": 5},
        budget={"trials": 1, "parallel": 1, **fields.pop("budget", {})},
        execution={"checkpoint_min_interval_s": 0},
        trainer=trainer,
        **fields,
    )


def test_a_trial_past_its_time_limit_fails_as_timed_out(home):
    spec = _spec(
        "limited",
        "endless",
        budget={"trial_timeout_s": 3},
        trainer={"epochs": 10_000, "params": {"epoch_s": 0.1}},
    )
    out = api.run(spec, install_signals=False)
    (t,) = api.show("limited")["trials"]
    assert t["state"] == "FAIL", t
    assert t["error"] == "timed out (budget.trial_timeout_s=3)"
    assert t["failure_cause"] == "timeout" and not t["retried"]
    assert 3 <= t["duration_s"] < 3 + 30, "ended at its next report, not at the grace"
    import optuna

    study = optuna.load_study(study_name="limited", storage=f"sqlite:///{home}/optuna.db")
    kept = study.trials[0].user_attrs["sweeps.checkpoint"]
    assert study.trials[0].user_attrs["sweeps.checkpoint_step"] > 1
    assert os.path.isdir(kept), f"its checkpoint is kept: {kept}"
    run = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(t["mlflow_run_id"])
    assert run.info.status == "FAILED"
    assert run.data.tags["sweeps.failure_cause"] == "timeout"
    assert run.data.tags["sweeps.error"].startswith("timed out")
    assert out.state == "failed"


def test_a_killed_worker_is_retried_with_the_same_params_from_its_checkpoint(home, tmp_path):
    spec = _spec(
        "retried",
        "killed_once",
        # Epochs longer than Ray Train's controller poll, as in test_lanes' restart test.
        trainer={"epochs": 4, "params": {"marker_dir": str(tmp_path), "epoch_s": 0.6}},
        resources={"max_failures": 0},  # no restart inside the lane: the trial fails
        retries={"max": 1},
    )
    out = api.run(spec, install_signals=False)
    assert (tmp_path / "killed").exists(), "the worker was killed"
    first, again = api.show("retried")["trials"]
    assert first["state"] == "FAIL" and first["failure_cause"] == "worker_lost", first
    assert first["retried"]
    assert again["state"] == "COMPLETE", again
    assert again["params"] == first["params"]
    assert again["attempt"] == 2 and again["retry_of"] == first["number"]
    assert again["resumed_from_trial"] == first["number"]
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    run = client.get_run(again["mlflow_run_id"])
    assert run.data.metrics["final_started_at"] in (1.0, 2.0), "resumed at a step > 0"
    assert run.data.tags["sweeps.attempt"] == "2"
    assert run.data.tags["sweeps.retry_of"] == str(first["number"])
    lost = client.get_run(first["mlflow_run_id"])
    assert lost.info.status == "FAILED"
    assert lost.data.tags["sweeps.failure_cause"] == "worker_lost"
    assert out.state == "finished"
    shown = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "show", "retried"],
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"#{again['number']} attempt 2, retrying #{first['number']}" in shown.stdout
    assert f"#{first['number']} failed (worker_lost; retried)" in shown.stdout
