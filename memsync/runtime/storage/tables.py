"""Table handles for the statements each stage writes, and the predicates they share.

Each stage owns its SQL (ingest writes episodes, compiling reads what is uncompiled and
writes memories, reading only reads); what they share is defined here once, so that a
predicate a partial index depends on cannot drift between copies.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator, Sequence
from typing import Any, TypeVar

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection

from memsync.runtime.storage.schema import (
    backfill_slices,
    backfills,
    conflicts,
    episode_revisions,
    episodes,
    jobs,
    llm_extractions,
    memories,
    memory_sources,
    memory_versions,
    supersessions,
    sync_runs,
    sync_streams,
)

__all__ = [
    "IDS_PER_STATEMENT",
    "JSON_ROWS_PER_STATEMENT",
    "UNCOMPILED",
    "backfill_slices",
    "backfills",
    "conflicts",
    "episode_revisions",
    "episodes",
    "ids_starting_with",
    "in_slices",
    "insert_json_rows",
    "insert_or_ignore",
    "jobs",
    "llm_extractions",
    "memories",
    "memory_sources",
    "memory_versions",
    "one_of",
    "supersessions",
    "sync_runs",
    "sync_streams",
    "update_each_if",
    "upsert",
]


UNCOMPILED = episodes.c.compiled_revision < episodes.c.revision
"""Episodes whose current revision no compile has consumed yet. It is the predicate of
the partial index ``ix_episodes_uncompiled``; a query must state it exactly so for the
planner to use that index, which is why it is written only here."""


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

    On PostgreSQL the values travel as one array parameter. An ``IN`` list renders a
    placeholder per value, and SQLAlchemy and psycopg render and convert the text again
    for every new length: about 35 µs a value, 0.2 s for the 6,400 keys a compile
    chunk looks up. SQLite binds a list in C and has no arrays.
    """
    if not postgresql:
        return column.in_(list(values))
    element = sa.Uuid() if isinstance(column.type, sa.Uuid) else sa.Text()
    return column == sa.any_(sa.bindparam(None, list(values), type_=pg_dialect.ARRAY(element)))


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


JSON_ROWS_PER_STATEMENT = 500
"""Rows per statement of :func:`insert_json_rows` on PostgreSQL."""


def insert_json_rows(
    connection: Connection, table: sa.Table, rows: Sequence[dict[str, Any]], *, ignore: bool
) -> None:
    """Insert ``rows`` (every column given) in one statement; with ``ignore``, rows a
    unique index already holds are skipped.

    On PostgreSQL the rows travel as one JSON document that the server turns into the
    table's row type (``jsonb_populate_recordset``, in C): a multi-row ``VALUES`` list
    binds a parameter per value, which the driver parses and formats per row, about
    150 µs a row for a wide table. SQLite's driver binds per row in C already, so there
    it is a plain executemany.
    """
    if not rows:
        return
    if connection.dialect.name != "postgresql":
        statement = insert_or_ignore(table, postgresql=False) if ignore else table.insert()
        connection.execute(statement, rows)
        return
    columns = ", ".join(f'"{name}"' for name in rows[0])
    conflict = " ON CONFLICT DO NOTHING" if ignore else ""
    statement = sa.text(
        f"INSERT INTO {table.name} ({columns}) SELECT {columns} "
        f"FROM jsonb_populate_recordset(NULL::{table.name}, CAST(:rows AS jsonb)){conflict}"
    )
    # A slice at a time: encoding JSON holds the GIL until it is done, and the API
    # serves reads from other threads of the same process while a compile writes.
    for start in range(0, len(rows), JSON_ROWS_PER_STATEMENT):
        some = rows[start : start + JSON_ROWS_PER_STATEMENT]
        # orjson writes ids and aware times natively, in forms PostgreSQL reads back
        # exactly (UTC offsets included), about ten times as fast as the standard
        # library calling str() on each: a compile writes tens of thousands of them.
        connection.execute(statement, {"rows": orjson.dumps(some).decode()})


def upsert(table: sa.Table, *, postgresql: bool) -> Any:
    """An ``INSERT`` in the store's dialect, ready for ``on_conflict_do_update`` (both
    dialects spell it alike)."""
    return (pg_dialect.insert if postgresql else sqlite_dialect.insert)(table)


def insert_or_ignore(table: sa.Table, *, postgresql: bool) -> Any:
    """``INSERT … ON CONFLICT DO NOTHING`` in the store's dialect: a repeat of a row a
    unique index already holds writes nothing (the statement's ``rowcount`` says so)."""
    return upsert(table, postgresql=postgresql).on_conflict_do_nothing()
