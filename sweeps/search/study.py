"""The Optuna adapter: every use of Optuna's private names lives in this module.

Opening storages (with outage retries and SQLite pragmas), creating/loading studies, and the
handful of operations ask/tell does not offer publicly: writing to a trial by id, telling a
trial as `optimize()` would (so a sampler may stop the study), failing a trial left behind.
Pinned to the Optuna versions tested (pyproject's upper bound); `tests/test_adapters.py` fails
loudly when an upgrade moves a name used here. Only the driver writes through these functions.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from sweeps.common import names
from sweeps.common.errors import NotFoundError, ServiceError, SpecError, keep_end, one_line
from sweeps.common.paths import ensure_local_dirs
from sweeps.common.redact import mask_url
from sweeps.search.outage import outage_tolerant

if TYPE_CHECKING:
    import optuna

    from sweeps.spec import Spec

# The Optuna releases this adapter was written and tested against (pyproject pins the same).
OPTUNA_TESTED = ("5.0", "5.2")  # >= first, < second


def open_storage(url: str) -> Any:
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
        raise ServiceError(f"Optuna storage {mask_url(url)} is unusable: {one_line(e)}") from None
    except ValueError as e:
        raise SpecError(f"storage: {one_line(e)}") from None


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


def open_study(spec: Spec, storage: str | Any) -> optuna.Study:
    """Create the sweep's study, or load it to continue / join it. `storage` is a URL, or an
    Optuna storage object (an in-memory one in the driver's unit tests)."""
    import optuna

    from sweeps.search.samplers import make_pruner, make_sampler

    if isinstance(storage, str):
        storage = open_storage(storage)
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
        raise SpecError(f"objective: {one_line(e)}") from None
    have = [d.name.lower() for d in study.directions]
    if have != directions:
        raise SpecError(
            f"objective.direction: sweep '{spec.name}' exists with directions {have}; "
            "use another --name"
        )
    attrs = study.user_attrs
    metrics = [o.metric for o in objectives]
    prev = attrs.get(names.OBJECTIVES) or (
        [attrs[names.OBJECTIVE]] if attrs.get(names.OBJECTIVE) else None
    )
    if prev and prev != metrics:
        raise SpecError(
            f"objective.metric: sweep '{spec.name}' exists optimizing {prev}; use another --name"
        )
    if not prev:
        study.set_user_attr(names.OBJECTIVE, metrics[0])
        study.set_user_attr(names.OBJECTIVES, metrics)
        study.set_user_attr(names.CREATED, time.time())
    return study


# What open_study writes into a study it creates: with nothing else, the study is unused.
_CREATED_ATTRS = {names.OBJECTIVE, names.OBJECTIVES, names.CREATED}


def delete_if_unused(study: optuna.Study) -> bool:
    """Delete a study that holds only what `open_study` wrote when it created it."""
    import optuna

    if study.get_trials(deepcopy=False) or set(study.user_attrs) - _CREATED_ATTRS:
        return False
    optuna.delete_study(study_name=study.study_name, storage=study._storage)
    return True


def load_study(name: str, storage_url: str) -> optuna.Study:
    """Read-only access for show/ls/report; unknown names are the user's typo (exit 2)."""
    import optuna

    path = storage_url.removeprefix("sqlite:///")
    if path != storage_url and not os.path.exists(path):
        # Reading must not create the database: that would race the driver creating it.
        raise NotFoundError(f"no sweep named '{name}' in {mask_url(storage_url)} (no sweeps yet)")
    storage = open_storage(storage_url)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        known = [s.study_name for s in storage.get_all_studies()]
        hint = f" (known: {', '.join(known[:10])})" if known else " (no sweeps yet)"
        raise NotFoundError(f"no sweep named '{name}' in {mask_url(storage_url)}{hint}") from None


_UNCOUNTED = (names.REQUEUED, names.WARM_COUNT)


def counted_trials(study: optuna.Study) -> int:
    """Trials that use up the budget: all but the waiting ones and the re-queued stale ones.
    On an RDB storage one COUNT query: Optuna's `get_n_trials` re-reads the running trials and
    sorts the whole study (6 ms at 300 trials, before every launch)."""
    import optuna

    S = optuna.trial.TrialState  # noqa: N806
    states = (S.COMPLETE, S.PRUNED, S.FAIL, S.RUNNING)
    storage, sid = study._storage, study._study_id
    backend = getattr(storage, "_backend", storage)
    if isinstance(backend, optuna.storages.RDBStorage):
        url = str(backend.engine.url)
        n, attrs = outage_tolerant(_rdb_count, url)(backend, sid, states)
    else:
        n, attrs = storage.get_n_trials(sid, states), storage.get_study_user_attrs(sid)
    return n - sum(int(attrs.get(k, 0)) for k in _UNCOUNTED)


def _rdb_count(backend: Any, sid: int, states: tuple[Any, ...]) -> tuple[int, dict[str, Any]]:
    import json

    import sqlalchemy
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    with _create_scoped_session(backend.scoped_session) as session:
        t, a = models.TrialModel, models.StudyUserAttributeModel
        count = session.query(sqlalchemy.func.count(t.trial_id))
        n = count.filter(t.study_id == sid, t.state.in_(states)).scalar()
        rows = session.query(a).filter(a.study_id == sid, a.key.in_(_UNCOUNTED)).all()
        attrs = {r.key: json.loads(r.value_json) for r in rows}
    return int(n or 0), attrs


def fresh_study_attrs(study: optuna.Study) -> dict[str, Any]:
    """The study's user attrs read from the database now (Optuna's cached copy can lag another
    process's write, such as `sweeps stop`)."""
    return study._storage.get_study_user_attrs(study._study_id)


def storage_engine(study: optuna.Study) -> Any:
    """The SQLAlchemy engine behind a study's RDB storage (None for other storages)."""
    backend = getattr(study._storage, "_backend", study._storage)
    return getattr(backend, "engine", None)


def trial_id(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """The storage's id of a trial (ask/tell exposes only its number)."""
    return trial._trial_id


def trial_number(study: optuna.Study, tid: int) -> int:
    """A trial's number from its storage id."""
    return study._storage.get_trial_number_from_id(tid)


def trials_numbered(study: optuna.Study, numbers: Iterable[int]) -> list[Any]:
    """The trials of `numbers` read one by one (finished ones from Optuna's cache), not the
    study's whole list, which Optuna sorts anew on each read."""
    storage, sid = study._storage, study._study_id
    ids = [storage.get_trial_id_from_study_id_trial_number(sid, n) for n in sorted(numbers)]
    return [storage.get_trial(tid) for tid in ids]


def run_id_of(study_attrs: dict[str, Any], trial: Any) -> str | None:
    """A trial's MLflow run id: on the trial, or (its run was created after it finished) kept
    in the study under `sweeps.run_of_trial.N`."""
    return trial.user_attrs.get("mlflow_run_id") or study_attrs.get(
        names.run_of_trial(trial.number)
    )


def set_trial_attr(study: optuna.Study, tid: int, key: str, value: Any) -> None:
    """A user attr on a trial by id: works on finished trials too, unlike `Trial.set_user_attr`."""
    study._storage.set_trial_user_attr(tid, key, value)


def ask(study: optuna.Study, user_attrs: dict[str, Any]) -> optuna.Trial:
    """`study.ask()`, with `user_attrs` on the new trial, in one transaction on an RDB storage.
    Optuna's ask scans the WAITING trials (O(trials), a fifth of the driver's time per tiny
    trial), then writes each attr on its own. With no WAITING trial (one COUNT says so) the
    trial is made from a template holding the attrs; popping an enqueued trial is Optuna's job.
    An enqueue by another driver just after the count waits for the next ask."""
    import optuna

    S = optuna.trial.TrialState  # noqa: N806
    storage, sid = study._storage, study._study_id
    backend = getattr(storage, "_backend", storage)
    if isinstance(backend, optuna.storages.RDBStorage):
        url = str(backend.engine.url)
        waiting, _ = outage_tolerant(_rdb_count, url)(backend, sid, (S.WAITING,))
        if not waiting:
            template = optuna.trial.create_trial(state=S.RUNNING, user_attrs=user_attrs)
            study._thread_local.cached_all_trials = None  # as ask: sync once every trial
            tid = storage.create_new_trial(sid, template_trial=template)
            return _new_trial(study, tid, template)
    trial = study.ask()
    set_trial_attrs(study, trial._trial_id, user_attrs)
    return trial


def _new_trial(study: optuna.Study, tid: int, template: Any) -> optuna.Trial:
    """`optuna.Trial(study, tid)` for a trial just made from `template`, without the read-back
    of a RUNNING trial in its `__init__` (six queries, ~9% of the driver's time per tiny trial):
    the frozen trial is the copy `RDBStorage._create_new_trial` built, with number, id, start."""
    import copy

    import optuna
    from optuna import pruners

    ids = getattr(study._storage, "_trial_id_to_study_id_and_number", {})  # _CachedStorage's
    if tid not in ids:
        return optuna.Trial(study, tid)
    frozen = copy.deepcopy(template)
    frozen.number, frozen._trial_id = ids[tid][1], tid
    trial = optuna.Trial.__new__(optuna.Trial)  # what Trial.__init__ does (Optuna 5.1)
    trial.study, trial._trial_id, trial.storage = study, tid, study._storage
    trial._cached_frozen_trial = frozen
    study.sampler.before_trial(pruners._filter_study(study, frozen), frozen)
    trial.relative_search_space, trial._relative_params = None, None
    trial._fixed_params = frozen.system_attrs.get("fixed_params", {})
    return trial


def set_trial_attrs(study: optuna.Study, tid: int, attrs: dict[str, Any]) -> None:
    """Several user attrs on a trial in one transaction (one upsert on SQLite and PostgreSQL):
    Optuna commits each on its own, and a trial's end writes four."""
    import optuna

    backend = getattr(study._storage, "_backend", study._storage)
    if not attrs:
        return
    if not isinstance(backend, optuna.storages.RDBStorage):
        for k, v in attrs.items():
            study._storage.set_trial_user_attr(tid, k, v)
        return
    import json
    import sqlite3

    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session
    from sqlalchemy.dialects import postgresql, sqlite

    model = models.TrialUserAttributeModel
    dialect = {"sqlite": sqlite, "postgresql": postgresql}.get(backend.engine.name)
    if backend.engine.name == "sqlite" and sqlite3.sqlite_version_info < (3, 24, 0):
        dialect = None  # no upsert in this SQLite

    def write() -> None:
        with _create_scoped_session(backend.scoped_session, True) as session:
            if dialect is None:  # MySQL and the rest: Optuna's own upsert, attr by attr
                for k, v in attrs.items():
                    backend._set_trial_attr_without_commit(session, model, tid, k, v)
                return
            trial = models.TrialModel.find_or_raise_by_id(tid, session)
            backend.check_trial_is_updatable(tid, trial.state)
            rows = [
                {"trial_id": tid, "key": k, "value_json": json.dumps(v)} for k, v in attrs.items()
            ]
            stmt = dialect.insert(model).values(rows)
            stmt = stmt.on_conflict_do_update(
                index_elements=[model.trial_id, model.key],
                set_={"value_json": stmt.excluded.value_json},
            )
            session.execute(stmt)

    outage_tolerant(write, str(backend.engine.url))()


def fail_trial(study: optuna.Study, tid: int, error: str) -> bool:
    """Mark a trial FAIL with its error; False if it had finished meanwhile (not ours to fail)."""
    import optuna

    try:
        study._storage.set_trial_user_attr(tid, names.ERROR, keep_end(error))
        study._storage.set_trial_state_values(tid, optuna.trial.TrialState.FAIL)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    return True


def tell(study: optuna.Study, trial: optuna.Trial, values: Any = None, state: Any = None) -> bool:
    """`study.tell` as inside `optimize()`, returning whether the sampler stopped the study.

    Samplers that end the search themselves (grid, once every point was tried) call
    `study.stop()`, which only works inside optimize(); this sets the same flag Optuna does.
    A trial already finished in the storage (a commit that went through just before the
    connection dropped, then retried) is not an error.
    """
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.study._tell import _tell_with_warning

    local = study._thread_local
    before = getattr(local, "in_optimize_loop", False)
    local.in_optimize_loop = True
    try:
        # `study.tell` less its last line, which reads the told trial back from the database
        # (six queries) to return a copy nobody here uses.
        _tell_with_warning(study, trial, values, state)
    except UpdateFinishedTrialError:
        logging.getLogger(__name__).warning("trial %s was finished already", trial.number)
    finally:
        local.in_optimize_loop = before
    return bool(getattr(study, "_stop_flag", False))


def distribution_contains(dist: Any, value: Any) -> bool:
    """Whether an Optuna distribution holds `value` (warm start checks old trials with it)."""
    try:
        return bool(dist._contains(dist.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False
