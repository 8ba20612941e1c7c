"""Engines and transactions for the two supported databases.

SQLite is the embedded default: one file, WAL journal, and write transactions that
take the write lock up front (``BEGIN IMMEDIATE``) so two writers queue on the busy
timeout instead of failing with "database is locked" when a read lock cannot be
upgraded. PostgreSQL runs through psycopg 3 with row locks where writers could race.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

__all__ = ["Store", "create_store_engine", "normalise_store_url"]

SQLITE_BUSY_TIMEOUT_MS = 60_000
_WRITE_OPTION = "memsync_write"


def normalise_store_url(url: str) -> str:
    """Accept the short forms people type and return a SQLAlchemy URL.

    ``postgresql://`` and ``postgres://`` select psycopg 3, the one PostgreSQL
    driver memsync ships with.
    """
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def _json_serializer(value: Any) -> str:
    # How SQLite stores a JSON column: compact and with sorted keys, at the speed of the
    # standard library's C encoder. The canonical form (RFC 8785) matters only where a
    # hash is taken, and the content hash is computed before anything is stored.
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def create_store_engine(url: str, *, echo: bool = False) -> Engine:
    """Create an engine for ``url`` with the settings memsync relies on."""
    url = normalise_store_url(url)
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(
            url,
            echo=echo,
            json_serializer=_json_serializer,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        )
        _configure_sqlite(engine)
        return engine
    if parsed.get_backend_name() == "postgresql":
        # Moments are read back in UTC whatever the server's zone: a stored
        # 9999-12-31T23:59:59Z shown in a zone east of UTC would be past year 9999.
        # Settings the URL passes in ``options`` (docs/operations.md: the commit's
        # durability) are kept, before this one, so UTC is what holds.
        given = parsed.query.get("options", ())
        options = " ".join([*([given] if isinstance(given, str) else given), "-c timezone=UTC"])
        return sa.create_engine(
            url,
            echo=echo,
            json_serializer=_json_serializer,
            pool_pre_ping=True,
            connect_args={"options": options},
        )
    raise ValueError(
        f"store {parsed.render_as_string(hide_password=True)!r}: only sqlite:/// and "
        "postgresql+psycopg:// stores are supported"
    )


def _configure_sqlite(engine: Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control away from the driver so BEGIN is ours to emit.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        write = connection.get_execution_options().get(_WRITE_OPTION, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


class Store:
    """A database and the two ways to use it: a read transaction and a write one.

    ``write()`` is the only way to change data. On SQLite it holds the database write
    lock for the whole transaction; on PostgreSQL it is a plain READ COMMITTED
    transaction and code that must not race takes row locks explicitly.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name

    @classmethod
    def from_url(cls, url: str) -> Store:
        return cls(create_store_engine(url))

    @property
    def is_postgresql(self) -> bool:
        return self.dialect == "postgresql"

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A transaction that commits on success and rolls back on any exception."""
        with self.engine.connect() as connection:
            connection = connection.execution_options(**{_WRITE_OPTION: True})
            with connection.begin():
                yield connection

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A transaction for reads; it is rolled back at the end, so it cannot write."""
        with self.engine.connect() as connection, connection.begin() as transaction:
            yield connection
            transaction.rollback()

    def dispose(self) -> None:
        self.engine.dispose()
