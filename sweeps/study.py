"""The Optuna side: open a study in its storage, link it to MLflow, recover after a dead driver.

Only the driver calls the writing functions here (it is the one writer to Optuna).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sweeps.errors import NotFoundError, ServiceError, SpecError
from sweeps.paths import ensure_local_dirs

if TYPE_CHECKING:
    import optuna

    from sweeps.spec import Spec

HEARTBEAT_S = 10.0
STALE_AFTER_S = 45.0


def _storage(url: str) -> Any:
    import sqlalchemy.exc

    ensure_local_dirs(url)
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs = {"connect_args": {"timeout": 30}}
    else:
        kwargs = {"pool_pre_ping": True}
    try:
        storage = _new_rdb_storage(url, kwargs)
        if url.startswith("sqlite"):
            _fast_sqlite(storage.engine)
        _ride_out_outages(storage, url)
        return storage
    except (sqlalchemy.exc.SQLAlchemyError, ImportError, ModuleNotFoundError) as e:
        raise ServiceError(f"Optuna storage {_safe(url)} is unusable: {_one_line(e)}") from None
    except ValueError as e:
        raise SpecError(f"storage: {_one_line(e)}") from None


# What a process loses when another one creates the same schema at the same moment (a
# `sweeps show` while the sweep starts, two drivers joining a new study): a CREATE TABLE, or
# the alembic_version row. By the next attempt the schema is there and creation is a no-op.
_SCHEMA_RACE = ("already exists", "unique constraint", "duplicate key", "database is locked")


def _new_rdb_storage(url: str, kwargs: dict[str, Any], patience_s: float = 20.0) -> Any:
    import optuna
    import sqlalchemy.exc

    deadline = time.monotonic() + patience_s
    while True:
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except sqlalchemy.exc.SQLAlchemyError as e:
            raced = any(m in str(e).lower() for m in _SCHEMA_RACE)
            if not raced or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


OUTAGE_S = float(os.environ.get("SWEEPS_STORAGE_OUTAGE_S", "300"))


def outage_tolerant(fn: Any, url: str) -> Any:
    """`fn`, retried with backoff while the database is unreachable (up to OUTAGE_S)."""
    import logging

    import sqlalchemy.exc
    from optuna.exceptions import StorageInternalError

    transient = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)
    log = logging.getLogger("sweeps.storage")

    def wrap(fn: Any) -> Any:
        def call(*args: Any, **kw: Any) -> Any:
            deadline, delay = time.monotonic() + OUTAGE_S, 0.5
            while True:
                try:
                    return fn(*args, **kw)
                except (*transient, StorageInternalError) as e:
                    # Optuna wraps a failed commit; only a lost connection underneath is ours
                    # to wait out, a bad value is not.
                    if isinstance(e, StorageInternalError) and not isinstance(
                        e.__cause__, transient
                    ):
                        raise
                    if time.monotonic() + delay > deadline:
                        raise ServiceError(
                            f"Optuna storage {_safe(url)} unreachable for {OUTAGE_S:g} s: "
                            f"{_one_line(e)}"
                        ) from None
                    cause = e.__cause__ or e
                    log.warning("Optuna storage unreachable, sweep paused: %s", _one_line(cause))
                    time.sleep(delay)
                    delay = min(delay * 2, 10.0)

        return call

    return wrap(fn)


def _ride_out_outages(storage: Any, url: str) -> None:
    """If the database goes away mid-sweep, the driver pauses and retries (bounded) instead of
    dying with trials in flight: a restarted PostgreSQL costs a pause, not a resume."""
    # Optuna's caching layer also calls a few private methods of the backend directly.
    private = (
        "_create_new_trial",
        "_get_trials",
        "_set_trial_param",
        "_get_best_trial_id",
        "_get_stale_trial_ids",
    )
    for name in dir(storage):
        public = name.startswith(("get_", "set_", "create_new_", "check_", "record_"))
        if (public or name in private) and callable(getattr(storage, name)):
            setattr(storage, name, outage_tolerant(getattr(storage, name), url))


def _fast_sqlite(engine: Any) -> None:
    """WAL + synchronous=NORMAL: a trial makes ~15 small Optuna writes, and with SQLite's
    default rollback journal each one waits on fsync. WAL keeps readers (`sweeps show` in
    another terminal) unblocked while the driver writes; NORMAL is still crash-safe in WAL."""
    import sqlalchemy

    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    sqlalchemy.event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections opened during set-up pick the pragmas up on reconnect


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:300]


def _safe(url: str) -> str:
    import re

    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)


def open_study(spec: Spec, storage_url: str) -> optuna.Study:
    """Create the sweep's study, or load it to continue / join it."""
    import optuna

    from sweeps.samplers import make_pruner, make_sampler

    storage = _storage(storage_url)
    sampler = make_sampler(spec)
    # Optuna's pruners are single-objective: a multi-objective study never prunes.
    pruner = make_pruner(spec.pruner) if not spec.multi_objective else optuna.pruners.NopPruner()
    objectives = spec.objective_list()
    directions = [o.direction for o in objectives]
    try:
        study = optuna.create_study(
            study_name=spec.name,
            storage=storage,
            sampler=sampler,
            pruner=pruner,
            directions=directions,
            load_if_exists=True,
        )
    except ValueError as e:
        raise SpecError(f"objective: {_one_line(e)}") from None
    have = [d.name.lower() for d in study.directions]
    if have != directions:
        raise SpecError(
            f"objective.direction: sweep '{spec.name}' exists with directions {have}; "
            "use another --name"
        )
    attrs = study.user_attrs
    names = [o.metric for o in objectives]
    prev = attrs.get("sweeps.objectives") or (
        [attrs["sweeps.objective"]] if attrs.get("sweeps.objective") else None
    )
    if prev and prev != names:
        raise SpecError(
            f"objective.metric: sweep '{spec.name}' exists optimizing {prev}; use another --name"
        )
    if not prev:
        study.set_user_attr("sweeps.objective", names[0])
        study.set_user_attr("sweeps.objectives", names)
        study.set_user_attr("sweeps.created", time.time())
    return study


def load_study(name: str, storage_url: str) -> optuna.Study:
    """Read-only access for show/ls/report; unknown names are the user's typo (exit 2)."""
    import optuna

    path = storage_url.removeprefix("sqlite:///")
    if path != storage_url and not os.path.exists(path):
        # Reading must not create the database: that would race the driver creating it.
        raise NotFoundError(f"no sweep named '{name}' in {_safe(storage_url)} (no sweeps yet)")
    storage = _storage(storage_url)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        known = [s.study_name for s in storage.get_all_studies()]
        hint = f" (known: {', '.join(known[:10])})" if known else " (no sweeps yet)"
        raise NotFoundError(f"no sweep named '{name}' in {_safe(storage_url)}{hint}") from None


def heartbeat(study: optuna.Study, driver_id: str, alive: bool = True) -> None:
    beat = {"t": time.time() if alive else 0, "host": socket.gethostname(), "pid": os.getpid()}
    study.set_user_attr(f"sweeps.driver.{driver_id}", beat)


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


def live_drivers(study: optuna.Study, now: float | None = None) -> set[str]:
    now = now or time.time()
    return {
        k.removeprefix("sweeps.driver.")
        for k, v in study.user_attrs.items()
        if k.startswith("sweeps.driver.") and _alive(v, now)
    }


def stale_running(study: optuna.Study, me: str) -> list[optuna.trial.FrozenTrial]:
    """RUNNING trials whose driver stopped beating: left behind by a crash (optuna#3215)."""
    import optuna

    now = time.time()
    live = live_drivers(study, now) - {me}
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))

    def stale(t: optuna.trial.FrozenTrial) -> bool:
        owner = t.user_attrs.get("sweeps.driver")
        if owner is None:  # asked a moment ago, not yet claimed; or its driver died right then
            start = t.datetime_start.timestamp() if t.datetime_start else 0.0
            return now - start >= STALE_AFTER_S
        return owner not in live

    return [t for t in running if stale(t)]


def counted_trials(study: optuna.Study) -> int:
    """Trials that use up the budget: all but the waiting ones and the re-queued stale ones."""
    import optuna

    S = optuna.trial.TrialState  # noqa: N806
    storage, sid = study._storage, study._study_id
    n = storage.get_n_trials(sid, (S.COMPLETE, S.PRUNED, S.FAIL, S.RUNNING))
    attrs = storage.get_study_user_attrs(sid)
    return n - int(attrs.get("sweeps.requeued", 0)) - int(attrs.get("sweeps.warm_count", 0))


def stop_requested(study: optuna.Study, since: float) -> bool:
    """`sweeps stop NAME` writes a timestamp into the study; drivers poll for it."""
    ts = study._storage.get_study_user_attrs(study._study_id).get("sweeps.stop_requested")
    return isinstance(ts, int | float) and ts >= since


_THREAD_LOCK = threading.Lock()


@contextmanager
def launch_lock(study: optuna.Study) -> Iterator[None]:
    """Serialize "is there budget left? then ask" across drivers sharing a study, so that
    several drivers (or threads) finish exactly the budget instead of overshooting it.

    PostgreSQL: a session advisory lock keyed by the study. SQLite: a lock file next to the
    database (drivers on one machine). Other backends: no lock (a possible overshoot of one
    trial per extra driver).
    """
    backend = getattr(study._storage, "_backend", study._storage)
    engine = getattr(backend, "engine", None)
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
            import fcntl

            with open(f"{engine.url.database}.sweeps-lock", "w") as f:
                fcntl.flock(f, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(f, fcntl.LOCK_UN)
        else:
            yield
