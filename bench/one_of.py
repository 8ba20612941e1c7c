"""Looking up many ids or keys in one statement on PostgreSQL (``tables.one_of``).

    python -m bench.one_of [--values 5000] [--rounds 7] [--db postgresql citus]

A compile looks its chunk's episodes up by id (its read, its check under the lock),
its memories by key, and records history by memory id: thousands of values a
statement. Timed here, on a throwaway store holding ``--values`` memories, a select of
all of them by id and by memory key, two ways:

- ``array text``: how ``one_of`` sends them now, the text of an array in one untyped
  parameter that the server casts (``memsync.runtime.storage.tables.array_text``);
- ``list parameter``: a Python list bound as ``uuid[]`` / ``text[]``, as before, which
  psycopg dumps value by value in Python;
- ``IN list``: ``column.in_(values)``, a placeholder a value, as the compile's reads for
  a recompile (sources, contests, conflicts) sent them before.

Each way runs its statement more than five times, so psycopg has prepared it and
PostgreSQL may use a generic plan: the way an earlier try of the text form lost (the
text, typed, was cast again for every row). Printed: the median wall time a statement,
milliseconds. Results and method: docs/benchmarks.md ("Many values a statement").
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY

from bench.busy_thread_rows import memory_rows
from bench.common import machine, print_table, throwaway_store
from memsync.runtime.storage import Store, tables

Lookup = Callable[[sa.ColumnElement[Any], Sequence[Any]], sa.ColumnElement[bool]]


def array_text(column: sa.ColumnElement[Any], values: Sequence[Any]) -> sa.ColumnElement[bool]:
    return tables.one_of(column, values, postgresql=True)


def list_parameter(column: sa.ColumnElement[Any], values: Sequence[Any]) -> sa.ColumnElement[bool]:
    element = sa.Uuid() if isinstance(column.type, sa.Uuid) else sa.Text()
    return column == sa.any_(sa.bindparam(None, list(values), type_=ARRAY(element)))


def in_list(column: sa.ColumnElement[Any], values: Sequence[Any]) -> sa.ColumnElement[bool]:
    return column.in_(list(values))


def timed(store: Store, column: sa.ColumnElement[Any], values: Sequence[Any], way: Lookup) -> float:
    memories = tables.memories
    query = sa.select(sa.func.count()).where(memories.c.tenant_id == "bench", way(column, values))
    with store.read() as connection:
        started = time.perf_counter()
        found = connection.execute(query).scalar_one()
        elapsed = (time.perf_counter() - started) * 1000
    assert found == len(values), (found, len(values))
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--db", nargs="+", default=["postgresql"], choices=("postgresql", "citus"))
    arguments = parser.parse_args()
    ways: dict[str, Lookup] = {
        "array text": array_text,
        "list parameter": list_parameter,
        "IN list": in_list,
    }
    table = []
    for backend in arguments.db:
        with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
            store = Store.from_url(url)
            rows = memory_rows(arguments.values)
            with store.write() as connection:
                tables.insert_rows(connection, tables.memories, rows, ignore=False)
            lookups = {
                "ids": (tables.memories.c.id, [row["id"] for row in rows]),
                "keys": (tables.memories.c.memory_key, [row["memory_key"] for row in rows]),
            }
            results: dict[tuple[str, str], list[float]] = {}
            for _ in range(arguments.rounds):
                # Taking turns, so that a slow moment of the machine touches every way alike.
                for what, (column, values) in lookups.items():
                    for name, way in ways.items():
                        results.setdefault((what, name), []).append(
                            timed(store, column, values, way)
                        )
            store.dispose()
        for what in lookups:
            for name in ways:
                table.append(
                    [backend, what, name, f"{statistics.median(results[what, name]):,.1f}"]
                )
    print(f"{machine()}; {arguments.values:,} values a statement, median of {arguments.rounds}\n")
    print_table(["database", "looked up", "way", "ms a statement"], table)


if __name__ == "__main__":
    main()
