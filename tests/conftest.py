"""One real local Ray cluster per test session; every test gets its own SWEEPS_HOME."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Real services on loopback (PostgreSQL, mlflow server, GCS emulator) as fixtures.
pytest_plugins = ["services"]

ROOT = Path(__file__).resolve().parent.parent
BYO = Path(__file__).resolve().parent / "byo"


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    from sweeps.execution.cluster import set_ray_env

    # Ray Train set as on the local Ray a sweep starts (`ensure_ray`): its health-check
    # interval, no preemption watcher, no metrics, no autoscaler requests.
    set_ray_env(own=True)
    # 4 logical CPUs on a 2-core machine: two 2-worker lanes fit; the work itself is tiny.
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(autouse=True)
def _mlflow_globals_restored():
    """mlflow.set_tracking_uri in a test also sets MLFLOW_TRACKING_URI in os.environ; put the
    process back so the next test's sweeps resolve their own stores."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    yield
    from tracking.mlflow_compat import reset_tracking_uri

    reset_tracking_uri()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("SWEEPS_HOME", str(h))
    for var in (
        "MLFLOW_TRACKING_URI",
        "SWEEPS_STORAGE",
        "SWEEPS_CHECKPOINTS",
        "SWEEPS_ARTIFACTS",
        # the ecosystem's variables are honoured too: a developer's shell must not leak in
        "OPTUNA_STORAGE",
        "MLFLOW_REGISTRY_URI",
        "MLFLOW_EXPERIMENT_NAME",
    ):
        monkeypatch.delenv(var, raising=False)
    return h


def make_spec(**fields):
    """A small spec built in code (validated like any YAML)."""
    from sweeps.spec import spec_from_dict

    base = {
        "name": "t",
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "search_space": {"lr": {"type": "float", "low": 0.001, "high": 0.02, "log": True}},
        "sampler": {"name": "tpe", "seed": 1},
        "pruner": {"name": "none"},
        "budget": {"trials": 2, "parallel": 1},
        "trainer": {"model": "mlp", "dataset": "digits", "epochs": 3},
    }
    for k, v in fields.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return spec_from_dict(base)


def byo(entrypoint: str, **fields):
    trainer = {"entrypoint": f"byo_tasks:{entrypoint}", "code_dir": str(BYO), "epochs": 3}
    trainer.update(fields.pop("trainer", {}))
    return make_spec(trainer=trainer, **fields)
