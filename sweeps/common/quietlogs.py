"""Our dependencies' INFO lines out of what the user sees, unless SWEEPS_VERBOSE=1 (`-v`).

Ray sets its loggers to INFO when it is imported, and some of its modules set their own level, so
this runs after the import and touches every Ray logger by name.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from typing import Any


def verbose() -> bool:
    return os.environ.get("SWEEPS_VERBOSE") == "1"


def quiet_ray(level: int = logging.WARNING) -> None:
    """Ray's loggers to `level` ("Reporting training result ...", "Uploading package ...")."""
    if verbose():
        return
    names = [n for n in logging.root.manager.loggerDict if n.startswith("ray.")]
    for name in ["ray", *names]:
        logging.getLogger(name).setLevel(level)


def quiet(verbose: bool = False) -> None:
    """The terminal shows the user's sweep, not our libraries' chatter: Ray's token-auth and
    thread warnings, Optuna's plotting notes, MLflow's INFO lines and deprecation warnings.
    `-v` shows them all (SWEEPS_VERBOSE=1 does the same for child processes)."""
    import logging
    import warnings

    verbose = verbose or os.environ.get("SWEEPS_VERBOSE") == "1"
    os.environ["SWEEPS_VERBOSE"] = "1" if verbose else "0"
    level = logging.INFO if verbose else logging.ERROR
    # MLflow configures its loggers on import from this variable (default INFO).
    os.environ["MLFLOW_LOGGING_LEVEL"] = logging.getLevelName(level)
    # `sweeps logs` downloads a log file: a progress bar for it is noise.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true" if verbose else "false")
    # With an MLflow server, each run's end prints "View run ... at: URL" to stdout.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "false" if verbose else "true")
    os.environ["OPTUNA_VERBOSITY"] = "INFO" if verbose else "ERROR"
    for name in ("mlflow", "optuna", "alembic", "ray", "sweeps"):
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    for name in ("mlflow", "optuna", "alembic", "ray"):
        logging.getLogger(name).setLevel(level)
    if not verbose:
        warnings.simplefilter("ignore")
        os.environ.setdefault("PYTHONWARNINGS", "ignore")  # and in the processes we start
    # MLflow shows some UserWarnings under its own `simplefilter("once")` (loading a pyfunc
    # model: "Add type hints to the `predict` method"), past the filter above, and colours
    # them with raw escape codes: they go through this instead.
    warnings.showwarning = _show_plain if verbose else _drop


def _drop(*args: object, **kwargs: object) -> None:
    """Not verbose: a warning that got past the filters is not shown either."""


_SHOW = warnings.showwarning


def _show_plain(message: Warning | str, *args: Any, **kwargs: Any) -> None:
    """`-v`: the warning, without the colour codes MLflow wraps its messages in."""
    text = _ANSI.sub("", str(message))
    try:
        plain: Warning | str = type(message)(text) if isinstance(message, Warning) else text
    except Exception:
        plain = text
    _SHOW(plain, *args, **kwargs)


def quiet_optuna() -> None:
    """Optuna's warnings ("[W ...] There are no complete trials." from each plot of a sweep
    with none) out of what the user sees, unless `-v`. Optuna sets its logger to INFO when it
    first configures it (on import), whatever `quiet` set before: this runs after."""
    import optuna

    # Never INFO: "A new study created" is ours to say.
    optuna.logging.set_verbosity(optuna.logging.WARNING if verbose() else optuna.logging.ERROR)


class DriverLogFilter:
    """Keeps the sweep's lines of a driver log that arrives in chunks and drops Ray's (unless
    `keep_all`, for `-v`). A line split across two chunks is held until its end arrives."""

    def __init__(self, keep_all: bool = False) -> None:
        self.keep_all = keep_all
        self._partial = ""

    def feed(self, chunk: str) -> str:
        if self.keep_all:
            return chunk
        lines = (self._partial + chunk).split("\n")
        self._partial = lines.pop()
        return "".join(f"{line}\n" for line in lines if self._keep(line))

    def close(self) -> str:
        rest, self._partial = self._partial, ""
        return rest if rest and self._keep(rest) else ""

    @staticmethod
    def _keep(line: str) -> bool:
        return not is_ray_line(line)


# Lines Ray's own libraries print into a trial's output or a job's log (its logging format, the
# raylet's lines, the job supervisor's "Running entrypoint ..."), not the user's.
_RAY_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING|ERROR|DEBUG) \S+\.py:\d+ -- "
    r"|\(\w+ pid=\d+|\[\d{4}-\d\d-\d\d .*\] \(raylet\)|\(raylet\)|Running entrypoint for job )"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def is_ray_line(line: str) -> bool:
    """Pure: whether a line is Ray's own (colour codes ignored)."""
    return bool(_RAY_LINE.match(_ANSI.sub("", line)))
