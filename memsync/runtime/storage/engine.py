"""Engines and transactions for the two supported databases.

SQLite is the embedded default: one file, WAL journal, and write transactions that
take the write lock up front (``BEGIN IMMEDIATE``) so two writers queue on the busy
timeout instead of failing with "database is locked" when a read lock cannot be
upgraded. PostgreSQL runs through psycopg 3 with row locks where writers could race.
"""

from __future__ import annotations

import asyncio
import json
import re
import select
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC
from typing import TYPE_CHECKING, Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from memsync.runtime.storage.schema import state_partial_conditions

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "Store",
    "create_async_store_engine",
    "create_store_engine",
    "is_store_unavailable",
    "lost_a_node",
    "normalise_store_url",
    "sessions_in_utc",
]

SQLITE_BUSY_TIMEOUT_MS = 60_000
_WRITE_OPTION = "memsync_write"

POOL_SIZE = 5
"""Connections each of a store's pools keeps open unless told otherwise (SQLAlchemy's
default). The services size them to what a process uses at once (``api.
concurrent_requests`` and the job workers beside them): a pool smaller than that opened
a connection (a PostgreSQL backend, forked) and closed it again at check-in for most
requests, as the API's 40 threads did under 16 clients. Up to ``MAX_OVERFLOW`` more are
opened under a burst."""

MAX_OVERFLOW = 10
"""Connections a pool opens past its size while all of them are in use, each closed
when checked in (SQLAlchemy's default)."""

PING_AFTER_IDLE_SECONDS = 1.0
"""A pooled PostgreSQL connection unused for longer than this is pinged at checkout."""
_CHECKED_IN_AT = "memsync_checked_in_at"


def normalise_store_url(url: str) -> str:
    """Accept the short forms people type and return a SQLAlchemy URL.

    ``postgresql://`` and ``postgres://`` select psycopg 3, the one PostgreSQL
    driver memsync ships with.
    """
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def is_store_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the store could not be used just now, rather than that
    the statement was wrong: the database is down or unreachable, SQLite stayed locked
    past the busy timeout, the pool had no connection to give, or a Citus worker that
    holds the data did not answer the coordinator (:func:`lost_a_node`). Nothing was
    written, so the same request may simply be tried again."""
    if isinstance(error, sa.exc.OperationalError | sa.exc.InterfaceError | sa.exc.TimeoutError):
        return True
    return lost_a_node(error)


_LOST_NODE_MESSAGES = ("failure on connection marked as essential", "connection to the remote node")


def lost_a_node(error: BaseException) -> bool:
    """Whether ``error`` is a Citus coordinator's report that a worker it needed did not
    answer. Citus reports a connection lost inside a transaction as an internal error
    (SQLSTATE XX000, "failure on connection marked as essential"), a connection it could
    not open as a connection failure (08006); both name the node."""
    if not isinstance(error, sa.exc.DBAPIError) or error.orig is None:
        return False
    diagnostic = getattr(error.orig, "diag", None)
    message = str(getattr(diagnostic, "message_primary", "") or "")
    return message.startswith(_LOST_NODE_MESSAGES)


def _json_serializer(value: Any) -> str:
    # How SQLite stores a JSON column: compact and with sorted keys, at the speed of the
    # standard library's C encoder. The canonical form (RFC 8785) matters only where a
    # hash is taken, and the content hash is computed before anything is stored.
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


# An integer literal of 19 digits or more may be past orjson's 64 bits, which it would
# read as a float; such a document is read by the standard library, exactly.
_LONG_INTEGER_BYTES = re.compile(rb"[0-9]{19}")
_LONG_INTEGER_TEXT = re.compile(r"[0-9]{19}")


def _json_deserializer(document: bytes | str) -> Any:
    """A JSON column's value read back: what ``json.loads`` reads, at orjson's speed.

    The two read every document our serializer writes (and PostgreSQL's ``jsonb``
    holds) to the same value, but for integers past 64 bits, which orjson makes floats,
    and what orjson refuses (a lone surrogate's escape, ``NaN``): those are left to
    ``json.loads``. Decoding was a tenth of a timeline's CPU.
    """
    long_integer = (
        _LONG_INTEGER_BYTES.search(document)
        if isinstance(document, bytes)
        else _LONG_INTEGER_TEXT.search(document)
    )
    if long_integer is None:
        try:
            return orjson.loads(document)
        except orjson.JSONDecodeError:
            pass
    return json.loads(document)


def create_store_engine(url: str, *, echo: bool = False, pool_size: int = POOL_SIZE) -> Engine:
    """Create an engine for ``url`` with the settings memsync relies on; a PostgreSQL
    engine's pool keeps ``pool_size`` connections open."""
    url = normalise_store_url(url)
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(
            url,
            echo=echo,
            json_serializer=_json_serializer,
            json_deserializer=_json_deserializer,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        )
        _configure_sqlite(engine)
        return engine
    if parsed.get_backend_name() == "postgresql":
        engine = sa.create_engine(
            url, **_postgresql_arguments(parsed, echo=echo), pool_size=pool_size
        )
        sa.event.listen(engine, "connect", sessions_in_utc)
        _ping_when_in_doubt(engine)
        return engine
    raise ValueError(
        f"store {parsed.render_as_string(hide_password=True)!r}: only sqlite:/// and "
        "postgresql+psycopg:// stores are supported"
    )


def create_async_store_engine(engine: Engine) -> AsyncEngine:
    """An asyncio engine on the same PostgreSQL database as ``engine`` (psycopg's async
    driver), with the same connection settings and the same checkout check; a pool of
    its own, as large as the default one's. Its connections are in autocommit mode: it
    runs single statements, each a transaction of its own, and nothing is rolled back
    when a connection is checked in."""
    from sqlalchemy.ext.asyncio import create_async_engine

    if engine.dialect.name != "postgresql":
        raise ValueError("only a PostgreSQL store has an asyncio engine")
    async_engine = create_async_engine(
        engine.url,
        isolation_level="AUTOCOMMIT",
        # No rollback when a connection is checked in: in autocommit it is never inside
        # a transaction (a statement that fails leaves it idle too), and the rollback
        # would be a trip through the asyncio bridge a request for nothing.
        pool_reset_on_return=None,
        pool_size=engine.pool.size(),  # type: ignore[attr-defined]
        **_postgresql_arguments(engine.url, echo=bool(engine.echo)),
    )
    sa.event.listen(async_engine.sync_engine, "connect", sessions_in_utc)
    _ping_when_in_doubt(async_engine.sync_engine)
    return async_engine


def sessions_in_utc(dbapi_connection: Any, _record: object = None) -> None:
    """Make sure a new PostgreSQL session runs at time zone UTC.

    The engines ask for it at connect (``-c timezone=UTC`` in ``options``), and moments
    are then read back without a conversion of ours (``UTCDateTime``). A connection
    pooler that drops startup options would leave the server's zone in force, and
    moments would come back in it: such a session is set to UTC here, once, before its
    first use. (The driver's connection, or SQLAlchemy's adapter of the asyncio one.)"""
    driver = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    if driver.info.timezone is UTC:
        return
    cursor = dbapi_connection.cursor()
    cursor.execute("SET TIME ZONE 'UTC'")
    cursor.close()
    dbapi_connection.commit()
    if driver.info.timezone is not UTC:
        raise RuntimeError(
            f"the store's session is at time zone {driver.info.timezone!r} after "
            "SET TIME ZONE 'UTC'; memsync reads moments in UTC"
        )


def _postgresql_arguments(url: sa.URL, *, echo: bool) -> dict[str, Any]:
    """What both PostgreSQL engines, the plain one and the asyncio one, are created with."""
    # Moments are read back in UTC whatever the server's zone: a stored
    # 9999-12-31T23:59:59Z shown in a zone east of UTC would be past year 9999.
    # Settings the URL passes in ``options`` (docs/operations.md: the commit's
    # durability) are kept, before this one, so UTC is what holds.
    given = url.query.get("options", ())
    options = " ".join([*([given] if isinstance(given, str) else given), "-c timezone=UTC"])
    return {
        "echo": echo,
        "json_serializer": _json_serializer,
        "json_deserializer": _json_deserializer,
        "connect_args": {"options": options},
        "max_overflow": MAX_OVERFLOW,
    }


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


def _ping_when_in_doubt(engine: Engine) -> None:
    """Check a pooled connection at checkout with a round trip only when it may be gone.

    SQLAlchemy's ``pool_pre_ping`` sends ``SELECT 1`` at every checkout: a round trip
    per transaction, which a busy server pays thousands of times a second for nothing.
    A server that closes a connection (a restart, ``pg_terminate_backend``, an idle
    timeout) sends its goodbye and a FIN, so the idle connection's socket has something
    to read; a connection lost without a word (a host that crashed, a firewall that
    forgot it) is caught by pinging whatever sat unused for longer than
    :data:`PING_AFTER_IDLE_SECONDS`. A failed ping invalidates the pool, as
    ``pool_pre_ping`` does, and the checkout opens a fresh connection; if the server is
    down, that raises the driver's error (the API's 503). A connection that dies
    between the check and its first statement fails that statement, as it could after
    a ping too.
    """

    @sa.event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info[_CHECKED_IN_AT] = time.monotonic()

    @sa.event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        checked_in_at = record.info.get(_CHECKED_IN_AT)
        if checked_in_at is None:
            return  # fresh from connect()
        idle = time.monotonic() - checked_in_at
        if idle <= PING_AFTER_IDLE_SECONDS and not _may_be_gone(dbapi_connection):
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            if engine.dialect.is_disconnect(error, dbapi_connection, None):
                raise sa.exc.InvalidatePoolError(str(error)) from error
            raise


def _may_be_gone(dbapi_connection: Any) -> bool:
    """Whether an idle psycopg connection may be unusable: the driver knows it is
    broken or closed, or the server sent something unasked (its goodbye before closing;
    rarely a notice, after which the ping simply succeeds)."""
    # The asyncio engine's pool holds SQLAlchemy's adapter around psycopg's connection.
    psycopg_connection = getattr(dbapi_connection, "driver_connection", dbapi_connection)
    if psycopg_connection.closed or psycopg_connection.broken:
        return True
    poller = select.poll()
    poller.register(psycopg_connection.fileno(), select.POLLIN)
    return bool(poller.poll(0))


class Store:
    """A database and the two ways to use it: reads and a write transaction.

    ``write()`` is the only way to change data. On SQLite it holds the database write
    lock for the whole transaction; on PostgreSQL it is a plain READ COMMITTED
    transaction and code that must not race takes row locks explicitly.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        state_partial_conditions(self.dialect)
        self._async_engine: AsyncEngine | None = None
        self._async_engine_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str, *, pool_size: int = POOL_SIZE) -> Store:
        """A store on ``url``; on PostgreSQL each of its pools keeps ``pool_size``
        connections open."""
        return cls(create_store_engine(url, pool_size=pool_size))

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
    def write_one_statement(self) -> Iterator[Connection]:
        """A connection for a write that is a single statement, which is a transaction
        of its own: atomic, and committed as durably as :meth:`write` commits, when the
        statement ends. Each further statement on it would be a transaction apart.

        On PostgreSQL that spares the two round trips of a transaction's ``BEGIN`` and
        ``COMMIT`` (the driver's autocommit mode; the commit and its WAL flush happen
        inside the statement's round trip). SQLite has no round trips to spare: there it
        is :meth:`write`.
        """
        if not self.is_postgresql:
            with self.write() as connection:
                yield connection
            return
        with self.engine.connect() as connection:
            yield connection.execution_options(isolation_level="AUTOCOMMIT")

    async def run_one_statement_async(
        self, sql: str, parameters: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """Run one SQL statement, a transaction of its own (autocommit: committed as
        durably as :meth:`write` commits, when the statement ends), on the raw psycopg
        connection of a checkout from the store's asyncio pool, without blocking the
        event loop; return the rows it returned (none for a statement without
        ``RETURNING``). PostgreSQL only.

        ``sql`` is what SQLAlchemy would send for the statement (compiled once for
        psycopg, ``%(name)s`` placeholders) and ``parameters`` the values it would bind:
        psycopg adapts them as it does under Core (no type in the statement processes
        them there either). Nothing here is SQLAlchemy's statement execution (its
        compiled cache, parameter and result processing), which costs more CPU than the
        statement's own round trip.

        Everything else is the pool's, as under Core: connections are checked as the
        plain pool checks them (:func:`_ping_when_in_doubt`), and a store that is down
        raises SQLAlchemy's ``OperationalError`` (the driver's error wrapped as Core
        wraps it). A connection that breaks during the statement, or is interrupted
        mid-way (a cancelled request), is discarded, so the next checkout opens a fresh
        one; the pool's other connections to a server that went away are found closed
        by the checkout check (:func:`_ping_when_in_doubt`) and replaced. A statement
        that fails leaves nothing behind, so trying it again is safe. The pool is
        created on first use; :meth:`dispose` and :meth:`dispose_async` close it.
        """
        from sqlalchemy.util import await_, greenlet_spawn

        engine = self._async().sync_engine
        dialect = engine.dialect
        driver_error = dialect.loaded_dbapi.Error

        def checked_out() -> list[tuple[Any, ...]]:
            # One greenlet for the checkout, the statement and the check-in: the pool's
            # events (the liveness check, which may ping) and a connect are synchronous
            # code that awaits through SQLAlchemy's bridge.
            try:
                connection = engine.raw_connection()
            except driver_error as error:
                # As Core wraps a failed connect: the API's 503 (is_store_unavailable).
                raise sa.exc.DBAPIError.instance(
                    None,
                    None,
                    error,
                    driver_error,
                    hide_parameters=engine.hide_parameters,
                    connection_invalidated=dialect.is_disconnect(error, None, None),
                    dialect=dialect,
                ) from error
            try:
                psycopg_connection = connection.driver_connection
                assert psycopg_connection is not None  # checked out, so connected
                cursor = await_(psycopg_connection.execute(sql, parameters))
                rows = await_(cursor.fetchall()) if cursor.description is not None else []
            except driver_error as error:
                disconnect = dialect.is_disconnect(error, connection.dbapi_connection, None)
                if disconnect:
                    # Closed and not reused; the pool's other connections, if the server
                    # went away, are found closed by the checkout check and replaced.
                    connection.invalidate(error)
                else:
                    connection.close()
                raise sa.exc.DBAPIError.instance(
                    sql,
                    parameters,
                    error,
                    driver_error,
                    hide_parameters=engine.hide_parameters,
                    connection_invalidated=disconnect,
                    dialect=dialect,
                ) from error
            except BaseException as error:
                # Interrupted (a cancellation) or failed outside the driver: where the
                # connection's conversation stands is unknown, so it is not reused.
                connection.invalidate(error)
                raise
            connection.close()
            return rows

        return await greenlet_spawn(checked_out)

    def _async(self) -> AsyncEngine:
        engine = self._async_engine
        if engine is None:
            # Two event loops (a test's clients, each on a thread of its own) may race.
            with self._async_engine_lock:
                if self._async_engine is None:
                    self._async_engine = create_async_store_engine(self.engine)
                engine = self._async_engine
        return engine

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads, which must not write.

        On SQLite a transaction, rolled back at the end: its statements read one
        snapshot. On PostgreSQL each statement runs on its own (autocommit): under READ
        COMMITTED a transaction's statements each take a snapshot of their own anyway,
        so a transaction around them only cost two round trips (its ``BEGIN`` and the
        ``ROLLBACK``), and under concurrent requests each round trip is a wait to take
        the GIL back.
        """
        if self.is_postgresql:
            with self.engine.connect() as connection:
                yield connection.execution_options(isolation_level="AUTOCOMMIT")
            return
        with self.engine.connect() as connection, connection.begin() as transaction:
            yield connection
            transaction.rollback()

    def dispose(self) -> None:
        """Close every pooled connection, of both pools; either is opened again on use.

        The asyncio pool's connections are closed on an event loop of their own, so
        this must not be called from a running loop's thread (use
        :meth:`dispose_async` there); if it is, they are dropped instead, to be closed
        when collected.
        """
        self.engine.dispose()
        engine = self._async_engine
        if engine is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(engine.dispose())
        else:
            engine.sync_engine.dispose(close=False)

    async def dispose_async(self) -> None:
        """Close the asyncio pool's connections on the running loop (a server that stops:
        its loop is the one they were used on)."""
        if self._async_engine is not None:
            await self._async_engine.dispose()
