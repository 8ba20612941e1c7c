"""Small compiles of a subject compiled before: what holding its memories spares them.

    python -m bench.small_compile [--db sqlite postgresql] [--history 2000] [--new 12]
                                  [--compiles 30]

What ``compile_every_n_episodes``, a sync's compile or ``POST /v1/memories/compile``
does all day: a subject with ``--history`` compiled chat statements (many of them still
active memories) receives ``--new`` episodes, then is compiled, ``--compiles`` times.
Two identical subjects take turns in one process against one store, one compiled by a
service that keeps each subject's last compiled memories (``compile.cached_memories``,
the default) and one by a service that keeps none (``0``, every compile loads the
subject's active memories but its episode summaries), so both ways share the
machine's moment. Printed per database and way: the subject's active memories (and how
many of them are episode summaries, which a compile loads only when its episodes name
them), the median wall and CPU time of a compile, and the SQL statements it sent.
Results and method: docs/benchmarks.md ("Eighth round", "Twelfth round").
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
from memsync.compile.types import MemoryKind
from memsync.runtime.compiling import CompileService
from memsync.runtime.compiling.settings import DEFAULT_CACHED_MEMORIES
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store

TENANT = "bench"


@dataclass
class Way:
    """One way of compiling (memories held or not) and what its compiles took."""

    label: str
    subject: str
    service: CompileService
    wall_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)


def run(backend: str, history: int, new: int, compiles: int) -> list[tuple[object, ...]]:
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        store = Store.from_url(url)
        ways = [
            Way(
                "held", "user:held", CompileService(store, cached_memories=DEFAULT_CACHED_MEMORIES)
            ),
            Way("loaded", "user:loaded", CompileService(store, cached_memories=0)),
        ]
        ingest = IngestService(store)
        for way in ways:
            ingest.ingest(TENANT, episodes(way.subject, history))
            way.service.compile(TENANT, way.subject)  # the history; holds for "held"
        statements = 0

        def count(*_: object) -> None:
            nonlocal statements
            statements += 1

        sa.event.listen(store.engine, "before_cursor_execute", count)
        for round_number in range(compiles):
            offset = history + round_number * new
            for way in ways if round_number % 2 == 0 else reversed(ways):
                ingest.ingest(TENANT, episodes(way.subject, new, offset))
                statements = 0
                wall, cpu = time.perf_counter(), time.process_time()
                result = way.service.compile(TENANT, way.subject)
                way.wall_ms.append((time.perf_counter() - wall) * 1000)
                way.cpu_ms.append((time.process_time() - cpu) * 1000)
                way.statements.append(statements)
                assert result.episodes_compiled == new, result
        sa.event.remove(store.engine, "before_cursor_execute", count)
        repository = MemoryRepository(store)
        active = {way.label: repository.memories(TENANT, way.subject) for way in ways}
        store.dispose()
    return [
        (
            backend,
            way.label,
            f"{len(active[way.label]):,}",
            f"{sum(m.kind is MemoryKind.EPISODE_SUMMARY for m in active[way.label]):,}",
            f"{statistics.median(way.wall_ms):.1f}",
            f"{statistics.median(way.cpu_ms):.1f}",
            statistics.median(way.statements),
        )
        for way in ways
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--history", type=int, default=2_000)
    parser.add_argument("--new", type=int, default=12)
    parser.add_argument("--compiles", type=int, default=30)
    arguments = parser.parse_args()
    print(
        f"small compiles; {machine()}; {arguments.history:,} episodes compiled before, "
        f"{arguments.new} new a compile, {arguments.compiles} compiles a way"
    )
    rows = [
        row
        for backend in arguments.db
        for row in run(backend, arguments.history, arguments.new, arguments.compiles)
    ]
    print_table(
        [
            "db",
            "way",
            "active memories",
            "of them summaries",
            "compile wall ms",
            "compile CPU ms",
            "statements",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
