"""Plain SELECTs on an Optuna RDB database, answered as lists of tuples.

A SQLite file is read through the stdlib's `sqlite3`: `show` and `ls` then import no
SQLAlchemy, 0.2-0.3 s of an `ls` that should answer in under a second. Any other database
(PostgreSQL, MySQL), or the engine of an Optuna storage already open (the driver's), is read
through its SQLAlchemy engine. Queries are SQL text with `:name` parameters, which both take;
`key`, a column of Optuna's attribute tables and a reserved word in MySQL, is written as each
backend quotes it (`Rows.key`).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Protocol


class Rows(Protocol):
    url: str  # for messages and the outage wait
    key: str  # the attribute tables' `key` column, quoted where the backend needs it

    def __call__(self, sql: str, **params: Any) -> list[tuple[Any, ...]]: ...

    def close(self) -> None: ...


class SqliteRows:
    """A SQLite file's rows through the stdlib. `connect` creates no file where none is: the
    callers check first, as reading must not race a driver creating the database."""

    key = "key"

    def __init__(self, path: str, url: str) -> None:
        self.url = url
        # The timeout rides out a driver's write lock, as the engine's connect_args did.
        self._conn = sqlite3.connect(path, timeout=30, check_same_thread=False)

    def __call__(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        self._conn.close()


class EngineRows:
    """A SQLAlchemy engine's rows (one pooled connection per query)."""

    def __init__(self, engine: Any, dispose: bool = False) -> None:
        self.engine, self._dispose = engine, dispose
        self.url = str(engine.url)
        self.key = engine.dialect.identifier_preparer.quote("key")

    def __call__(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        import sqlalchemy as sa

        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(sa.text(sql), params).all()]

    def close(self) -> None:
        if self._dispose:
            self.engine.dispose()


def sqlite_path(url: str) -> str | None:
    """The file of a plain `sqlite:///path` URL; None for any other URL (a query string or a
    driver named in it is SQLAlchemy's to read)."""
    if not url.startswith("sqlite:///") or "?" in url:
        return None
    path = url.removeprefix("sqlite:///")
    return None if path in ("", ":memory:") else path


def open_rows(url: str) -> Rows:
    """Rows of the database at `url`: sqlite3 for a SQLite file, a new engine otherwise."""
    path = sqlite_path(url)
    if path is not None:
        return SqliteRows(path, url)
    import sqlalchemy as sa

    return EngineRows(sa.create_engine(url), dispose=True)


def transient_errors() -> tuple[type[BaseException], ...]:
    """What a lost connection raises: sqlite3's error, and SQLAlchemy's where it is loaded
    (a process that never imported it cannot meet its errors)."""
    import sys

    errors: tuple[type[BaseException], ...] = (sqlite3.OperationalError,)
    exc = sys.modules.get("sqlalchemy.exc")
    if exc is not None:
        errors += (exc.OperationalError, exc.InterfaceError)
    return errors


def in_list(prefix: str, values: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """`(:p0, :p1, ...)` and its parameters, for `IN` over a non-empty tuple."""
    names = {f"{prefix}{i}": v for i, v in enumerate(values)}
    return "(" + ", ".join(f":{n}" for n in names) + ")", names
