"""Distribution by tenant on Citus: which table goes where, and doing it.

On a Citus coordinator every tenant-scoped table is distributed by ``tenant_id`` and
colocated with ``episodes``, so one tenant's rows of every table live in the same
shard group on one worker, and a statement that filters by tenant (every hot one
does) is routed whole to that worker: joins, foreign keys, ``ON CONFLICT`` and row
locks keep working there as on one PostgreSQL. The schema was drawn for this: every
primary key, unique index and foreign key leads with ``tenant_id``.

Kept on the coordinator, as plain tables:

- ``jobs``: the queue is claimed across tenants with ``FOR UPDATE SKIP LOCKED``,
  which Citus allows in single-shard statements only. On the coordinator the claim
  is one local statement (measured: as fast as on plain PostgreSQL; a reference
  table's claim is seven times slower, docs/benchmarks.md), and the queue is small:
  the backlog plus finished jobs' records. Nothing joins it with a tenant table.
- ``alembic_version``: the schema's revision, one row.

On SQLite, on plain PostgreSQL, and on a Citus *worker* (memsync is always pointed at
the coordinator), everything here does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.runtime.storage import schema

__all__ = [
    "COLOCATION_TABLE",
    "COORDINATOR_TABLES",
    "DISTRIBUTION_COLUMN",
    "distribute_tables",
    "distributed_tables",
    "distributing_new_tables",
    "is_citus_coordinator",
]

log = logging.getLogger("memsync.citus")

DISTRIBUTION_COLUMN = "tenant_id"
COLOCATION_TABLE = "episodes"
"""Every distributed table is colocated with this one (the first the schema creates)."""

COORDINATOR_TABLES = frozenset({"jobs"})
"""Tenant-scoped tables that stay plain tables on the coordinator (see the module)."""


def is_citus_coordinator(connection: Connection) -> bool:
    """Whether ``connection`` is to a Citus coordinator: the extension is installed in
    this database and this node is the one that holds the metadata."""
    if connection.dialect.name != "postgresql":
        return False
    installed = connection.exec_driver_sql(
        "SELECT 1 FROM pg_extension WHERE extname = 'citus'"
    ).scalar()
    if installed is None:
        return False
    return bool(connection.exec_driver_sql("SELECT citus_is_coordinator()").scalar())


def distributed_tables(connection: Connection) -> dict[str, str]:
    """The tables Citus knows in this database and how: ``{name: "distributed" |
    "reference" | "local"}``."""
    rows = connection.exec_driver_sql(
        "SELECT logicalrelid::regclass::text, partmethod FROM pg_dist_partition"
    )
    methods = {"h": "distributed", "n": "reference"}
    return {str(name): methods.get(str(method), "local") for name, method in rows}


def _wants_distribution(connection: Connection, table: str) -> bool:
    if table in COORDINATOR_TABLES or table == "alembic_version":
        return False
    columns = sa.inspect(connection).get_columns(table)
    return any(column["name"] == DISTRIBUTION_COLUMN for column in columns)


def _distribute(connection: Connection, table: str) -> None:
    colocated = COLOCATION_TABLE in distributed_tables(connection)
    colocate_with = COLOCATION_TABLE if colocated and table != COLOCATION_TABLE else "default"
    connection.execute(
        sa.text(
            "SELECT create_distributed_table(CAST(:table AS regclass), :column, "
            "colocate_with => :colocate_with)"
        ),
        {"table": table, "column": DISTRIBUTION_COLUMN, "colocate_with": colocate_with},
    )
    log.info("distributed table %s by %s", table, DISTRIBUTION_COLUMN)


def distribute_tables(connection: Connection) -> list[str]:
    """Distribute every tenant table that is not distributed yet; return their names.

    Repeats: a table already known to Citus is left as it is, so running this again
    distributes nothing. A table with rows is distributed with them (Citus copies
    them to the shards). Tables are taken parents first, so a foreign key always
    points at a table distributed before it. Does nothing off a Citus coordinator.
    """
    if not is_citus_coordinator(connection):
        return []
    known = distributed_tables(connection)
    existing = set(sa.inspect(connection).get_table_names())
    # The schema's own order puts a referenced table before the tables referring to it.
    ordered = [table.name for table in schema.metadata.sorted_tables]
    ordered += sorted(existing - set(ordered))
    if COLOCATION_TABLE in ordered:
        ordered.remove(COLOCATION_TABLE)
        ordered.insert(0, COLOCATION_TABLE)
    done: list[str] = []
    for table in ordered:
        if table in existing and table not in known and _wants_distribution(connection, table):
            _distribute(connection, table)
            done.append(table)
    return done


@contextmanager
def distributing_new_tables(connection: Connection) -> Iterator[None]:
    """While this is open, a tenant table created on ``connection`` (a migration's
    ``op.create_table``) is distributed as soon as it exists, before the migration
    goes on to fill it from, or join it with, tables that are distributed already
    (Citus joins a distributed table with another distributed one, not with a plain
    table). Off a Citus coordinator it does nothing."""
    if not is_citus_coordinator(connection):
        yield
        return

    def after_create(table: sa.Table, target: Any, **_: Any) -> None:
        if target is connection and _wants_distribution(connection, table.name):
            _distribute(connection, table.name)

    sa.event.listen(sa.Table, "after_create", after_create)
    try:
        yield
    finally:
        sa.event.remove(sa.Table, "after_create", after_create)
