"""A store written by the release before the package was split into stages opens and resumes.

`fixtures/legacy_store.tar.gz` was made by that release (`fixtures/make_legacy_store.py`): a
4-trial sweep whose driver was SIGKILLed with 2 trials complete and a third RUNNING with a
checkpoint at step 1. Every name in it (study and trial attributes, MLflow tags) is read by
today's code through `sweeps.common.names`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import optuna
from mlflow.tracking import MlflowClient

from sweeps.common import names

FIXTURE = Path(__file__).parent / "fixtures" / "legacy_store.tar.gz"
HOME = "/tmp/sweeps-legacy-store"  # where it was written: stores hold absolute paths


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SWEEPS_HOME": HOME, "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}
    for var in ("MLFLOW_TRACKING_URI", "SWEEPS_STORAGE", "SWEEPS_CHECKPOINTS", "OPTUNA_STORAGE"):
        env.pop(var, None)
    return subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


def test_a_store_from_the_previous_release_opens_and_resumes():
    shutil.rmtree(HOME, ignore_errors=True)
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(HOME, filter="data")
    try:
        listed = _cli("ls", "--json")
        assert listed.returncode == 0, listed.stderr
        assert '"legacy"' in listed.stdout
        shown = _cli("show", "legacy", "--json")
        assert shown.returncode == 0, shown.stderr

        r = _cli("resume", "legacy")
        assert r.returncode == 0, r.stdout + r.stderr

        study = optuna.load_study(study_name="legacy", storage=f"sqlite:///{HOME}/optuna.db")
        trials = study.get_trials(deepcopy=False)
        states = [t.state.name for t in trials]
        assert "RUNNING" not in states
        assert states[:2] == ["COMPLETE", "COMPLETE"], "trials of the old driver are kept"
        assert states[2] == "FAIL" and "re-queued" in trials[2].user_attrs[names.ERROR]
        assert states.count("COMPLETE") == 4, "the whole budget is finished"
        again = [t for t in trials if t.user_attrs.get(names.RESUMED_FROM_TRIAL) == 2]
        assert again and again[0].params == trials[2].params
        assert again[0].state.name == "COMPLETE"
        assert study.user_attrs[names.STATE] == "finished"

        client = MlflowClient(f"sqlite:///{HOME}/mlflow.db")
        parent = study.user_attrs[names.MLFLOW_PARENT_RUN_ID]
        runs = client.search_runs(
            [study.user_attrs[names.MLFLOW_EXPERIMENT_ID]],
            f"tags.mlflow.parentRunId = '{parent}'",
        )
        by_number = {r.data.tags.get(names.TRIAL_NUMBER): r for r in runs}
        assert by_number["2"].info.status == "KILLED", "the dead driver's run is closed"
        resumed = by_number[str(again[0].number)]
        assert resumed.data.tags.get(names.RESUMED_FROM_TRIAL) == "2"
        first = min(m.step for m in client.get_metric_history(resumed.info.run_id, "val_accuracy"))
        assert first > 1, "the re-queued trial continues from its checkpoint, not from step 1"
    finally:
        shutil.rmtree(HOME, ignore_errors=True)
