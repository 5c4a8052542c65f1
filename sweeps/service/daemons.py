"""The processes `sweeps up` starts and `sweeps down` stops: each in a session (process group)
of its own, so that stopping one reaches everything it started and nothing else."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from sweeps.common.errors import SpecError


def alive(pid: int | None) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    if not pid:
        return False
    try:  # our own child that exited is a zombie until reaped: kill(pid, 0) still finds it
        if os.waitpid(pid, os.WNOHANG)[0]:
            return False
    except ChildProcessError:
        pass  # not ours (a later command reading the record)
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    stat = _stat(pid)
    return stat is None or stat[1][0] != "Z"


def _stat(pid: int | str) -> tuple[str, list[str]] | None:
    """/proc/PID/stat: the name, and the fields after it (state, parent, group, ...); None if
    unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 :].split()


def free_port(host: str) -> int:
    """A port the kernel has just found free on `host` (for ports the user does not choose)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def check_port_free(host: str, port: int, flag: str) -> None:
    """Refuse a port another process listens on, before anything starts. Without this, a taken
    dashboard port was found only once Ray's head had started and exited, and a taken MLflow
    port that answered /health (a colleague's MLflow UI) passed for ours."""
    import errno
    import socket

    with socket.socket() as s:
        # Reuse-address: a port in TIME_WAIT after the last `down` is free; a listener is not.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as err:
            if err.errno != errno.EADDRINUSE:
                # Not an address of this machine, or a name that does not resolve.
                raise SpecError(f"--host: cannot bind {host}:{port} ({err.strerror})") from None
            raise SpecError(
                f"{flag}: {host}:{port} is taken by another process; pass a free port"
            ) from None


def spawn(cmd: list[str], log: Path, env: dict[str, str]) -> int:
    """A child in its own session, so `down` can stop it and everything it started."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    return proc.pid


def group_members(pgid: int) -> list[str] | None:
    """The names of the live (not zombie) processes in group `pgid`; None without /proc.
    `killpg(pgid, 0)` cannot say this: it also finds zombies that only their parent can reap."""
    try:
        pids = [d for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return None
    names = []
    for pid in pids:
        stat = _stat(pid)  # None: it exited meanwhile
        if stat and len(stat[1]) > 2 and stat[1][2] == str(pgid) and stat[1][0] != "Z":
            names.append(stat[0])
    return names


def stop_group(pid: int, wait_s: float, until_gone: str | None = None) -> None:
    """SIGTERM the group, then SIGKILL what is left after `wait_s`, or as soon as no process
    named `until_gone` is left in it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + (wait_s if sig == signal.SIGTERM else 5)
        while time.monotonic() < deadline:
            # A leader that is our own child (`up` stopping what it just started) stays in its
            # group as a zombie until reaped: without this, every such stop waited 30 + 5 s.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            members = group_members(pid)
            if members is None:  # no /proc: the group's existence is all we can see
                try:
                    os.killpg(pid, 0)
                    members = ["?"]
                except ProcessLookupError:
                    members = []
            if not members:
                return
            if sig == signal.SIGTERM and until_gone and until_gone not in members:
                break
            time.sleep(0.2)
