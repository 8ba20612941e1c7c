"""A context bundle from a kept index, and the first one after the subject changed.

    python -m bench.context_after_change [--db sqlite postgresql] [--history 200]
                                         [--new 4] [--rounds 40] [--max-tokens 500]

What ``bench.load``'s context requests do, without the HTTP and the other requests
around them: a subject with ``--history`` compiled chat statements (the compile
benchmark's, whose claims collide, so many are superseded) is asked for a
``--max-tokens`` bundle (the load's task) twice after each change, ``--rounds`` times;
a change is ``--new`` episodes more and a compile, as the load's compiles move a
subject's memory version every few seconds. The first bundle after a change rebuilds
the process's index of the subject (its ranking inputs, the rows of the memories the
bundle shows); the second is served from the kept index. Printed per database and
kind: the median CPU and wall time of a bundle and the SQL queries it sent (not
counting SQLite's ``BEGIN``), and the subject's active memories and open conflicts at
the end. In process, one thread, so
the figures are the bundle's own cost, not a queue's. Results and method:
docs/benchmarks.md ("Ninth round").
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass, field

import sqlalchemy as sa

from bench.common import machine, print_table, throwaway_store
from bench.compile import episodes
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import ContextReader, EpisodeRepository, MemoryRepository
from memsync.runtime.storage import Store

TENANT = "bench"
SUBJECT = "user:1"
TASK = "what tools and decisions matter this week"
"""``bench.load``'s context task."""


@dataclass
class Bundles:
    """What the bundles of one kind (after a change, or from a kept index) took."""

    cpu_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)


def run(
    backend: str, history: int, new: int, rounds: int, max_tokens: int
) -> list[tuple[object, ...]]:
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        store = Store.from_url(url)
        ingest, compiler = IngestService(store), CompileService(store)
        ingest.ingest(TENANT, episodes(SUBJECT, history))
        compiler.compile(TENANT, SUBJECT)
        memories = MemoryRepository(store)
        reader = ContextReader(EpisodeRepository(store), memories)
        reader.bundle(TENANT, SUBJECT, TASK, max_tokens)  # the tokenizer, loaded once
        kinds = {"after a change": Bundles(), "kept index": Bundles()}
        statements = 0

        def count(_connection: object, _cursor: object, sql: str, *_: object) -> None:
            nonlocal statements
            # Queries only: SQLite's reads also send the BEGIN of their transaction.
            statements += not sql.startswith("BEGIN")

        sa.event.listen(store.engine, "before_cursor_execute", count)
        for round_number in range(rounds):
            ingest.ingest(TENANT, episodes(SUBJECT, new, history + round_number * new))
            compiler.compile(TENANT, SUBJECT)
            for taken in kinds.values():
                statements = 0
                wall, cpu = time.perf_counter(), time.process_time()
                reader.bundle(TENANT, SUBJECT, TASK, max_tokens)
                taken.cpu_ms.append((time.process_time() - cpu) * 1000)
                taken.wall_ms.append((time.perf_counter() - wall) * 1000)
                taken.statements.append(statements)
        sa.event.remove(store.engine, "before_cursor_execute", count)
        version = memories.version(TENANT, SUBJECT)
        inputs = memories.ranking_inputs(TENANT, SUBJECT, version_read=version)
        store.dispose()
    return [
        (
            backend,
            kind,
            f"{len(inputs.entries):,}",
            len(inputs.open_conflicts),
            f"{statistics.median(taken.cpu_ms):.2f}",
            f"{statistics.median(taken.wall_ms):.2f}",
            statistics.median(taken.statements),
        )
        for kind, taken in kinds.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--history", type=int, default=200)
    parser.add_argument("--new", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=500)
    arguments = parser.parse_args()
    print(
        f"context bundles; {machine()}; {arguments.history:,} statements compiled before, "
        f"{arguments.new} more and a compile before each of {arguments.rounds} rounds, "
        f"{arguments.max_tokens}-token bundles"
    )
    rows = [
        row
        for backend in arguments.db
        for row in run(
            backend, arguments.history, arguments.new, arguments.rounds, arguments.max_tokens
        )
    ]
    print_table(
        [
            "db",
            "bundle",
            "active memories",
            "open conflicts",
            "CPU ms",
            "wall ms",
            "statements",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
