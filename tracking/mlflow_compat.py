"""MLflow adapter: every use of MLflow's private or internal names lives in this module.

Pinned to the MLflow versions tested (pyproject's upper bound); `tests/test_adapters.py` fails
loudly when an upgrade moves a name used here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sweeps.common.errors import ServiceError, one_line

MLFLOW_TESTED = ("3.17", "3.18")  # >= first, < second
PARENT_RUN_TAG = "mlflow.parentRunId"


def _tracking_utils() -> Any:
    from mlflow.tracking._tracking_service import utils

    return utils


def reset_tracking_uri() -> None:
    """Forget a tracking URI set in this process (tests restore MLflow's global between runs)."""
    _tracking_utils()._tracking_uri = None


@contextmanager
def scoped_tracking_uri(uri: str) -> Iterator[None]:
    """Use `uri` for MLflow's fluent API for a moment. mlflow.set_tracking_uri also writes
    MLFLOW_TRACKING_URI into the environment, which would leak one sweep's store into the next
    (and into every child process); this puts both back."""
    import mlflow

    utils = _tracking_utils()
    old, old_env = utils._tracking_uri, os.environ.get("MLFLOW_TRACKING_URI")
    old_reg = os.environ.get("MLFLOW_REGISTRY_URI")
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(old)
        for key, value in (("MLFLOW_TRACKING_URI", old_env), ("MLFLOW_REGISTRY_URI", old_reg)):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def system_metrics_monitor(run_id: str, uri: str) -> Any:
    """CPU, memory, disk, network (and GPU with nvidia-ml-py) of this node, sampled onto a run."""
    import platform

    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    return SystemMetricsMonitor(
        run_id, sampling_interval=5, tracking_uri=uri, node_id=platform.node()
    )


def check_reachable(uri: str) -> None:
    """Fail before any trial starts when the tracking store cannot be used."""
    from mlflow.tracking import MlflowClient

    if uri.startswith(("http://", "https://")):
        import requests

        try:
            requests.get(uri.rstrip("/") + "/health", timeout=5)
        except requests.RequestException as e:
            raise ServiceError(
                f"MLflow tracking server {uri} is unreachable: {one_line(e, 200)}"
            ) from None
    # Fail fast here; the tracker's own writes retry with backoff later.
    saved = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    try:
        MlflowClient(uri).search_experiments(max_results=1)
    except Exception as e:
        msg = one_line(e)
        if "401" in msg or "Unauthorized" in msg or "403" in msg:
            raise ServiceError(f"MLflow at {uri} refused the credentials: {msg}") from None
        raise ServiceError(f"MLflow tracking store {uri} is unreachable: {msg}") from None
    finally:
        if saved is None:
            os.environ.pop("MLFLOW_HTTP_REQUEST_MAX_RETRIES", None)
        else:
            os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = saved


def fast_sqlite_store(client: Any) -> bool:
    """synchronous=NORMAL on a local SQLite store's connections (the runner sets WAL on the
    file): the writer's commits stop waiting on fsync, which was a fifth of its time in a
    sweep of tiny trials. Still crash-safe in WAL; an OS crash may lose the last commits.
    Returns whether it applied."""
    import sqlalchemy

    engine = getattr(client._tracking_client.store, "engine", None)
    if engine is None or engine.dialect.name != "sqlite":
        return False

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    sqlalchemy.event.listen(engine, "connect", on_connect)
    engine.dispose()  # pooled connections reconnect with the pragma
    return True
