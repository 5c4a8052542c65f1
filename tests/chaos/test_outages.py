"""Stores that go away mid-sweep: the tracking server and the Optuna database. The sweep
pauses and retries (bounded); nothing is lost and nothing is left RUNNING."""

from __future__ import annotations

import threading
import time
from urllib.parse import urlparse

import pytest
from conftest import byo
from mlflow.tracking import MlflowClient
from services import start_mlflow_server

from sweeps import api


def _run_in_thread(spec) -> tuple[threading.Thread, list]:
    box: list = []

    def target() -> None:
        try:
            box.append(api.run(spec, install_signals=False))
        except Exception as e:  # shown by the assertion below
            box.append(e)

    th = threading.Thread(target=target)
    th.start()
    return th, box


def _wait_complete(
    name: str, url: str | None, n: int, th: threading.Thread, box: list, timeout: float = 180
) -> None:
    end, last = time.time() + timeout, None
    while time.time() < end:
        try:
            doc = api.show(name, url)
            last = [t["state"] for t in doc["trials"]]
            if last.count("COMPLETE") >= n:
                return
        except Exception as e:  # the study may not exist yet
            last = e
        if not th.is_alive():
            raise AssertionError(f"{name}: the sweep ended before {n} trials completed: {box}")
        time.sleep(0.3)
    raise AssertionError(f"{name}: {n} trials never completed; last seen: {last!r}\n{_stacks()}")


def _stacks() -> str:
    """Every thread's stack: where a sweep that makes no progress is stuck."""
    import sys
    import traceback

    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(
        f"--- {names.get(ident, ident)}\n" + "".join(traceback.format_stack(frame))
        for ident, frame in sys._current_frames().items()
    )


def _assert_whole(name: str, url: str | None, tracking: str, trials: int, epochs: int) -> None:
    doc = api.show(name, url)
    assert [t["state"] for t in doc["trials"]] == ["COMPLETE"] * trials, doc["trials"]
    client = MlflowClient(tracking)
    for t in doc["trials"]:
        run = client.get_run(t["mlflow_run_id"])
        assert run.info.status == "FINISHED"
        assert len(client.get_metric_history(run.info.run_id, "val_accuracy")) == epochs


@pytest.mark.usefixtures("ray_cluster")
def test_tracking_server_lost_mid_sweep(home, tmp_path, monkeypatch):
    backend, art = f"sqlite:///{tmp_path}/server.db", str(tmp_path / "art")
    server = start_mlflow_server(backend, art)
    port = urlparse(server.url).port
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
    spec = byo(
        "slow",
        name="mlflow-outage",
        budget={"trials": 6},
        trainer={"epochs": 3, "params": {"sleep": 0.3}},
    )
    th, box = _run_in_thread(spec)
    try:
        _wait_complete("mlflow-outage", None, 2, th, box)
        server.stop()  # the server is gone for a while...
        time.sleep(4)
        server = start_mlflow_server(backend, art, port=port)  # ...and back
        th.join(timeout=600)
        assert box and not isinstance(box[0], Exception) and box[0].state == "finished", box
        _assert_whole("mlflow-outage", None, server.url, 6, 3)
    finally:
        server.stop()


@pytest.mark.usefixtures("ray_cluster")
def test_optuna_database_lost_mid_sweep(postgres, home, monkeypatch):
    url = postgres.create_database("optuna_outage")
    monkeypatch.setenv("SWEEPS_STORAGE", url)
    spec = byo(
        "slow",
        name="db-outage",
        budget={"trials": 6},
        trainer={"epochs": 3, "params": {"sleep": 0.3}},
    )
    th, box = _run_in_thread(spec)
    _wait_complete("db-outage", url, 2, th, box)
    postgres.stop()
    time.sleep(4)
    postgres.start()
    th.join(timeout=600)
    assert box and not isinstance(box[0], Exception) and box[0].state == "finished", box
    _assert_whole("db-outage", url, f"sqlite:///{home}/mlflow.db", 6, 3)
