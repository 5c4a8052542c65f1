"""Where state lives. The embedded default keeps everything under SWEEPS_HOME (./.sweeps);
a spec field or an environment variable points a store elsewhere (spec wins over env)."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    return Path(os.environ.get("SWEEPS_HOME", ".sweeps")).expanduser().resolve()


def storage_url(spec_storage: str | None = None) -> str:
    """Optuna storage: spec.storage, else $SWEEPS_STORAGE, else SQLite under SWEEPS_HOME."""
    return spec_storage or os.environ.get("SWEEPS_STORAGE") or f"sqlite:///{home() / 'optuna.db'}"


def tracking_uri(spec_uri: str | None = None) -> str:
    """MLflow: spec.tracking.uri, else $MLFLOW_TRACKING_URI, else SQLite under SWEEPS_HOME."""
    return spec_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{home() / 'mlflow.db'}"


def artifact_root() -> str:
    """Where new experiments keep artifacts when the tracking store does not decide (SQLite)."""
    return os.environ.get("SWEEPS_ARTIFACTS") or (home() / "artifacts").as_uri()


def checkpoint_root() -> str:
    """Ray Train storage_path for lanes' checkpoints: a local folder or gs://bucket/prefix."""
    return os.environ.get("SWEEPS_CHECKPOINTS") or str(home() / "checkpoints")


def ensure_local_dirs(*urls: str) -> None:
    """Create the folders SQLite URLs point into, so a fresh checkout just works."""
    for url in urls:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
