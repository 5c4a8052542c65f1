"""The tracker's writer process forked by the local service's zygote, its imports done.

Started as `python -c` (writer_proc), the writer imports MLflow and its SQL store: ~2 s of CPU
on a 2-core machine, spent beside a warm sweep's first trials, whose trials then took ~1.5 s
each against 0.9 s cold. A driver that the zygote forked (it has MLflow imported) asks it for
the writer instead; the writer still has the driver's environment, working dir and sys.path,
a session of its own, and the same pipes. Anywhere else (no zygote, one that does not answer)
the writer starts as before.

The forked process runs `tracking.writer_main`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import BinaryIO

MODULE = "tracking.writer_main"  # run by name: it imports the tracker, which imports us
# (module, argv, stdio fds) -> the forked process's pid, or None (sweeps.service.zygote).
Fork = Callable[[str, list[str], list[int]], "int | None"]


class ForkedWriter:
    """The writer the zygote forked, as much of `subprocess.Popen` as `RemoteWriter` uses. It
    is the zygote's child: its exit code is not this process's to read (0 once it is gone)."""

    def __init__(self, pid: int, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout

    def poll(self) -> int | None:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return 0
        except PermissionError:
            return 0  # the pid now belongs to someone else's process
        return None

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(MODULE, timeout or 0.0)
            time.sleep(0.02)
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


def start(fork: Fork | None, uri: str, artifact_root: str | None) -> ForkedWriter | None:
    """The writer, forked through `fork` with this process's sys.path; None if not forked."""
    if fork is None:
        return None
    to_child, child_in = os.pipe()[::-1]  # (write end, read end)
    child_out, from_child = os.pipe()[::-1]
    try:
        argv = [json.dumps(sys.path), uri, artifact_root or ""]
        pid = fork(MODULE, argv, [child_in, child_out, 2])
    except Exception:
        pid = None
    finally:
        os.close(child_in)  # the child has its own copies: EOF reaches each side as it should
        os.close(child_out)
    if pid is None:
        os.close(to_child)
        os.close(from_child)
        return None
    return ForkedWriter(pid, os.fdopen(to_child, "wb"), os.fdopen(from_child, "rb"))
