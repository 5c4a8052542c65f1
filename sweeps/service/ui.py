"""`sweeps ui`: the MLflow UI and optuna-dashboard in the foreground, as `up` starts its servers.

Its ports are checked before anything starts (one line, exit 2, as `up` does), so another
server on a port is never taken for ours and its URL never printed. A server that exits at
start is reported at once with the reason from its log (exit 1), not after a timeout. Each
server runs in a process group of its own, and Ctrl-C or SIGTERM on `sweeps ui` stops every
group: `mlflow ui`'s workers and job runner are its children, not ours."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sweeps.common.errors import ServiceError
from sweeps.service import daemons
from sweeps.service.local import _answers

START_S = 180.0  # what a server may take to answer (MLflow's first start migrates its store)


@dataclass
class Server:
    label: str  # "MLflow UI"
    cmd: list[str]
    port: int
    flag: str  # the option that chose the port, for the error line
    probe: str  # the path that answers 2xx once it serves
    view: str = ""  # the page printed after its URL
    env: dict[str, str] | None = None


class Terminated(Exception):
    """SIGTERM reached `sweeps ui`: its servers are stopped, and it exits 143."""


def create_storage(url: str) -> None:
    """The Optuna store's folder and tables, for a home no sweep has run in yet: on an empty
    SQLite file optuna-dashboard exited at start (`no such table: version_info`)."""
    from sweeps.common import paths

    if url.startswith("sqlite:///"):
        paths.ensure_local_dirs(url)
        import optuna

        optuna.storages.get_storage(url)


def serve(servers: list[Server], host: str, log: Path | None, say: Callable[[str], None]) -> None:
    """Start `servers`, print each URL once it answers, and run until one exits or this
    process is interrupted; every server's process group is stopped on the way out."""
    for s in servers:
        daemons.check_port_free(host, s.port, s.flag)
    procs: list[subprocess.Popen[bytes]] = []
    with _sink(log) as sink, _terminate_raises():
        try:
            for s in servers:
                procs.append(_start(s, sink))
            for s, proc in zip(servers, procs, strict=True):
                _wait_ready(s, proc, host, log)
                say(f"{s.label + ':':<18}http://{host}:{s.port}/{s.view}")
            while True:
                for s, proc in zip(servers, procs, strict=True):
                    if proc.poll() is not None:
                        raise ServiceError(f"{s.label} exited ({proc.returncode}){_see(log)}")
                time.sleep(0.5)
        finally:
            for proc in procs:
                daemons.stop_group(proc.pid, 10.0)


def _start(s: Server, sink: IO[bytes] | None) -> subprocess.Popen[bytes]:
    env = {**os.environ, **(s.env or {})}
    return subprocess.Popen(s.cmd, stdout=sink, stderr=sink, env=env, start_new_session=True)


def _wait_ready(s: Server, proc: subprocess.Popen[bytes], host: str, log: Path | None) -> None:
    url = f"http://{host}:{s.port}{s.probe}"
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:  # it exited: say why now, not at the timeout
            raise ServiceError(f"{s.label} exited at start{_why(log)}{_see(log)}")
        if _answers(url):
            return
        time.sleep(0.3)
    raise ServiceError(f"{s.label} did not answer at {url} in {START_S:g} s{_see(log)}")


def _why(log: Path | None) -> str:
    from sweeps.service.local import _why as why

    text = why(log) if log is not None else ""
    return f": {text}" if text else ""


def _see(log: Path | None) -> str:
    return f"; see {log}" if log is not None else ""


@contextlib.contextmanager
def _sink(log: Path | None) -> Iterator[IO[bytes] | None]:
    """The servers' INFO lines and warnings go to `log` (None: to this terminal)."""
    if log is None:
        yield None
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        yield f


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """SIGTERM raises `Terminated` in the main thread, so the servers are stopped on the way
    out as on Ctrl-C (the default action would end this process and leave them running)."""

    def on_term(*_: Any) -> None:
        raise Terminated

    saved = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, saved)
