"""A warm start for the local service's drivers: one process, started by `sweeps up`, that has
imported what a driver imports (Optuna with its SQL stack, Ray, the spec and driver modules:
~1 s of a 2-core machine, most of a warm sweep's driver start) and forks a driver per sweep.

A job's supervisor (`sweeps.jobs`) connects to the socket, hands over its stdin, stdout and
stderr (the driver's output is still the job's log), its working dir, environment, module and
arguments (`sweeps.jobs --drive SPEC`), and reads back the driver's pid, then its exit code.
The driver lives and dies with its supervisor, as a child in the job's process group would:
signals are forwarded to it, and
a driver whose supervisor is gone (its connection closed: Ray's `stop_job` escalated to
SIGKILL) kills itself. Whatever goes wrong with the zygote (not started, still importing, gone),
`spawn` returns None and the supervisor starts the driver as a fresh process.

    python -m sweeps.service.zygote SOCKET
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, NoReturn

from sweeps.common import names

# What every driver imports before its first trial (and nothing that starts threads): named,
# not imported here, since the zygote only loads them for the drivers it forks.
WARM = (
    "optuna",
    "alembic.migration",  # Optuna's RDBStorage imports it on every open
    "ray",
    *names.DRIVER_WARM_MODULES,
    # What the driver's MLflow writer process imports (tracking.writer_proc): forked from here,
    # it writes at once instead of importing MLflow for ~2 s of CPU beside the first trials.
    "mlflow",
    "mlflow.tracking",
    "mlflow.store.tracking.sqlalchemy_store",
    "sqlalchemy.dialects.sqlite",
    "tracking.tracker",
    "tracking.writer_proc",
)

# In a process this zygote forked: its socket (such a process forks its helpers here too).
FORKED_FROM: str | None = None


def warm_imports() -> None:
    import importlib

    for name in WARM:
        importlib.import_module(name)
    # Optuna's first RDBStorage in a process imports what it loads lazily (alembic's command
    # and config, SQLAlchemy's ORM): ~0.5 s, paid by `submit`'s record and the driver's study
    # open (which the lanes' claim waits on). Done once here, on a store nobody keeps.
    from sweeps.search.study import open_storage

    open_storage("sqlite:///:memory:").engine.dispose()


def warm_up() -> None:
    """The imports, then Python's GC told to leave what they made alone: a fork's first full
    collection no longer walks (and so copies, page by page) the ~300,000 objects it shares with
    the zygote. That walk took ~0.3 s in each fork: `submit`, its supervisor, the driver, its
    writer (as gc.freeze's documentation advises for a process that forks without exec)."""
    import gc

    warm_imports()
    gc.freeze()


def serve(path: str) -> None:
    warm_up()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # drivers report their own exit code
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    old = os.umask(0o077)  # the socket starts processes as this user: its owner only
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
    finally:
        os.umask(old)
    server.listen(16)
    while True:
        conn, _ = server.accept()
        try:
            msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            while msg and not msg.endswith(b"\n"):
                more = conn.recv(1 << 20)
                if not more:
                    break
                msg += more
            request = json.loads(msg)
        except (OSError, ValueError):
            conn.close()
            continue
        if os.fork() == 0:
            server.close()
            _child(conn, fds, request)  # raises SystemExit: the child never loops back
        for fd in fds:
            os.close(fd)
        conn.close()


def _child(conn: socket.socket, fds: list[int], request: dict[str, Any]) -> NoReturn:
    """The forked driver: the job's stdio, cwd and env, then `sweeps.jobs`. Exits through
    SystemExit, so atexit handlers (Ray's disconnect) run as in a driver of its own."""
    rc = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the driver waits for its own children
        for target, fd in zip((0, 1, 2), fds, strict=False):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdout.reconfigure(line_buffering=True)  # a log that `logs --driver -f` follows
        sys.stderr.reconfigure(line_buffering=True)
        os.chdir(request["cwd"])
        if request.get("env") is not None:  # else the service's own (a resident sweep)
            os.environ.clear()
            os.environ.update(request["env"])
        import importlib
        import runpy

        from sweeps.common import timeline

        # On the module as imported (the zygote itself runs as __main__).
        importlib.import_module(names.ZYGOTE_MODULE).FORKED_FROM = request.get("zygote")
        timeline.PROCESS_T0 = time.monotonic()  # the driver's timeline starts at its fork
        conn.sendall(f"{os.getpid()}\n".encode())
        if request.get("detach"):  # a sweep the service hosts: it outlives whoever asked
            conn.close()
        else:
            threading.Thread(target=_die_with, args=(conn,), name="supervisor", daemon=True).start()
        # As `python -m MODULE ARGV...` would run it (its `sys.exit(main())` ends up below).
        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            conn.sendall(f"exit {rc}\n".encode())
    raise SystemExit(rc)


def _die_with(conn: socket.socket) -> None:
    """The supervisor never writes after its request: end of stream means it is gone."""
    with contextlib.suppress(OSError):
        while conn.recv(1 << 10):
            pass
    os.kill(os.getpid(), signal.SIGKILL)


class Forked:
    """A driver the zygote forked, as `subprocess.Popen` offers it to the supervisor."""

    def __init__(self, conn: socket.socket, pid: int, rest: bytes) -> None:
        self.conn, self.pid, self._buf = conn, pid, rest

    def send_signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def wait(self) -> int:
        """Its exit code; -SIGKILL when it died without one (killed, OOM)."""
        while b"\n" not in self._buf:
            try:
                more = self.conn.recv(1 << 10)
            except InterruptedError:
                continue
            if not more:
                break
            self._buf += more
        self.conn.close()
        line = self._buf.split(b"\n", 1)[0].decode()
        return int(line.split()[1]) if line.startswith("exit ") else -signal.SIGKILL


def spawn(
    path: str,
    module: str,
    argv: list[str],
    stdio: list[int] | None = None,
    detach: bool = False,
    env: dict[str, str] | None = None,
) -> Forked | None:
    """`python -m module argv...` forked by the zygote at `path`, with this process's stdio,
    cwd and env; None if the zygote does not answer. `detach`: a process that does not die with
    this one, with `stdio` (fds) and `env`, else the zygote's own env (`sweephost`)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(5.0)
        conn.connect(path)
        env = env if detach else dict(os.environ)
        request = {"module": module, "argv": argv, "cwd": os.getcwd(), "env": env}
        request.update(detach=detach, zygote=path)
        body = json.dumps(request)
        socket.send_fds(conn, [body.encode() + b"\n"], stdio or [0, 1, 2])
        buf = b""
        while b"\n" not in buf:
            more = conn.recv(1 << 10)
            if not more:
                raise OSError("the zygote closed the connection")
            buf += more
        conn.settimeout(None)
        line, rest = buf.split(b"\n", 1)
        return Forked(conn, int(line), rest)
    except (OSError, ValueError):
        conn.close()
        return None


def fork_helper(module: str, argv: list[str], stdio: list[int]) -> int | None:
    """In a process this zygote forked (a driver): a helper process (`python -m module argv`),
    forked by the zygote with its imports done, this process's env and cwd and the `stdio`
    fds, that outlives this one; its pid, or None where it must be started otherwise."""
    if FORKED_FROM is None:
        return None
    forked = spawn(FORKED_FROM, module, argv, stdio, detach=True, env=dict(os.environ))
    if forked is None:
        return None
    forked.conn.close()
    return forked.pid


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    serve(args[0])


if __name__ == "__main__":
    main()
