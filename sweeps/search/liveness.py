"""Which drivers are alive, and the study-wide signals between them: heartbeats, stale trials
left by a dead driver (optuna#3215), `sweeps stop` / `cancel` requests, and the launch lock
that keeps several drivers of one study inside its trial budget.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from sweeps.common import names
from sweeps.search.outage import outage_tolerant
from sweeps.search.study import storage_engine

if TYPE_CHECKING:
    import optuna

HEARTBEAT_S = 10.0
STALE_AFTER_S = 45.0


def heartbeat(
    study: optuna.Study, driver_id: str, alive: bool = True, session: dict[str, Any] | None = None
) -> None:
    """`session`: the driver's session facts (`sweeps.common.figures.session`), kept with it."""
    beat = {"t": time.time() if alive else 0, "host": socket.gethostname(), "pid": os.getpid()}
    study.set_user_attr(names.driver_beat(driver_id), {**beat, **(session or {})})


def _alive(beat: object, now: float) -> bool:
    """A driver is alive while it beats; on this host a vanished PID is dead at once."""
    if not isinstance(beat, dict) or now - float(beat.get("t", 0)) >= STALE_AFTER_S:
        return False
    if beat.get("host") == socket.gethostname():
        try:
            os.kill(int(beat["pid"]), 0)
        except ProcessLookupError:
            return False
        except (PermissionError, KeyError, ValueError, TypeError):
            pass
    return True


def live_drivers(
    study: optuna.Study, now: float | None = None, attrs: dict[str, Any] | None = None
) -> set[str]:
    """The drivers beating now; `attrs`: the study's user attrs, where the caller read them."""
    now = now or time.time()
    return {
        k.removeprefix(names.DRIVER_PREFIX)
        for k, v in (study.user_attrs if attrs is None else attrs).items()
        if k.startswith(names.DRIVER_PREFIX) and _alive(v, now)
    }


def stale_running(study: optuna.Study, me: str) -> list[optuna.trial.FrozenTrial]:
    """RUNNING trials whose driver stopped beating: left behind by a crash (optuna#3215)."""
    import optuna

    now = time.time()
    live = live_drivers(study, now) - {me}
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))

    def stale(t: optuna.trial.FrozenTrial) -> bool:
        owner = t.user_attrs.get(names.DRIVER)
        if owner is None:  # asked a moment ago, not yet claimed; or its driver died right then
            start = t.datetime_start.timestamp() if t.datetime_start else 0.0
            return now - start >= STALE_AFTER_S
        return owner not in live

    return [t for t in running if stale(t)]


class Request(StrEnum):
    """What `sweeps stop` / `sweeps cancel` asked of a sweep's drivers."""

    INTERRUPT = "interrupt"  # `sweeps down`: stop running trials now, the sweep is resumable
    CANCEL = "cancel"  # stop running trials now
    PAUSE = "pause"  # park running trials at a checkpoint, start no more; resumable
    STOP = "stop"  # finish running trials, start no more


def requested(study: optuna.Study, since: float) -> Request | None:
    """`sweeps stop` / `sweeps cancel` write a timestamp into the study; drivers poll for it.
    Only requests made after `since` count; a cancel outranks a pause, a pause a stop."""
    from sweeps.search import bulk

    kinds = (Request.INTERRUPT, Request.CANCEL, Request.PAUSE, Request.STOP)
    # These keys only, read now: the whole study's attrs every poll was 10% of a driver's
    # time at 2,000 trials (a study may hold an attr per trial).
    attrs = bulk.study_attrs(study, tuple(names.requested(k) for k in kinds))
    for kind in kinds:
        ts = attrs.get(names.requested(kind))
        if isinstance(ts, int | float) and ts >= since:
            return kind
    return None


_THREAD_LOCK = threading.Lock()


@contextmanager
def launch_lock(study: optuna.Study) -> Iterator[None]:
    """Serialize "is there budget left? then ask" across drivers sharing a study, so that
    several drivers (or threads) finish exactly the budget instead of overshooting it.

    PostgreSQL: a session advisory lock keyed by the study. SQLite: a lock file next to the
    database (drivers on one machine). Other backends: no lock (a possible overshoot of one
    trial per extra driver).
    """
    engine = storage_engine(study)
    url = str(engine.url) if engine is not None else ""
    with _THREAD_LOCK:
        if url.startswith("postgresql"):
            import sqlalchemy

            key = zlib.crc32(f"sweeps:{study.study_name}".encode()) & 0x7FFFFFFF

            def locked() -> Any:
                conn = engine.connect()
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
                return conn

            with outage_tolerant(locked, url)() as conn:
                try:
                    yield
                finally:
                    try:
                        conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                        conn.commit()
                    except sqlalchemy.exc.SQLAlchemyError:
                        pass  # the connection died: PostgreSQL dropped its lock with it
        elif url.startswith("sqlite") and engine.url.database:
            import filelock

            with filelock.FileLock(f"{engine.url.database}.sweeps-lock"):
                yield
        else:
            yield


class Pulse:
    """A driver's periodic contact with its study: a heartbeat every HEARTBEAT_S, and a look for
    `sweeps stop` / `cancel` requests every `poll_s` (both are database round trips)."""

    def __init__(
        self,
        study: optuna.Study,
        driver_id: str,
        since: float,
        poll_s: float = 2.0,
        session: Callable[[], dict[str, Any]] | None = None,
    ):
        self.study, self.driver_id, self.since, self.poll_s = study, driver_id, since, poll_s
        self.session = session or dict
        self._beat = self._polled = 0.0

    def tick(self, now: float) -> Request | None:
        """Beat if due; returns what a person asked of the sweep, if anything."""
        if now - self._beat > HEARTBEAT_S:
            heartbeat(self.study, self.driver_id, session=self.session())
            self._beat = now
        if now - self._polled > self.poll_s:
            self._polled = now
            return requested(self.study, self.since)
        return None
