"""One ordered writer for a store that may blink: every write runs on one background thread,
in the order it was queued, retried with backoff; what still fails is kept and replayed at
`flush`, and only what fails even then is reported. Nothing is silently dropped.

The driver's loop never waits on it except through `call`, whose waiting time is counted in
`blocking_s` (the tracking overhead on the trials' critical path).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from sweeps.common.errors import one_line


class NotReady(Exception):  # noqa: N818
    """A write that depends on one that has not gone through yet (its run's creation): it is
    kept, in order, for the replay, without retrying on its own."""


def retry(fn: Callable[..., Any], *args: Any, attempts: int = 6, **kw: Any) -> Any:
    """Bounded retry: a tracking server that blinks must not lose a trial's record."""
    delay = 0.5
    for i in range(attempts):
        try:
            return fn(*args, **kw)
        except NotReady:
            raise
        except Exception:
            if i == attempts - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 10)
    return None


class OrderedWriter:
    def __init__(self, name: str = "writer") -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self.pending: list[Future[Any]] = []
        self.unsent: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], str]] = []
        self.errors: list[str] = []
        self.blocking_s = 0.0

    def submit(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Future[Any]:
        """Queue a write; returns at once."""
        fut = self.pool.submit(self._guarded, fn, *args, **kw)
        self.pending.append(fut)
        if len(self.pending) > 256:
            self._reap()
        return fut

    def call(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """Run a write in order and wait for its result (retried; raises if it still fails)."""
        t0 = time.perf_counter()
        try:
            return self.pool.submit(retry, fn, *args, **kw).result()
        finally:
            self.blocking_s += time.perf_counter() - t0

    def _guarded(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        try:
            return retry(fn, *args, **kw)
        except Exception as e:
            self.unsent.append((fn, args, kw, one_line(e, 200)))
            return None

    def _replay(self) -> None:
        pending, self.unsent = self.unsent, []
        for fn, args, kw, _ in pending:
            try:
                retry(fn, *args, attempts=3, **kw)
            except Exception as e:
                self.unsent.append((fn, args, kw, one_line(e, 200)))

    def _reap(self) -> None:
        keep = []
        for f in self.pending:
            if not f.done():
                keep.append(f)
            elif f.exception() is not None:
                self.errors.append(one_line(f.exception()))
        self.pending = keep

    def flush(self, timeout: float | None = 600) -> list[str]:
        """Wait for every queued write, replay the failed ones once more; returns the errors."""
        for f in list(self.pending):
            try:
                f.result(timeout=timeout)
            except Exception as e:
                self.errors.append(one_line(e))
        self.pending = []
        if self.unsent:
            self.pool.submit(self._replay).result()
        for fn, _, _, err in self.unsent:
            self.errors.append(f"{getattr(fn, '__name__', fn)} not written: {err}")
        self.unsent = []
        return list(self.errors)

    def close(self) -> None:
        self.flush()
        self.pool.shutdown(wait=True)
