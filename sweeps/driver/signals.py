"""Signal handlers for the time a sweep runs: Ctrl-C and SIGTERM go to the driver, and the
handlers from before come back once it ends (a Ctrl-C after the sweep must interrupt the
program, not a driver that is done)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable


def install(
    on_interrupt: Callable[[], None], on_terminate: Callable[[], None]
) -> Callable[[], None]:
    """Route SIGINT and SIGTERM; returns what restores the previous handlers. Only the main
    thread may set handlers: elsewhere (a notebook's worker thread) this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    saved = {
        signal.SIGINT: signal.signal(signal.SIGINT, lambda *_: on_interrupt()),
        signal.SIGTERM: signal.signal(signal.SIGTERM, lambda *_: on_terminate()),
    }

    def restore() -> None:
        for sig, handler in saved.items():
            signal.signal(sig, handler)

    return restore
