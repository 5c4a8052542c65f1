"""Riding out a lost database: a call retried with backoff while its connection is down.

A restarted PostgreSQL (or a SQLite file on a network disk that blinks) costs the driver a
pause, bounded by SWEEPS_STORAGE_OUTAGE_S, not a sweep with trials in flight lost. Only a lost
connection is waited out; a bad value fails at once.
"""

from __future__ import annotations

import os
import time
from typing import Any

from sweeps.common.errors import ServiceError, one_line
from sweeps.common.redact import mask_url

OUTAGE_S = float(os.environ.get("SWEEPS_STORAGE_OUTAGE_S", "300"))


def outage_tolerant(fn: Any, url: str) -> Any:
    """`fn`, retried with backoff while the database is unreachable (up to OUTAGE_S)."""
    import logging
    import sys

    from sweeps.search.sql_rows import transient_errors

    transient = transient_errors()  # SQLAlchemy's only where loaded: `ls` reads SQLite without
    # Optuna's own error, where Optuna is loaded (`show` and `ls` read without it).
    errors = sys.modules.get("optuna.exceptions")
    internal = (errors.StorageInternalError,) if errors else ()
    log = logging.getLogger(__name__)

    def wrap(fn: Any) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            deadline, delay = time.monotonic() + OUTAGE_S, 0.5
            while True:
                try:
                    return fn(*args, **kw)
                except (*transient, *internal) as e:
                    # Optuna wraps a failed commit; only a lost connection underneath is ours
                    # to wait out, a bad value is not.
                    if isinstance(e, internal) and not isinstance(e.__cause__, transient):
                        raise
                    if time.monotonic() + delay > deadline:
                        raise ServiceError(
                            f"Optuna storage {mask_url(url)} unreachable for {OUTAGE_S:g} s: "
                            f"{one_line(e)}"
                        ) from None
                    cause = e.__cause__ or e
                    log.warning("Optuna storage unreachable, sweep paused: %s", one_line(cause))
                    time.sleep(delay)
                    delay = min(delay * 2, 10.0)

        return call

    return wrap(fn)
