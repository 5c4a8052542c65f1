"""Where state lives. The embedded default keeps everything under SWEEPS_HOME (the project's
`.sweeps`, found from the working directory as git finds `.git`); a spec field or an environment
variable points a store elsewhere. Precedence, everywhere: spec field > SWEEPS_* variable > the
ecosystem's own variable (OPTUNA_STORAGE, MLFLOW_TRACKING_URI, MLFLOW_REGISTRY_URI,
MLFLOW_EXPERIMENT_NAME) > embedded default."""

from __future__ import annotations

import os
from pathlib import Path

STORE = ".sweeps"


def home() -> Path:
    """$SWEEPS_HOME, else the project's store: see find_home."""
    if os.environ.get("SWEEPS_HOME"):
        return Path(os.environ["SWEEPS_HOME"]).expanduser().resolve()
    return find_home(Path.cwd())


def find_home(start: Path) -> Path:
    """The `.sweeps` folder nearest `start`, looking in it and then its parents as git looks for
    `.git`, so a command run in a subfolder (`cd examples/x`) uses the project's one store. The
    search ends at the top of the enclosing git work tree: a store above it belongs to something
    else. With none found, a new store goes at that top, or in `start` outside a work tree."""
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / STORE).is_dir():
            return folder / STORE
        if (folder / ".git").exists():  # a folder (a clone) or a file (a worktree, a submodule)
            return folder / STORE
    return start / STORE


def zygote_socket() -> Path:
    """The local service's zygote (`sweeps.zygote`): where job supervisors ask for a driver."""
    return home() / "service" / "zygote.sock"


def storage_url(spec_storage: str | None = None) -> str:
    """Optuna storage: spec.storage, else $SWEEPS_STORAGE, else $OPTUNA_STORAGE, else SQLite
    under SWEEPS_HOME."""
    return (
        spec_storage
        or os.environ.get("SWEEPS_STORAGE")
        or os.environ.get("OPTUNA_STORAGE")
        or f"sqlite:///{home() / 'optuna.db'}"
    )


def tracking_uri(spec_uri: str | None = None) -> str:
    """MLflow: spec.tracking.uri, else $MLFLOW_TRACKING_URI, else SQLite under SWEEPS_HOME."""
    return spec_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{home() / 'mlflow.db'}"


def registry_uri(tracking_uri: str) -> str:
    """MLflow Model Registry: $MLFLOW_REGISTRY_URI, else the tracking store (MLflow's rule)."""
    return os.environ.get("MLFLOW_REGISTRY_URI") or tracking_uri


def experiment_name(spec_experiment: str | None, sweep_name: str) -> str:
    """MLflow experiment of a sweep: tracking.experiment, else $MLFLOW_EXPERIMENT_NAME, else the
    sweep's name."""
    return spec_experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or sweep_name


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


def worker_code_dir(code_dir: str | None) -> str | None:
    """Where workers find `trainer.code_dir`. In a Ray Job (`sweeps submit`) the code came in
    the job's working dir, which Ray unpacks on every node and makes each worker's cwd: the
    path stays relative to it, since the head's absolute path need not exist on other nodes.
    Elsewhere the driver's absolute path (one machine, or a folder the driver uploaded)."""
    if not code_dir:
        return None
    return code_dir if os.environ.get("SWEEPS_JOB") == "1" else os.path.abspath(code_dir)
