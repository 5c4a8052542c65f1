"""A user's script as a child process in its own process group, its output streamed line by line.

Used by program mode on every worker. The child gets a session of its own, so stopping it
(SIGTERM, then SIGKILL after a grace period) reaches whatever it started too (DataLoader workers,
shell pipelines); on Linux it also dies with the worker thread that started it, so a worker that
Ray kills leaves no orphan training behind.
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import Any, TextIO

TAIL_LINES = 50
MAX_LINE = 1000  # characters of one stderr line kept for the trial's error


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent thread goes (Linux PR_SET_PDEATHSIG)."""
    if _LIBC is not None:
        _LIBC.prctl(1, int(signal.SIGKILL))


_LIBC: Any = None
if sys.platform.startswith("linux"):
    try:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - no libc to talk to
        _LIBC = None


class Script:
    """Start `argv`; copy its stdout/stderr to ours; queue every line when `collect` is set."""

    def __init__(self, argv: list[str], cwd: str, env: dict[str, str], collect: bool) -> None:
        self.argv = argv
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.lines: queue.Queue[str] | None = queue.Queue() if collect else None
        try:
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                errors="replace",
                bufsize=1,
                start_new_session=True,
                preexec_fn=_die_with_parent if _LIBC is not None else None,  # noqa: PLW1509
            )
        except (FileNotFoundError, PermissionError) as e:
            msg = f"trainer.command: cannot start {argv[0]}: {e.strerror}"
            raise FileNotFoundError(msg) from None
        self.pgid = self.proc.pid  # a new session: the group id is the child's pid
        self.pumps = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, "stdout"), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, "stderr"), daemon=True),
        ]
        for t in self.pumps:
            t.start()

    def _pump(self, stream: TextIO, name: str) -> None:
        for line in stream:
            # Looked up per line: the worker swaps sys.stdout for a tee into the trial's log.
            out = getattr(sys, name)
            try:
                out.write(line)
                out.flush()
            except (ValueError, OSError):
                pass  # our own stream closed: keep draining so the child never blocks
            if name == "stderr":
                self.tail.append(line.rstrip("\n")[:MAX_LINE])
            if self.lines is not None:
                self.lines.put(line.rstrip("\n"))

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def drain(self, timeout: float) -> list[str]:
        """Lines printed since the last call, waiting up to `timeout` for the first."""
        if self.lines is None:
            time.sleep(timeout)
            return []
        out = []
        try:
            out.append(self.lines.get(timeout=timeout))
            while True:
                out.append(self.lines.get_nowait())
        except queue.Empty:
            pass
        return out

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, grace_s: float) -> None:
        """SIGTERM the group, SIGKILL it after `grace_s`; then collect the output threads."""
        if self.proc.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.close()

    def close(self) -> None:
        """After the child ended: nothing of its group outlives it, and its output is all read."""
        if self.proc.poll() is None:
            self._signal_group(signal.SIGKILL)
            self.proc.wait()
        for t in self.pumps:
            t.join(timeout=2)
        # A grandchild that kept the pipes open would keep the pumps (and itself) alive.
        self._signal_group(signal.SIGKILL)
        for t in self.pumps:
            t.join(timeout=5)

    def stderr_tail(self) -> str:
        return "\n".join(self.tail)
