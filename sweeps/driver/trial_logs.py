"""Trials' live output on the driver's disk, for `sweeps logs --follow` while a sweep runs.

The driver appends what rank 0 ships each epoch; the finished trial's whole log goes to its
MLflow run too, so losing this file (a full disk) loses nothing that is recorded.
"""

from __future__ import annotations

import logging
from pathlib import Path

from sweeps.common import paths

log = logging.getLogger(__name__)


def live_log_path(name: str, number: int) -> Path:
    """Where the driver appends a trial's worker output while it runs."""
    return paths.home() / "logs" / name / f"trial-{number:05d}.log"


def append(name: str, number: int, text: str) -> None:
    path = live_log_path(name, number)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as f:
            f.write(text)
    except OSError as e:  # a full disk must not stop the sweep; MLflow gets the log too
        log.warning("cannot write %s: %s", path, e)
