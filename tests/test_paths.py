"""Where stores resolve: spec field > SWEEPS_* > the ecosystem's variable > embedded default."""

from __future__ import annotations

import time

import pytest
from conftest import make_spec

from sweeps.common import paths

ECOSYSTEM = ("SWEEPS_STORAGE", "OPTUNA_STORAGE", "MLFLOW_REGISTRY_URI", "MLFLOW_EXPERIMENT_NAME")


@pytest.fixture
def clean_env(home, monkeypatch):
    for var in ECOSYSTEM:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_optuna_storage_is_honoured_after_sweeps_storage(clean_env, home):
    assert paths.storage_url() == f"sqlite:///{home.resolve() / 'optuna.db'}"
    clean_env.setenv("OPTUNA_STORAGE", "sqlite:////tmp/optuna-eco.db")
    assert paths.storage_url() == "sqlite:////tmp/optuna-eco.db"
    clean_env.setenv("SWEEPS_STORAGE", "sqlite:////tmp/sweeps.db")
    assert paths.storage_url() == "sqlite:////tmp/sweeps.db"
    assert paths.storage_url("postgresql://h/db") == "postgresql://h/db"


def test_registry_uri_defaults_to_the_tracking_store(clean_env):
    assert paths.registry_uri("sqlite:///t.db") == "sqlite:///t.db"
    clean_env.setenv("MLFLOW_REGISTRY_URI", "sqlite:///r.db")
    assert paths.registry_uri("sqlite:///t.db") == "sqlite:///r.db"


def test_experiment_name_from_mlflow_experiment_name(clean_env):
    assert paths.experiment_name(None, "quickstart") == "quickstart"
    clean_env.setenv("MLFLOW_EXPERIMENT_NAME", "team-exp")
    assert paths.experiment_name(None, "quickstart") == "team-exp"
    assert paths.experiment_name("mine", "quickstart") == "mine"


def test_registry_client_uses_mlflow_registry_uri(clean_env, tmp_path):
    from tracking.registry import _client

    clean_env.setenv("MLFLOW_REGISTRY_URI", f"sqlite:///{tmp_path / 'registry.db'}")
    client = _client(f"sqlite:///{tmp_path / 'tracking.db'}")
    assert client._registry_uri == f"sqlite:///{tmp_path / 'registry.db'}"
    assert client.tracking_uri == f"sqlite:///{tmp_path / 'tracking.db'}"


def test_sweep_experiment_defaults_to_mlflow_experiment_name(clean_env, tmp_path):
    """A real MLflow SQLite store: the sweep's parent run lands in $MLFLOW_EXPERIMENT_NAME."""
    from mlflow.tracking import MlflowClient

    from sweeps.contracts.records import SweepContext
    from tracking.tracker import MLflowTracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    clean_env.setenv("MLFLOW_EXPERIMENT_NAME", "team-exp")
    tracker = MLflowTracker(uri, (tmp_path / "art").as_uri())
    ctx = SweepContext(make_spec(name="eco"), "eco", "sqlite://", time.time())
    try:
        tracker.start_sweep(ctx)
    finally:
        tracker.close()
    exp = MlflowClient(uri).get_experiment(ctx.experiment_id)
    assert exp.name == "team-exp"


def test_checkpoint_storage_follows_the_lanes_environment_not_the_hosts(monkeypatch):
    from sweeps.execution.storage import filesystem

    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    # The lane host may predate the variable: the lane's own env must decide.
    fs, path = filesystem("gs://b/ckpt", {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"})
    assert type(fs).__name__ == "GcsFileSystem" and path == "b/ckpt"
    assert filesystem("gs://b/ckpt", {}) == (None, "gs://b/ckpt")  # pyarrow's default: real GCS
    assert filesystem("/tmp/ckpt") == (None, "/tmp/ckpt")
