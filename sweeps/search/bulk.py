"""Every trial of a study read in a few SQL statements, for `show` and `ls` (an adapter over
Optuna's RDB tables, beside `search/study.py`; pinned the same way).

Optuna's `get_trials` builds each trial through the ORM with its params, values, attrs and
intermediate values: on 10,000 trials that is about 100,000 mapped rows, seconds of a
command that should answer in one. `show` and `ls` need neither the intermediate values nor the
sampler's system attrs (TPE stores its relative params on every trial), so this reads the five
tables they use with plain SELECTs and builds light trials with the FrozenTrial attributes
`sweeps.queries` reads: number, state, value(s), params, user_attrs, constraints and the two
datetimes (naive local time, as Optuna gives them). Other storages: Optuna's own read.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from typing import Any

_CONSTRAINTS = "constraints"  # Optuna's system-attr key (and "constraints:NAME" prefix)


@dataclass(slots=True)
class LightTrial:
    """The part of an Optuna FrozenTrial that `show` and `ls` read."""

    number: int
    state: Any  # optuna.trial.TrialState
    values: list[float] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    user_attrs: dict[str, Any] = field(default_factory=dict)
    constraint_attrs: dict[str, Any] = field(default_factory=dict)
    datetime_start: datetime.datetime | None = None
    datetime_complete: datetime.datetime | None = None
    _trial_id: int = 0

    @property
    def value(self) -> float | None:
        return self.values[0] if self.values and len(self.values) == 1 else None

    @property
    def constraints(self) -> dict[str, float]:
        if not self.constraint_attrs:  # most trials: no import, no call (10,000 per `show`)
            return {}
        from optuna.study._constrained_optimization import _get_constraints_from_system_attrs

        return _get_constraints_from_system_attrs(self.constraint_attrs)


def trials(
    study: Any,
    user_keys: tuple[str, ...] | None = None,
    params: bool = True,
    skip_keys: tuple[str, ...] = (),
) -> list[Any]:
    """The study's trials in number order: light ones on an RDB storage, else Optuna's.
    `user_keys`: read only these user attrs (all when None), less `skip_keys`;
    `params=False`: no params."""
    where = _rdb(study)
    if where is None:
        return study.get_trials(deepcopy=False)
    from sweeps.search.outage import outage_tolerant

    rows, sid = where
    return outage_tolerant(_read, rows.url)(rows, sid, user_keys, params, skip_keys)


def study_attrs(study: Any, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The study's user attrs (`keys` only, where given), read now in one plain SELECT.
    Optuna maps each row through the ORM and deep-copies the result, uncached (0.3-0.45 s a
    read for a study holding one attr per trial, as `checkpoints:` retention keeps)."""
    where = _rdb(study)
    if where is None:
        attrs = study.user_attrs
        return attrs if keys is None else {k: attrs[k] for k in keys if k in attrs}
    from sweeps.search.outage import outage_tolerant

    rows, sid = where
    return outage_tolerant(_read_attrs, rows.url)(rows, sid, keys)


def study_names(storage: Any) -> list[str]:
    """Every study's name, in the order Optuna's `get_all_studies` lists them. That call also
    reads each study's user and system attrs through the ORM: 0.4 s of an `ls` beside one
    10,000-trial sweep, for names alone."""
    rows = getattr(storage, "rows", None)  # `reader`'s light store
    if rows is None:
        backend = getattr(storage, "_backend", storage)
        if getattr(backend, "engine", None) is None:
            return [s.study_name for s in storage.get_all_studies()]
        from sweeps.search.sql_rows import EngineRows

        rows = EngineRows(backend.engine)
    from sweeps.search import optuna_tables as ot
    from sweeps.search.outage import outage_tolerant

    return [name for (name,) in outage_tolerant(rows, rows.url)(ot.STUDY_NAMES)]


def _rdb(study: Any) -> tuple[Any, int] | None:
    """The rows of the database behind a study (`reader`'s, or over Optuna's engine) and its
    id there; None for a storage that is no database."""
    if getattr(study, "rows", None) is not None:  # `reader.LightStudy`
        return study.rows, study.study_id
    backend = getattr(study._storage, "_backend", study._storage)
    engine = getattr(backend, "engine", None)
    if engine is None:
        return None
    from sweeps.search.sql_rows import EngineRows

    return EngineRows(engine), study._study_id


def _read_attrs(rows: Any, sid: int, keys: tuple[str, ...] | None) -> dict[str, Any]:
    from sweeps.search import optuna_tables as ot
    from sweeps.search.sql_rows import in_list

    if keys is not None and not keys:
        return {}
    sql, args = ot.STUDY_ATTRS.format(key=rows.key), {}
    if keys is not None:
        listed, args = in_list("k", keys)
        sql += f" AND {rows.key} IN {listed}"
    return {key: json.loads(value_json) for key, value_json in rows(sql, sid=sid, **args)}


_OFFSETS: dict[tuple[int, ...], datetime.timedelta] = {}  # UTC minute: local UTC offset


def _local(utc: datetime.datetime | str | None) -> datetime.datetime | None:
    """Optuna stores naive UTC and returns naive local time. The offset is looked up once per
    minute of UTC time (zones change offset on whole minutes): 20,000 datetimes per `show`.
    SQLite's rows hold the text SQLAlchemy wrote (ISO 8601, a space between date and time)."""
    if utc is None:
        return None
    if isinstance(utc, str):
        utc = datetime.datetime.fromisoformat(utc)
    key = (utc.year, utc.month, utc.day, utc.hour, utc.minute)
    off = _OFFSETS.get(key)
    if off is None:
        local = utc.replace(tzinfo=datetime.UTC).astimezone()
        off = _OFFSETS[key] = local.utcoffset() or datetime.timedelta(0)
    return utc + off


def _read(
    rows: Any,
    sid: int,
    user_keys: tuple[str, ...] | None,
    params: bool = True,
    skip_keys: tuple[str, ...] = (),
) -> list[LightTrial]:
    from sweeps.search import optuna_tables as ot
    from sweeps.search.sql_rows import in_list

    by_id: dict[int, LightTrial] = {}
    for tid, number, state, start, end in rows(ot.TRIALS, sid=sid):
        by_id[tid] = LightTrial(number, ot.state(state), None, {}, {}, {}, _local(start),
                                _local(end), tid)  # fmt: skip
    # Each read is its own statement: a trial created after the first has rows, and no entry.
    for tid, objective, value, vtype in rows(ot.VALUES, sid=sid):
        if (tr := by_id.get(tid)) is None:
            continue
        tr.values = tr.values or []
        tr.values.extend([0.0] * (objective + 1 - len(tr.values)))
        tr.values[objective] = ot.value(value, vtype)
    if params:
        external = ot.Params().external
        for tid, name, value, dist_json in rows(ot.PARAMS, sid=sid):  # in suggestion order
            if tid in by_id:
                by_id[tid].params[name] = external(dist_json, value)
    if user_keys is None or user_keys:
        sql, args = ot.USER_ATTRS.format(key=rows.key), {}
        if user_keys is not None:
            listed, args = in_list("u", user_keys)
            sql += f" AND {rows.key} IN {listed}"
        if skip_keys:
            listed, skip = in_list("s", skip_keys)
            sql, args = sql + f" AND {rows.key} NOT IN {listed}", {**args, **skip}
        for tid, key, value_json in rows(sql, sid=sid, **args):
            if tid in by_id:
                by_id[tid].user_attrs[key] = json.loads(value_json)
    like = ot.SYSTEM_ATTRS_LIKE.format(key=rows.key)
    for tid, key, value_json in rows(like, sid=sid, like=f"{_CONSTRAINTS}%"):
        if tid in by_id:
            by_id[tid].constraint_attrs[key] = json.loads(value_json)
    return sorted(by_id.values(), key=lambda tr: tr.number)


def _state(stored: Any) -> Any:
    from optuna.trial import TrialState

    return stored if isinstance(stored, TrialState) else TrialState[str(stored)]


def _vtype(stored: Any) -> Any:
    from optuna.storages._rdb import models as m

    kind = m.TrialValueModel.TrialValueType
    return stored if isinstance(stored, kind) else kind[str(stored)]


def speed_up(study: Any) -> None:
    """The driver's study reads its new and running trials with plain SELECTs.

    Optuna's caching storage re-reads a study's unfinished trials and the new ones before each
    ask and each pruning decision (`RDBStorage._get_trials`): six ORM queries with
    `selectinload`, about 8 ms a read on a loaded 2-CPU machine, twice per trial. The same five
    tables read with SQLAlchemy Core build the same FrozenTrials (`Optuna's
    _build_frozen_trial_from_trial_model` field by field). `tell` reads the running trial back
    the same way (`RDBStorage.get_trial`). Other storages are left alone."""
    import optuna

    backend = getattr(study._storage, "_backend", None)
    if not isinstance(backend, optuna.storages.RDBStorage):
        return
    from sweeps.search.outage import outage_tolerant

    def get_trials(sid: int, states: Any, included_trial_ids: set[int], trial_id_greater_than: int):
        return frozen_trials(backend.engine, sid, states, included_trial_ids, trial_id_greater_than)

    def get_trial(trial_id: int) -> Any:  # a running trial's read-back, as `tell` does
        from optuna.storages._rdb import models

        got = frozen_trials(backend.engine, None, None, set(), -1, trial_id)
        if not got:
            raise KeyError(models.NOT_FOUND_MSG)
        return got[0]

    url = str(backend.engine.url)
    backend._get_trials = outage_tolerant(get_trials, url)
    backend.get_trial = outage_tolerant(get_trial, url)


def frozen_trials(
    engine: Any,
    sid: int | None,
    states: Any,
    included: set[int],
    greater_than: int,
    trial_id: int | None = None,
) -> list[Any]:
    """`RDBStorage._get_trials(sid, states, included_trial_ids, trial_id_greater_than)`, or
    the one trial `trial_id` (`RDBStorage.get_trial`)."""
    import sqlalchemy as sa
    from optuna.distributions import json_to_distribution
    from optuna.storages._rdb import models as m

    included = {i for i in included if i <= greater_than}
    t = m.TrialModel.__table__
    q = sa.select(t.c.trial_id, t.c.number, t.c.state, t.c.datetime_start, t.c.datetime_complete)
    if trial_id is not None:
        q = q.where(t.c.trial_id == trial_id)
    if sid is not None:
        q = q.where(t.c.study_id == sid)
    if states is not None:
        q = q.where(t.c.state.in_(list(states)))
    if included and greater_than > -1:
        q = q.where(sa.or_(t.c.trial_id.in_(included), t.c.trial_id > greater_than))
    elif greater_than > -1:
        q = q.where(t.c.trial_id > greater_than)
    with engine.connect() as conn:
        rows = conn.execute(q.order_by(t.c.trial_id)).all()
        if not rows:
            return []
        ids = [r[0] for r in rows]
        parts = {tid: ([], {}, {}, {}, {}) for tid in ids}  # values, params, user, system, steps
        v = m.TrialValueModel.__table__
        for tid, obj, val, vt in conn.execute(
            sa.select(v.c.trial_id, v.c.objective, v.c.value, v.c.value_type)
            .where(v.c.trial_id.in_(ids))
            .order_by(v.c.objective)
        ):
            parts[tid][0].append((obj, m.TrialValueModel.stored_repr_to_value(val, _vtype(vt))))
        p = m.TrialParamModel.__table__
        dists: dict[str, Any] = {}
        for tid, name, val, dj in conn.execute(
            sa.select(p.c.trial_id, p.c.param_name, p.c.param_value, p.c.distribution_json)
            .where(p.c.trial_id.in_(ids))
            .order_by(p.c.param_id)
        ):
            if dj not in dists:
                dists[dj] = json_to_distribution(dj)
            parts[tid][1][name] = (dists[dj], val)
        for model, slot in ((m.TrialUserAttributeModel, 2), (m.TrialSystemAttributeModel, 3)):
            a = model.__table__
            q = sa.select(a.c.trial_id, a.c.key, a.c.value_json).where(a.c.trial_id.in_(ids))
            for tid, key, vj in conn.execute(q):
                parts[tid][slot][key] = json.loads(vj)
        iv = m.TrialIntermediateValueModel.__table__
        ivm = m.TrialIntermediateValueModel
        for tid, step, val, vt in conn.execute(
            sa.select(iv.c.trial_id, iv.c.step, iv.c.intermediate_value,
                      iv.c.intermediate_value_type).where(iv.c.trial_id.in_(ids))
        ):  # fmt: skip
            parts[tid][4][step] = ivm.stored_repr_to_intermediate_value(val, _ivtype(vt))
    return _frozen(rows, parts)


def _frozen(rows: list[Any], parts: dict[int, tuple[Any, ...]]) -> list[Any]:
    from optuna.trial import FrozenTrial

    out = []
    for tid, number, state, start, end in rows:
        vals, params, user, system, steps = parts[tid]
        values = [0.0] * len(vals) if vals else None
        for obj, val in vals:
            values[obj] = val  # type: ignore[index]
        out.append(
            FrozenTrial(
                number=number,
                state=_state(state),
                value=None,
                values=values,
                datetime_start=_local(start),
                datetime_complete=_local(end),
                params={k: d.to_external_repr(x) for k, (d, x) in params.items()},
                distributions={k: d for k, (d, _) in params.items()},
                user_attrs=user,
                system_attrs=system,
                intermediate_values=steps,
                trial_id=tid,
            )
        )
    return out


def _ivtype(stored: Any) -> Any:
    from optuna.storages._rdb import models as m

    kind = m.TrialIntermediateValueModel.TrialIntermediateValueType
    return stored if isinstance(stored, kind) else kind[str(stored)]
