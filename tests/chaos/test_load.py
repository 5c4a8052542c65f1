"""Load: 4 drivers x 50 trials on one PostgreSQL study: 200 trials, no duplicate, none lost,
one MLflow run each. The drivers are threads of this process sharing its Ray cluster; each is a
full Driver with its own broker, lanes and MLflow writer, talking to the stores like a process."""

from __future__ import annotations

import threading

import pytest
from conftest import byo
from mlflow.tracking import MlflowClient

from sweeps import api


@pytest.mark.usefixtures("ray_cluster")
def test_four_drivers_fifty_trials_each_on_postgres(postgres, home, monkeypatch):
    optuna_url = postgres.create_database("optuna_load")
    mlflow_url = postgres.create_database("mlflow_load")
    monkeypatch.setenv("SWEEPS_STORAGE", optuna_url)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_url)
    # Trials of 0.3 s: the first driver must not use up the budget before the other three
    # have their lanes up (15-30 s on 2 cores); tiny trials now take ~0.15 s each.
    spec = byo(
        "slow",
        name="load",
        budget={"trials": 200, "parallel": 1},
        sampler={"name": "random", "seed": 0},
        trainer={"epochs": 1, "params": {"sleep": 0.3}},
    )
    # One driver creates the study and the MLflow schema; then four work it together.
    outs: list = []
    errors: list = []

    def drive() -> None:
        try:
            outs.append(api.run(spec, install_signals=False))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=drive) for _ in range(4)]
    threads[0].start()
    import time

    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if api.show("load", optuna_url)["trials"]:
                break
        except Exception:
            pass
        time.sleep(0.5)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join(timeout=900)
    assert not errors, errors
    doc = api.show("load", optuna_url)
    numbers = [t["number"] for t in doc["trials"]]
    assert len(numbers) == 200 and len(set(numbers)) == 200
    assert all(t["state"] == "COMPLETE" for t in doc["trials"])
    run_ids = [t["mlflow_run_id"] for t in doc["trials"]]
    assert len(set(run_ids)) == 200
    client = MlflowClient(mlflow_url)
    runs = client.search_runs(
        [doc["mlflow_experiment_id"]], "tags.`sweeps.role` = 'trial'", max_results=1000
    )
    assert sorted(r.info.run_id for r in runs) == sorted(run_ids)
    assert all(r.info.status == "FINISHED" for r in runs)
    drivers = {
        t.user_attrs["sweeps.driver"]
        for t in __import__("optuna").load_study(study_name="load", storage=optuna_url).trials
    }
    assert len(drivers) == 4
