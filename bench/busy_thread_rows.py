"""Bulk rows into SQLite while another thread of the process computes.

    python -m bench.busy_thread_rows [--rows 5000] [--rounds 3]

A compile writes a chunk's memories while its helper thread derives the next chunk, and
the API writes an ingest batch while other requests' threads compute. SQLite's driver
lets go of the GIL around each step of a statement and needs it back afterwards; a
thread that computes keeps it until the switch interval (5 ms) makes it let go. So what
a write costs beside a busy thread depends on how many steps it takes. Inserted here,
``--rows`` memories in one transaction, two ways, each idle and beside a thread
spinning in Python, under CPython's default switch interval (5 ms) and under the API
server's (``SWITCH_INTERVAL_SECONDS``, 0.5 ms):

- ``insert_rows``: how the store writes them (one statement of many rows a batch);
- ``executemany``: the same rows and statement text as one executemany (a step a row),
  as ``insert_rows`` sent them before.

Printed: the median of ``--rounds`` rounds each, milliseconds, and busy over idle.

Results and method: docs/benchmarks.md ("Bulk rows beside a busy thread").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.engine import Connection

from bench.common import machine, print_table, throwaway_store
from memsync.runtime.app.api.server import SWITCH_INTERVAL_SECONDS
from memsync.runtime.storage import Store, tables

CPYTHON_SWITCH_INTERVAL_SECONDS = 0.005


def memory_rows(count: int) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    return [
        {
            "tenant_id": "bench",
            "id": uuid.uuid4(),
            "subject_id": "user:1",
            "memory_key": uuid.uuid4().hex,
            "kind": "fact",
            "content": f"memory {n} of about the length a compile's summaries have " * 2,
            "claim_key": None,
            "claim_value": None,
            "confidence": 0.5,
            "negated": False,
            "explicit_change": False,
            "status": "active",
            "status_rule": None,
            "valid_from": now,
            "valid_to": None,
            "asserted_at": now,
            "metadata": {"compiler": "heuristic", "rule": "summary"},
            "job_id": None,
            "created_at": now,
            "updated_at": now,
            "status_changed_at": now,
        }
        for n in range(count)
    ]


def by_insert_rows(connection: Connection, rows: list[dict[str, Any]]) -> None:
    tables.insert_rows(connection, tables.memories, rows, ignore=False)


def by_executemany(connection: Connection, rows: list[dict[str, Any]]) -> None:
    names = list(rows[0])
    statement = tables.memories.insert().compile(dialect=connection.dialect, column_keys=names)
    binders = tables._binders(connection, tables.memories, names)
    connection.exec_driver_sql(statement.string, tables._driver_rows(binders, names, rows))


@contextmanager
def busy_thread(busy: bool) -> Iterator[None]:
    """A thread computing in Python for as long as the block runs (if ``busy``)."""
    stop = threading.Event()

    def spin() -> None:
        total = 0
        while not stop.is_set():
            for n in range(1_000):
                total += n

    spinner = threading.Thread(target=spin, daemon=True) if busy else None
    if spinner is not None:
        spinner.start()
    try:
        yield
    finally:
        stop.set()
        if spinner is not None:
            spinner.join()


def timed(
    store: Store, write: Callable[[Connection, list[dict[str, Any]]], None], rows: int, busy: bool
) -> float:
    batch = memory_rows(rows)
    with busy_thread(busy), store.write() as connection:
        started = time.perf_counter()
        write(connection, batch)
        return (time.perf_counter() - started) * 1000


INTERVALS = (CPYTHON_SWITCH_INTERVAL_SECONDS, SWITCH_INTERVAL_SECONDS)
"""The switch intervals compared: CPython's default and the API server's."""

Results = dict[tuple[float, str, bool], list[float]]


def taking_turns(
    rounds: int, ways: Sequence[str], measure: Callable[[str, bool], float]
) -> Results:
    """``measure(way, busy)`` for each way, idle and beside a busy thread, under each of
    :data:`INTERVALS`, ``rounds`` times, taking turns so that a slow moment of the machine
    touches every way alike; milliseconds by (interval, way, busy)."""
    results: Results = {}
    for _ in range(rounds):
        for interval in INTERVALS:
            sys.setswitchinterval(interval)
            for way in ways:
                for busy in (False, True):
                    results.setdefault((interval, way, busy), []).append(measure(way, busy))
    return results


def print_medians(results: Results, ways: Sequence[str], decimals: int) -> None:
    """The median of each (interval, way), idle and busy, and busy over idle."""
    rows = []
    for interval in INTERVALS:
        for way in ways:
            idle = statistics.median(results[interval, way, False])
            busy = statistics.median(results[interval, way, True])
            rows.append(
                [
                    f"{interval * 1000:g} ms",
                    way,
                    f"{idle:,.{decimals}f}",
                    f"{busy:,.{decimals}f}",
                    f"{busy / idle:,.1f}",
                ]
            )
    print_table(
        ["switch interval", "way", "idle ms", "beside a busy thread ms", "busy / idle"], rows
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    ways = {"insert_rows": by_insert_rows, "executemany": by_executemany}
    with tempfile.TemporaryDirectory() as directory, throwaway_store("sqlite", directory) as url:
        store = Store.from_url(url)
        results = taking_turns(
            arguments.rounds,
            list(ways),
            lambda way, busy: timed(store, ways[way], arguments.rows, busy),
        )
        store.dispose()
    print(f"{machine()}; {arguments.rows:,} memories a transaction, median of {arguments.rounds}\n")
    print_medians(results, list(ways), decimals=0)


if __name__ == "__main__":
    main()
