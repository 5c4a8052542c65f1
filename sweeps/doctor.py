"""`sweeps doctor`: is every configured service reachable, do the credentials work, which versions.

Each check is bounded in time and never raises: one row per service, ok or a one-line reason.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from sweeps.common.errors import one_line
from sweeps.common.redact import mask_url
from sweeps.common.words import plural


def _row(service: str, url: str, fn: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        ok, detail = fn()
    except Exception as e:
        ok, detail = False, one_line(e, 200)
    return {
        "service": service,
        "url": mask_url(url),
        "ok": ok,
        "detail": detail,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def check_storage(url: str) -> tuple[bool, str]:
    import sqlalchemy

    from sweeps.search.study import open_storage

    if url.startswith("postgresql"):
        host, port = _host_port(url, 5432)
        socket.create_connection((host, port), timeout=5).close()
    storage = open_storage(url)
    with storage.engine.connect() as conn:
        version = conn.execute(
            sqlalchemy.text(
                "select sqlite_version()" if url.startswith("sqlite") else "show server_version"
            )
        ).scalar()
    n = len(storage.get_all_studies())
    return True, f"{url.split(':')[0]} {version}; {plural(n, 'sweep')}"


def check_tracking(uri: str) -> tuple[bool, str]:
    from tracking.mlflow_compat import check_reachable

    check_reachable(uri)
    detail = "reachable"
    if uri.startswith("http"):
        import requests

        r = requests.get(uri.rstrip("/") + "/version", timeout=5)
        if r.ok:
            detail = f"mlflow server {r.text.strip()}"
    else:
        import mlflow

        detail = f"mlflow {mlflow.__version__} (embedded store)"
    return True, detail + (
        "; credentials accepted" if os.environ.get("MLFLOW_TRACKING_USERNAME") else ""
    )


def check_ray(address: str | None) -> tuple[bool, str]:
    if not address:
        return True, "local (started on demand)"
    host, port = _host_port(address if "://" in address else f"ray://{address}", 6379)
    socket.create_connection((host, port), timeout=5).close()
    return True, f"GCS port {host}:{port} answers"


def check_checkpoints(root: str) -> tuple[bool, str]:
    if root.startswith("gs://"):
        from trainer.gcs import client, split_uri

        bucket, prefix = split_uri(root)
        list(client().list_blobs(bucket, prefix=prefix, max_results=1))
        return True, f"bucket {bucket} listable"
    os.makedirs(root, exist_ok=True)
    probe = os.path.join(root, ".sweeps-write-probe")
    with open(probe, "w") as f:
        f.write("ok")
    os.remove(probe)
    free = os.statvfs(root)
    return True, f"writable; {free.f_bavail * free.f_frsize / 2**30:.1f} GiB free"


def _host_port(url: str, default: int) -> tuple[str, int]:
    from urllib.parse import urlparse

    u = urlparse(url)
    return u.hostname or "127.0.0.1", u.port or default


def check(
    storage_url: str, tracking_uri: str, ray_address: str | None, checkpoint_root: str
) -> list[dict[str, Any]]:
    return [
        _row("optuna storage", storage_url, lambda: check_storage(storage_url)),
        _row("mlflow tracking", tracking_uri, lambda: check_tracking(tracking_uri)),
        _row("ray", ray_address or "local", lambda: check_ray(ray_address)),
        _row("checkpoints", checkpoint_root, lambda: check_checkpoints(checkpoint_root)),
    ]
