"""What keeping transaction time costs: the compile's history writes, and ``as_of`` reads
from the history against reads of today's rows, measured side by side in one process.

    python -m bench.transaction_time [--db sqlite postgresql] [--episodes 5000]
                                     [--memories 10000] [--rounds 3]

1. Compile: ``--episodes`` chat messages of a fresh subject (claims that supersede each
   other, preferences, tools, flagged conflicts), ingested then compiled, with the
   history writes (``record_memory_history``, ``record_conflict_history``) as they are
   and replaced by no-ops, alternating, ``--rounds`` times each: median wall and CPU
   seconds of the compile.
2. ``as_of`` reads of a subject with ``--memories`` active memories: the memories as of
   a moment after the compile, read from the history (``memories_at``) and, for
   comparison, as the read was before the history (today's rows, a later status change
   read as active), alternating: p50/p99 ms.

Machines shared with other work vary from minute to minute; alternating in one process
keeps both sides of each comparison under the same load. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import sqlalchemy as sa

from bench.common import machine, print_table, run_child, throwaway_store
from bench.compile import TOOLS, statement
from memsync.clock import FakeClock
from memsync.compile.types import StoredMemory
from memsync.episode import EpisodeDraft
from memsync.runtime.compiling import CompileService
from memsync.runtime.compiling import memories as compiling_memories
from memsync.runtime.compiling.memories import with_sources
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store, tables

TENANT = "bench"
START = datetime(2025, 1, 1, tzinfo=UTC)


def chat(subject: str, count: int) -> list[EpisodeDraft]:
    return [
        EpisodeDraft(
            subject_id=subject,
            source="chat",
            type="message",
            payload={"messages": [{"role": "user", "content": statement(i)}]},
            idempotency_key=f"{subject}:{i}",
            occurred_at=START + timedelta(minutes=i),
        )
        for i in range(count)
    ]


def compile_once(store: Store, clock: FakeClock, subject: str, count: int) -> tuple[float, float]:
    IngestService(store, clock).ingest(TENANT, chat(subject, count))
    clock.advance(timedelta(minutes=1))
    wall, cpu = time.perf_counter(), time.process_time()
    CompileService(store, clock=clock).compile(TENANT, subject)
    return time.perf_counter() - wall, time.process_time() - cpu


def _no_history(*_args: Any, **_kwargs: Any) -> None:
    return None


def compiles(store: Store, count: int, rounds: int) -> dict[str, Any]:
    clock = FakeClock(START + timedelta(days=400))
    samples: dict[str, list[tuple[float, float]]] = {"with history": [], "without": []}
    for r in range(rounds):
        samples["with history"].append(compile_once(store, clock, f"with-{r}", count))
        with (
            mock.patch.object(compiling_memories, "record_memory_history", _no_history),
            mock.patch.object(compiling_memories, "record_conflict_history", _no_history),
        ):
            samples["without"].append(compile_once(store, clock, f"without-{r}", count))
    return {
        name: {
            "wall_s": statistics.median(wall for wall, _ in values),
            "cpu_s": statistics.median(cpu for _, cpu in values),
        }
        for name, values in samples.items()
    }


def rows_before_history(store: Store, subject: str, as_of: datetime) -> list[StoredMemory]:
    """``memories_at`` as it was before the history: today's rows, created by then."""
    m = tables.memories
    query = (
        sa.select(m)
        .where(m.c.tenant_id == TENANT, m.c.subject_id == subject, m.c.created_at <= as_of)
        .order_by(m.c.valid_from, m.c.id)
    )
    with store.read() as connection:
        return with_sources(connection, TENANT, list(connection.execute(query)))


def reads(store: Store, memories: int, rounds: int) -> dict[str, Any]:
    clock = FakeClock(START + timedelta(days=500))
    subject = "reads"
    drafts = [
        EpisodeDraft(
            subject_id=subject,
            source="note",
            type="note",
            payload={"text": f"Service svc-k{i} deploys with {TOOLS[i % 9]} in region r{i % 7}."},
            idempotency_key=f"note:{i}",
            occurred_at=START + timedelta(minutes=i),
        )
        for i in range(memories)
    ]
    IngestService(store, clock).ingest(TENANT, drafts)
    CompileService(store, clock=clock).compile(TENANT, subject)
    as_of = clock.advance(timedelta(minutes=1))
    repository = MemoryRepository(store)
    variants: dict[str, Callable[[], Collection[StoredMemory]]] = {
        "history (memories_at)": lambda: repository.memories_at(TENANT, subject, as_of),
        "today's rows (before)": lambda: rows_before_history(store, subject, as_of),
    }
    samples: dict[str, list[float]] = {name: [] for name in variants}
    count = {name: len(read()) for name, read in variants.items()}
    for _ in range(rounds * 10):
        for name, read in variants.items():
            started = time.perf_counter()
            read()
            samples[name].append((time.perf_counter() - started) * 1000)
    return {
        name: {
            "memories": count[name],
            "p50_ms": statistics.median(values),
            "p99_ms": sorted(values)[max(0, round(len(values) * 0.99) - 1)],
        }
        for name, values in samples.items()
    }


def child(backend: str, episodes: int, memories: int, rounds: int) -> None:
    import json

    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        store = Store.from_url(url)
        result = {
            "compile": compiles(store, episodes, rounds),
            "reads": reads(store, memories, rounds),
        }
        store.dispose()
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--episodes", type=int, default=5_000)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        backend, episodes, memories, rounds = arguments.child
        child(backend, int(episodes), int(memories), int(rounds))
        return
    print(f"transaction time benchmark; {machine()}")
    compile_rows: list[tuple[object, ...]] = []
    read_rows: list[tuple[object, ...]] = []
    for backend in arguments.db:
        result = run_child(
            "bench.transaction_time",
            [backend, str(arguments.episodes), str(arguments.memories), str(arguments.rounds)],
        )
        print(backend, result, file=sys.stderr, flush=True)
        for name, figures in result["compile"].items():
            compile_rows.append(
                (
                    backend,
                    f"{arguments.episodes:,} messages, {name}",
                    f"{figures['wall_s']:.2f}",
                    f"{figures['cpu_s']:.2f}",
                )
            )
        for name, figures in result["reads"].items():
            read_rows.append(
                (
                    backend,
                    f"{figures['memories']:,} memories, {name}",
                    f"{figures['p50_ms']:.1f}",
                    f"{figures['p99_ms']:.1f}",
                )
            )
    print_table(["db", "compile", "wall s (median)", "cpu s (median)"], compile_rows)
    print_table(["db", "as_of read", "p50 ms", "p99 ms"], read_rows)


if __name__ == "__main__":
    main()
