"""Table handles for the statements each stage writes, and the predicates they share.

Each stage owns its SQL (ingest writes episodes, compiling reads what is uncompiled and
writes memories, reading only reads); what they share is defined here once, so that a
predicate a partial index depends on cannot drift between copies.
"""

from __future__ import annotations

import functools
import itertools
import operator
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.runtime.storage import schema

if TYPE_CHECKING:
    from memsync.runtime.storage.schema import (
        backfill_slices,
        backfills,
        conflict_history,
        conflicts,
        episode_labels,
        episode_revisions,
        episodes,
        jobs,
        llm_extractions,
        memories,
        memory_history,
        memory_labels,
        memory_sources,
        memory_versions,
        receipts,
        resolutions,
        supersessions,
        sync_runs,
        sync_streams,
        webhook_deliveries,
    )

__all__ = [
    "IDS_PER_STATEMENT",
    "ROWS_PER_BATCH",
    "UNCOMPILED",
    "backfill_slices",
    "backfills",
    "conflict_history",
    "conflicts",
    "episode_labels",
    "episode_revisions",
    "episodes",
    "ids_starting_with",
    "in_slices",
    "insert_or_ignore",
    "insert_rows",
    "jobs",
    "llm_extractions",
    "memories",
    "memory_history",
    "memory_labels",
    "memory_sources",
    "memory_versions",
    "one_of",
    "picked",
    "pipelined",
    "receipts",
    "resolutions",
    "supersessions",
    "sync_runs",
    "sync_streams",
    "update_each_if",
    "upsert",
    "webhook_deliveries",
]


UNCOMPILED: sa.ColumnElement[bool]
"""Episodes whose current revision no compile has consumed yet. It is the predicate of
the partial index ``ix_episodes_uncompiled``; a query must state it exactly so for the
planner to use that index, which is why it is written only here."""


def __getattr__(name: str) -> Any:
    """The schema's tables, each built when a stage first names it
    (:mod:`~memsync.runtime.storage.schema`), and :data:`UNCOMPILED`, made with the
    episodes table; either is a plain attribute from then on."""
    if name == "UNCOMPILED":
        episodes = schema.episodes
        found: object = episodes.c.compiled_revision < episodes.c.revision
    else:
        found = getattr(schema, name, None)
        if not isinstance(found, sa.Table):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = found
    return found


IDS_PER_STATEMENT = 10_000
"""The most values one statement binds: well under SQLite's limit of 32,766 bound
parameters and PostgreSQL's 65,535, whatever else the statement binds."""

_T = TypeVar("_T")


def in_slices(values: Sequence[_T]) -> Iterator[Sequence[_T]]:
    """``values`` in consecutive slices of at most :data:`IDS_PER_STATEMENT`, for a
    statement per slice (read at call time, so tests can shrink it)."""
    size = IDS_PER_STATEMENT
    for start in range(0, len(values), size):
        yield values[start : start + size]


def one_of(
    column: sa.ColumnElement[Any], values: Collection[Any], *, postgresql: bool
) -> sa.ColumnElement[bool]:
    """``column IN values``, in a statement whose text does not grow with ``values``.

    On PostgreSQL the values travel as one parameter, the text of an array, which the
    server casts. An ``IN`` list renders a placeholder per value, and SQLAlchemy and
    psycopg render and convert the text again for every new length: about 35 µs a
    value, 0.2 s for the 6,400 keys a compile chunk looks up. A list parameter has one
    text, but psycopg dumps it value by value in Python: a statement of 5,000 ids took
    20.0 ms so, 8.5 ms as text (keys: 17.2 and 7.6 ms; ``bench.one_of``). SQLite binds
    a list in C and has no arrays.
    ``values`` are ids or strings, never ``None``.
    """
    if not postgresql:
        return column.in_(list(values))
    from sqlalchemy.dialects.postgresql import ARRAY  # loaded already by the store's engine

    element = sa.Uuid() if isinstance(column.type, sa.Uuid) else sa.Text()
    # Untyped, so that the parameter takes the array's type and the server reads the
    # text once: typed as text, it was cast again for every row compared.
    text = sa.bindparam(None, array_text(values), type_=sa.types.NullType())
    return column == sa.any_(sa.cast(text, ARRAY(element)))


def in_select(
    column: sa.ColumnElement[Any], select: sa.Select[Any], *, postgresql: bool
) -> sa.ColumnElement[bool]:
    """``column IN (select)``, planned the same way whatever the tables' statistics say.

    On PostgreSQL it is written ``column = ANY(ARRAY(select))``: the subquery runs once
    (an InitPlan) and the outer rows are found through an index on ``column``. A join
    or ``IN (select)`` leaves the order to the planner's estimates, and on tables not
    analyzed yet (a new store, or one that grew since autovacuum last looked) it chose
    a nested loop that read the subquery's table once per outer row: a rebuilt context
    index's withheld episodes took 65 ms for a subject of 600 episodes, 0.4 ms so.
    """
    if not postgresql:
        return column.in_(select)
    return column == sa.any_(sa.func.array(select.scalar_subquery()))


def array_text(values: Iterable[object]) -> str:
    """``values`` (ids or strings) as PostgreSQL writes an array of them: each value's
    text quoted, with its backslashes and double quotes escaped, so that any string
    (commas, braces, spaces, ``NULL``) reads back as itself."""
    quoted = ('"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"' for value in values)
    return "{" + ",".join(quoted) + "}"


def picked(rows: Sequence[sa.Row[Any]], names: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each of ``rows``' values of the columns ``names`` (two or more), in that order.

    ``rows`` are rows of one statement (the same columns in the same order, as repeats
    of one select over slices of ids give too). A row's attribute (``row.content``) or
    its mapping costs SQLAlchemy about 0.8 µs a column, a position a twentieth of that:
    building 21 memories of a timeline page by attribute was a twelfth of the request.
    """
    if not rows:
        return []
    fields = rows[0]._fields
    pick = operator.itemgetter(*(fields.index(name) for name in names))
    return [pick(row) for row in rows]


def update_each_if(table: sa.Table, tenant_id: str, guard: str) -> sa.Update:
    """An executemany-ready ``UPDATE`` of one row per parameter set, by ``b_id``, that
    applies only while column ``guard`` still equals ``b_guard`` (a compare-and-set: a
    row another writer changed in between is left alone)."""
    return table.update().where(
        table.c.tenant_id == tenant_id,
        table.c.id == sa.bindparam("b_id"),
        table.c[guard] == sa.bindparam("b_guard"),
    )


def ids_starting_with(
    connection: Connection, table: sa.Table, tenant_id: str, prefix: str, *, limit: int = 2
) -> list[uuid.UUID]:
    """Ids of the tenant's rows of ``table`` whose hex digits start with ``prefix``
    (dashes ignored, any case; at most ``limit``), for ids people type shortened.
    ``ValueError`` when the prefix is not hex."""
    digits = prefix.replace("-", "").lower()
    if not digits or len(digits) > 32 or not all(c in "0123456789abcdef" for c in digits):
        raise ValueError(f"{prefix!r} is not the start of an id (hex digits, e.g. 3f2a1b)")
    column = table.c.id
    if connection.dialect.name == "postgresql":
        matches = sa.func.replace(sa.cast(column, sa.Text), "-", "").like(digits + "%")
    else:  # SQLite keeps a UUID as its 32 hex digits.
        matches = sa.type_coerce(column, sa.String).like(digits + "%")
    query = sa.select(column).where(table.c.tenant_id == tenant_id, matches).limit(limit)
    return list(connection.execute(query).scalars())


ROWS_PER_BATCH = 500
"""Rows :func:`insert_rows` takes from its input at a time: a statement's worth (a JSON
document, a ``VALUES`` list), or a stretch of a ``COPY``."""


def insert_rows(
    connection: Connection, table: sa.Table, rows: Iterable[dict[str, Any]], *, ignore: bool
) -> None:
    """Insert ``rows`` (every column given, the same columns in each); with ``ignore``,
    rows a unique index already holds are skipped. ``rows`` is consumed a batch at a
    time (:data:`ROWS_PER_BATCH`), so a generator is never rendered whole.

    On PostgreSQL, rows are streamed by ``COPY`` (:func:`_copy_rows`); rows that may
    be skipped, which ``COPY`` cannot do, travel a statement's worth at a time as one
    JSON document that the server turns into the table's row type
    (``jsonb_populate_recordset``, in C; a multi-row ``VALUES`` list binds a parameter
    per value, which the driver parses and formats per row, about 150 µs a row for a
    wide table). Those statements are pipelined: the next one is encoded while the
    server inserts the one before.

    SQLite's driver binds in C: there each batch is one statement of many rows
    (``VALUES (…), (…), …``, as many as its parameter limit allows) of values already in
    the driver's terms (:func:`_driver_rows`). Not an executemany: the driver lets go of
    the GIL around every step of a statement, and an executemany steps once a row.
    While another thread computes (a compile's read-ahead of its next chunk, another
    request), each such step waits up to a switch interval (5 ms) for the GIL back:
    5,000 rows took 25-44 s beside a busy thread, 0.3 s as one step a batch.
    """
    batches = _batches(rows, ROWS_PER_BATCH)
    first = next(batches, None)
    if first is None:
        return
    if connection.dialect.name != "postgresql":
        _insert_sqlite_rows(
            connection, table, list(first[0]), itertools.chain([first], batches), ignore=ignore
        )
        return
    if not ignore:
        _copy_rows(connection, table, list(first[0]), itertools.chain([first], batches))
        return
    columns = ", ".join(f'"{name}"' for name in first[0])
    statement = (
        f"INSERT INTO {table.name} ({columns}) SELECT {columns} "
        f"FROM jsonb_populate_recordset(NULL::{table.name}, CAST(%(rows)s AS jsonb)) "
        "ON CONFLICT DO NOTHING"
    )
    with pipelined(connection) as send:
        # A batch at a time: encoding JSON holds the GIL until it is done, and the API
        # serves reads from other threads of the same process while a compile writes.
        for batch in itertools.chain([first], batches):
            # orjson writes ids and aware times natively, in forms PostgreSQL reads back
            # exactly (UTC offsets included), about ten times as fast as the standard
            # library calling str() on each: a compile writes tens of thousands of them.
            send(statement, {"rows": orjson.dumps(batch).decode()})


def _insert_sqlite_rows(
    connection: Connection,
    table: sa.Table,
    names: Sequence[str],
    batches: Iterable[list[dict[str, Any]]],
    *,
    ignore: bool,
) -> None:
    """Each of ``batches`` (rows of the columns ``names``) into ``table``, as statements
    of as many rows as SQLite's limit on a statement's parameters allows (see
    :func:`insert_rows`)."""
    import sqlite3  # here: only a SQLite store needs the driver loaded

    statement = insert_or_ignore(table, postgresql=False) if ignore else table.insert()
    single_row = statement.compile(dialect=connection.dialect, column_keys=names).string
    binders = _binders(connection, table, names)
    driver = connection.connection.driver_connection
    limit = (
        driver.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        if isinstance(driver, sqlite3.Connection)
        else _SQLITE_VARIABLES_EVERYWHERE
    )
    per_statement = max(1, limit // len(names))
    statements: dict[int, str] = {}  # by rows a statement: full batches share one
    for batch in batches:
        values = _driver_rows(binders, names, batch)
        for start in range(0, len(values), per_statement):
            part = values[start : start + per_statement]
            if len(part) not in statements:
                statements[len(part)] = _many_rows(single_row, len(part))
            connection.exec_driver_sql(
                statements[len(part)], tuple(itertools.chain.from_iterable(part))
            )


_SQLITE_VARIABLES_EVERYWHERE = 999
"""The parameters a SQLite statement may have under every SQLite (the default before
3.32), for a driver connection that cannot say its own limit."""


def _many_rows(single_row: str, count: int) -> str:
    """``single_row``, an ``INSERT … VALUES (…)`` of one row (what may follow the
    ``VALUES`` list kept, e.g. ``ON CONFLICT DO NOTHING``), made to insert ``count``
    rows: the one row's group of placeholders repeated."""
    head, _, values = single_row.partition(" VALUES ")
    group_end = values.index(")") + 1
    group, rest = values[:group_end], values[group_end:]
    return f"{head} VALUES {', '.join([group] * count)}{rest}"


def _copy_rows(
    connection: Connection,
    table: sa.Table,
    names: Sequence[str],
    batches: Iterable[list[dict[str, Any]]],
) -> None:
    """Stream ``batches`` into ``table`` with a binary ``COPY … FROM STDIN``, in the
    caller's transaction. The server parses no text (a JSON document of the rows is
    parsed whole first: a fifth to a third more of its time on a compile's memories
    and supersession records), and psycopg writes ids, times and numbers in C (in text
    form an id costs it four times as much). JSON columns are encoded by orjson; a
    ``None`` anywhere is SQL ``NULL``, as the store's JSON columns take it. An error
    is raised as SQLAlchemy raises a driver's, when the copy ends."""
    import psycopg  # here: only a PostgreSQL store needs the driver loaded
    from psycopg.types.json import set_json_dumps

    driver = connection.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    types = [_copy_type(table.c[name].type) for name in names]
    columns = ", ".join(f'"{name}"' for name in names)
    statement = f"COPY {table.name} ({columns}) FROM STDIN (FORMAT BINARY)"
    try:
        with driver.cursor() as cursor:
            set_json_dumps(orjson.dumps, cursor)
            with cursor.copy(statement) as copy:
                copy.set_types(types)
                for batch in batches:
                    for row in zip(*_columns(batch, names), strict=True):
                        copy.write_row(row)
    except psycopg.Error as error:
        if _relayed_constraint_violation(error):
            raise sa.exc.IntegrityError(statement, None, error) from error
        raise sa.exc.DBAPIError.instance(statement, None, error, psycopg.Error) from error


def _relayed_constraint_violation(error: Exception) -> bool:
    """Whether ``error`` is a constraint violation that Citus relayed from a worker.

    Citus' COPY into a distributed table reports a shard's unique, foreign-key, check
    or not-null violation as an internal error (SQLSTATE XX000) carrying PostgreSQL's
    own message, where an INSERT keeps the class-23 state. Callers catch an integrity
    error the same way on every PostgreSQL, so it is raised as one."""
    if getattr(error, "sqlstate", None) != "XX000":
        return False
    diagnostic = getattr(error, "diag", None)
    message = str(getattr(diagnostic, "message_primary", "") or "")
    return " violates " in message and "constraint" in message


# PostgreSQL's names of the built-in types the store's columns are, by SQLAlchemy type
# (the first that a column's type is an instance of): they choose psycopg's binary
# writers, and the server reads each value with its column's own type.
_COPY_TYPES: tuple[tuple[type[sa.types.TypeEngine[Any]], str], ...] = (
    (sa.Uuid, "uuid"),
    (sa.JSON, "jsonb"),
    (sa.DateTime, "timestamptz"),
    (sa.Boolean, "bool"),
    (sa.Float, "float8"),
    (sa.BigInteger, "int8"),
    (sa.Integer, "int4"),
    (sa.Text, "text"),
    (sa.String, "varchar"),
)


def _copy_type(column_type: sa.types.TypeEngine[Any]) -> str:
    # The declared type: a variant for PostgreSQL is of the same kind (JSON as JSONB, a
    # string with a collation).
    implementation = _declared(column_type)
    if isinstance(implementation, sa.DateTime) and not implementation.timezone:
        return "timestamp"
    for python_type, name in _COPY_TYPES:
        if isinstance(implementation, python_type):
            return name
    raise TypeError(f"no COPY type for a {column_type!r} column")


def _declared(column_type: sa.types.TypeEngine[Any]) -> sa.types.TypeEngine[Any]:
    """A column's declared type; for a decorator (UTCDateTime), the type it decorates."""
    declared: sa.types.TypeEngine[Any] = getattr(column_type, "impl_instance", column_type)
    return declared


_Binder = tuple[Callable[[Any], Any] | None, bool]
"""A column's bind processor in a dialect (None: the value as it is), and whether the
column holds times (whose processing is worth remembering per value)."""


def _binders(connection: Connection, table: sa.Table, names: Sequence[str]) -> list[_Binder]:
    dialect = connection.dialect
    return [
        (
            table.c[name].type.dialect_impl(dialect).bind_processor(dialect),
            isinstance(_declared(table.c[name].type), sa.DateTime),
        )
        for name in names
    ]


def _driver_rows(
    binders: Sequence[_Binder], names: Sequence[str], rows: list[dict[str, Any]]
) -> list[tuple[Any, ...]]:
    """``rows`` as the driver takes them, in ``names`` order: each value through its
    column type's own bind processing (``binders``, from :func:`_binders`), as
    SQLAlchemy's executemany would put it, a column at a time, without building its
    parameters again per row (which cost more than SQLite's insert). A time repeated
    in a column of the batch (a compile's moment, one episode's) is converted once."""
    columns = _columns(rows, names)
    for position, (process, times) in enumerate(binders):
        if process is not None:
            convert = functools.lru_cache(maxsize=None)(process) if times else process
            columns[position] = [
                None if value is None else convert(value) for value in columns[position]
            ]
    return list(zip(*columns, strict=True))


def _columns(rows: list[dict[str, Any]], names: Sequence[str]) -> list[list[Any]]:
    """The values of ``rows``, a list per column of ``names``."""
    return [[row[name] for row in rows] for name in names]


def _batches(rows: Iterable[_T], size: int) -> Iterator[list[_T]]:
    iterator = iter(rows)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


Send = Callable[[str, Mapping[str, Any]], None]
"""Sends one statement in the driver's own SQL (``%(name)s`` placeholders)."""


@contextmanager
def pipelined(connection: Connection) -> Iterator[Send]:
    """Statements sent to PostgreSQL without waiting for each other (psycopg's pipeline
    mode), in the caller's transaction: the server runs each while the block goes on
    (encoding the next one, or pure work). The block sends through what it is handed
    and must not otherwise use ``connection`` until it ends. When it ends every
    statement has finished; the first error among them is raised then, as SQLAlchemy
    raises a driver's error, and an error of the block's own after the statements
    finished (either way the transaction is the caller's to roll back). PostgreSQL
    only.
    """
    if connection.dialect.name != "postgresql":
        raise ValueError("pipelined statements need a PostgreSQL store")
    import psycopg  # here: only a PostgreSQL store needs the driver loaded

    driver = connection.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    last: list[str] = [""]

    def send(statement: str, parameters: Mapping[str, Any]) -> None:
        last[0] = statement
        driver.execute(statement, parameters)

    try:
        with driver.pipeline():
            yield send
    except psycopg.Error as error:
        # Which statement failed is the driver's message to tell; a statement's rows
        # are not repeated in the error.
        raise sa.exc.DBAPIError.instance(last[0], None, error, psycopg.Error) from error


def upsert(table: sa.Table, *, postgresql: bool) -> Any:
    """An ``INSERT`` in the store's dialect, ready for ``on_conflict_do_update`` (both
    dialects spell it alike). The dialect's module is imported here, not with this
    module: the store's engine has loaded its own, and only that one."""
    if postgresql:
        from sqlalchemy.dialects import postgresql as dialect
    else:
        from sqlalchemy.dialects import sqlite as dialect  # type: ignore[no-redef]
    return dialect.insert(table)


def insert_or_ignore(table: sa.Table, *, postgresql: bool) -> Any:
    """``INSERT … ON CONFLICT DO NOTHING`` in the store's dialect: a repeat of a row a
    unique index already holds writes nothing (the statement's ``rowcount`` says so)."""
    return upsert(table, postgresql=postgresql).on_conflict_do_nothing()
