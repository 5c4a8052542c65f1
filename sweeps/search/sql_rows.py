"""Plain SELECTs on an Optuna RDB database, answered as lists of tuples.

A SQLite file is read through the stdlib's `sqlite3`, and a PostgreSQL one through psycopg
(the driver Optuna's engine uses for it): `show` and `ls` then import no SQLAlchemy, 0.2-0.3 s
of an `ls` that should answer in under a second. Any other database (MySQL, a URL with options
that are SQLAlchemy's to read), or the engine of an Optuna storage already open (the driver's),
is read through its SQLAlchemy engine. Queries are SQL text with `:name` parameters, as
SQLAlchemy's `text()` takes them (psycopg's own style is made from it); `key`, a column of
Optuna's attribute tables and a reserved word in MySQL, is written as each backend quotes it
(`Rows.key`).
"""

from __future__ import annotations

import re
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


class PgRows:
    """A PostgreSQL database's rows through psycopg, one connection, opened at the first query
    (so a server that is down raises there, as an engine's first query does) and again after
    one is lost (so an outage wait can retry)."""

    key = "key"  # no reserved word in PostgreSQL: SQLAlchemy's dialect leaves it unquoted

    def __init__(self, conninfo: str, url: str) -> None:
        self.url, self._conninfo, self._conn = url, conninfo, None

    def __call__(self, sql: str, **params: Any) -> list[tuple[Any, ...]]:
        import psycopg

        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._conninfo, autocommit=True)
        try:
            with self._conn.cursor() as cur:
                cur.execute(_pyformat(sql), params)
                return cur.fetchall()
        except psycopg.OperationalError:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


def _pyformat(sql: str) -> str:
    """`:name` parameters (SQLAlchemy's text) as psycopg's `%(name)s`; a literal % doubled."""
    return re.sub(r"(?<![:\w]):(\w+)", r"%(\1)s", sql.replace("%", "%%"))


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


def postgres_conninfo(url: str) -> str | None:
    """libpq's URI for a `postgresql+psycopg://` URL with no query string, which psycopg then
    reads as SQLAlchemy's dialect would. None for any other URL (plain `postgresql://` names
    psycopg2 to SQLAlchemy: its engine says what is missing)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "?" in rest or scheme != "postgresql+psycopg":
        return None
    return f"postgresql://{rest}"


def open_rows(url: str) -> Rows:
    """Rows of the database at `url`: sqlite3 for a SQLite file, psycopg for PostgreSQL,
    a new engine otherwise."""
    path = sqlite_path(url)
    if path is not None:
        return SqliteRows(path, url)
    conninfo = postgres_conninfo(url)
    if conninfo is not None:
        return PgRows(conninfo, url)
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
    pg = sys.modules.get("psycopg")
    if pg is not None:
        errors += (pg.OperationalError, pg.InterfaceError)
    return errors


def in_list(prefix: str, values: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """`(:p0, :p1, ...)` and its parameters, for `IN` over a non-empty tuple."""
    names = {f"{prefix}{i}": v for i, v in enumerate(values)}
    return "(" + ", ".join(f":{n}" for n in names) + ")", names
