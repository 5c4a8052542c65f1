"""Which lines of a worker's output are the trial's: Ray's own log records are not.

While a trial runs, its stdout and stderr are teed into its log (`lane_worker._Tee`). Ray's
console handlers write to whatever `sys.stderr` is when a record is emitted, from any thread:
Ray Train's report thread then put `Reporting training result 1: TrainingReport(checkpoint=
.../<the lane's first sweep>-lane0.../trial000000-step00015-0)` into the running trial's log,
which on a warm lane reads as output of another sweep. Records of Ray's loggers go to the
worker's own stderr (Ray's worker log, where they go without a trial) instead; the training
code's own records (any other logger) stay in the trial's log. SWEEPS_VERBOSE=1 keeps Ray's
lines in trial logs, as it does in the terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TextIO

# Loggers whose handlers carry Ray's console output in a worker (Ray Train configures the
# root logger's console handler there too).
_LOGGERS = ("", "ray", "ray.train", "ray.data")


def is_rays(record: logging.LogRecord) -> bool:
    """Pure: whether a log record is one of Ray's own."""
    return record.name == "ray" or record.name.startswith("ray.")


class _ToWorkerLog(logging.Filter):
    """On a console handler: Ray's records go to `stream`, not the handler's (a trial's)."""

    def __init__(self, handler: logging.Handler, stream: TextIO) -> None:
        super().__init__()
        self.handler, self.stream = handler, stream

    def filter(self, record: logging.LogRecord) -> bool:
        if not is_rays(record):
            return True
        with contextlib.suppress(Exception):  # a closed stream must not fail the trial
            self.stream.write(self.handler.format(record) + "\n")
        return False


@contextlib.contextmanager
def kept_out(stream: TextIO) -> Iterator[None]:
    """While a trial runs: Ray's console records go to `stream` (the worker's stderr before
    the trial's tee replaced it)."""
    if os.environ.get("SWEEPS_VERBOSE") == "1":
        yield
        return
    added: list[tuple[logging.Handler, logging.Filter]] = []
    for name in _LOGGERS:
        for h in logging.getLogger(name).handlers:
            # Console handlers only: Ray's session files keep their records.
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                f = _ToWorkerLog(h, stream)
                h.addFilter(f)
                added.append((h, f))
    try:
        yield
    finally:
        for h, f in added:
            h.removeFilter(f)
