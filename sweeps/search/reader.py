"""An existing RDB storage opened for reading (`show`, `ls`, `compare`), without Optuna.

`RDBStorage(url)` imports Optuna, creates any missing table, writes the version row if absent
and checks the schema through alembic: 0.5 s of a `sweeps ls` that should answer in well under
a second. A reader needs none of that when the database already holds the schema of the
installed Optuna, which one SELECT of alembic's revision row says: it then reads with plain
SELECTs (`optuna_tables`, `bulk`, `sql_rows`: a SQLite file through the stdlib, PostgreSQL
through psycopg, no SQLAlchemy) a light study with what `queries` reads of one. Any other
database (no such row, another revision, a journal or in-memory storage) opens through Optuna,
so Optuna's own message about an old schema is what the user reads.
"""

from __future__ import annotations

import os
from typing import Any

from sweeps.common.errors import NotFoundError
from sweeps.common.redact import mask_url


def open_reader(url: str) -> Any:
    """A store to read `url` from: the light one where its schema is current, else Optuna's.
    Either has `names()` (every study, in Optuna's order) and `load(name)` (KeyError if none)."""
    if url.startswith(("sqlite:", "postgresql", "mysql")):
        light = _light(url)
        if light is not None:
            return light
    from sweeps.search.study import open_storage

    return _OptunaStore(open_storage(url))


class _LightStore:
    """A database with the installed Optuna's schema, read with plain SELECTs only."""

    def __init__(self, rows: Any) -> None:
        self.rows = rows

    def names(self) -> list[str]:
        from sweeps.search import bulk

        return bulk.study_names(self)

    def load(self, name: str) -> LightStudy:
        from sweeps.search import optuna_tables as ot

        got = self.rows(ot.STUDY_ID, name=name)
        if not got:
            raise KeyError(name)
        sid = got[0][0]
        dirs = [ot.Direction[str(x)] for (x,) in self.rows(ot.DIRECTIONS, sid=sid)]
        return LightStudy(name, sid, self, dirs)


class LightStudy:
    """What `queries` reads of an `optuna.Study`: its name, directions and user attrs; and
    where `bulk` reads its trials (the store's rows, the study's id there)."""

    def __init__(self, name: str, sid: int, store: _LightStore, directions: list[Any]) -> None:
        self.study_name, self.study_id, self.rows = name, sid, store.rows
        self.directions = directions

    @property
    def direction(self) -> Any:
        if len(self.directions) != 1:
            raise RuntimeError("a multi-objective study has no single direction")
        return self.directions[0]

    @property
    def user_attrs(self) -> dict[str, Any]:
        from sweeps.search import bulk

        return bulk.study_attrs(self)


class _OptunaStore:
    def __init__(self, storage: Any) -> None:
        self.storage = storage

    def names(self) -> list[str]:
        from sweeps.search import bulk

        return bulk.study_names(self.storage)

    def load(self, name: str) -> Any:
        import optuna

        return optuna.load_study(study_name=name, storage=self.storage)


def _light(url: str) -> _LightStore | None:
    from sweeps.search import optuna_tables as ot
    from sweeps.search.sql_rows import open_rows

    rows = open_rows(url)
    try:
        rev = rows(ot.REVISION)
    except _db_errors():  # no such table, or no database: Optuna's open says which
        rev = None
    if not rev or rev[0][0] != ot.SCHEMA_HEAD:
        rows.close()
        return None
    return _LightStore(rows)


def _db_errors() -> tuple[type[BaseException], ...]:
    """A database's errors: sqlite3's, and SQLAlchemy's and psycopg's where they are loaded."""
    import sqlite3
    import sys

    exc, pg = sys.modules.get("sqlalchemy.exc"), sys.modules.get("psycopg")
    return (
        (sqlite3.Error,)
        + ((exc.SQLAlchemyError,) if exc is not None else ())
        + ((pg.Error,) if pg is not None else ())
    )


def load_for_reading(name: str, url: str) -> Any:
    """`study.load_study` for reading: the sweep `name`, or NotFoundError naming the known."""
    path = url.removeprefix("sqlite:///")
    if path != url and not os.path.exists(path):
        # Reading must not create the database: that would race the driver creating it.
        raise NotFoundError(f"no sweep named '{name}' in {mask_url(url)} (no sweeps yet)")
    store = open_reader(url)
    try:
        return store.load(name)
    except KeyError:
        known = store.names()
        hint = f" (known: {', '.join(known[:10])})" if known else " (no sweeps yet)"
        raise NotFoundError(f"no sweep named '{name}' in {mask_url(url)}{hint}") from None
