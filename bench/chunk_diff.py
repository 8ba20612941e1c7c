"""What differs when one subject's episodes are compiled in chunks of different sizes.

    python -m bench.chunk_diff [--db sqlite] [--count 4000] [--chunks 4000 2000 1000]
                               [--every 0] [--backfill] [--shuffled 0] [--seed 28]

Ingests the compile benchmark's chat corpus (bench.compile: claims that collide,
preferences, decisions, facts) for one subject into a throwaway store per run, compiles
it with each chunk size (``--every N`` also compiles after every N ingested episodes;
``--backfill`` also compiles the newer half before the older one arrives;
``--shuffled N`` also ingests the episodes in a random order, ``--seed``, compiling
after every N), and prints, against the first run: every memory (content, status,
status rule, validity and provenance as idempotency keys), the supersession records
(rule, winner, loser, score, threshold) and the counts the compiles reported (created,
and superseded net of reinstated). Memories are named by their content, episodes by
their key, so runs in different stores compare directly. Every line of difference is
counted; the last line says how many there were.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from bench.common import throwaway_store
from bench.compile import episodes
from memsync.clock import FakeClock
from memsync.compile.types import MemoryStatus
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import episodes as episodes_table

TENANT, SUBJECT = "bench", "user:1"


def snapshot(
    url: str, count: int, chunk: int, every: int, backfill: bool, seed: int | None = None
) -> dict[str, Any]:
    """Ingest and compile the corpus (with ``backfill``, its newer half first; with a
    ``seed``, in that random order); return what the store holds about the subject and
    what the compiles reported."""
    store = Store.from_url(url)
    clock = FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    ingest = IngestService(store, clock)
    compiler = CompileService(store, clock=clock, chunk_episodes=chunk)
    drafts = episodes(SUBJECT, count)
    if backfill:
        drafts = drafts[count // 2 :] + drafts[: count // 2]
    if seed is not None:
        random.Random(seed).shuffle(drafts)
    step = every or count
    reported = Counter[str]()
    for start in range(0, count, step):
        ingest.ingest(TENANT, drafts[start : start + step])
        clock.advance(timedelta(seconds=1))
        result = compiler.compile(TENANT, SUBJECT)
        reported["created"] += result.memories_created
        reported["superseded"] += result.memories_superseded
        reported["reinstated"] += result.memories_reinstated
    with store.read() as connection:
        rows = connection.execute(sa.select(episodes_table.c.id, episodes_table.c.idempotency_key))
        key_of = {str(row.id): row.idempotency_key for row in rows}
    memories = MemoryRepository(store).memories(TENANT, SUBJECT, statuses=None)
    name = {memory.id: memory.content for memory in memories}

    def sources(ids: Any) -> tuple[str, ...]:
        return tuple(sorted(key_of[str(episode)] for episode in ids))

    state = {
        (memory.content, memory.memory_key[:8]): (
            memory.status.value,
            memory.status_rule.value if memory.status_rule else None,
            memory.valid_from.isoformat(),
            memory.valid_to.isoformat() if memory.valid_to else None,
            memory.last_asserted.isoformat(),
            sources(memory.source_episode_ids),
        )
        for memory in memories
    }
    records = Counter(
        (
            record.rule,
            name.get(record.winner_memory_id) if record.winner_memory_id else None,
            name.get(record.loser_memory_id) if record.loser_memory_id else None,
            record.score,
            record.threshold,
        )
        for record in MemoryRepository(store).supersessions(TENANT, SUBJECT)
    )
    store.dispose()
    return {"memories": state, "records": records, "reported": reported}


def compare(label: str, base: dict[str, Any], other: dict[str, Any]) -> int:
    """Print how ``other`` differs from ``base``; return the number of differences."""
    differences = 0
    active = MemoryStatus.ACTIVE.value
    for content in sorted(set(base["memories"]) | set(other["memories"])):
        left, right = base["memories"].get(content), other["memories"].get(content)
        if left == right:
            continue
        differences += 1
        if left is not None and right is not None and left[0] == right[0]:
            fields = ("status", "rule", "valid_from", "valid_to", "asserted_at", "sources")
            changed = [f for f, a, b in zip(fields, left, right, strict=True) if a != b]
            both = "ACTIVE" if left[0] == active else left[0]
            print(f"  [{label}] {both} in both, differs in {changed}: {content!r}")
        else:
            print(f"  [{label}] {content!r}: {left and left[:2]} -> {right and right[:2]}")
    only_base = base["records"] - other["records"]
    only_other = other["records"] - base["records"]
    for record, times in sorted(only_base.items(), key=repr):
        print(f"  [{label}] record only in base x{times}: {record}")
    for record, times in sorted(only_other.items(), key=repr):
        print(f"  [{label}] record only here x{times}: {record}")
    differences += sum(only_base.values()) + sum(only_other.values())
    for name, count in net(other).items():
        if count != net(base)[name]:
            differences += 1
            print(f"  [{label}] the compiles reported {name} {count}, not {net(base)[name]}")
    return differences


def net(run: dict[str, Any]) -> dict[str, int]:
    """What a run's compiles reported, summed: memories created, and superseded net of
    those reinstated (what one compile of everything reports as superseded)."""
    reported = run["reported"]
    return {
        "memories_created": reported["created"],
        "memories_superseded - memories_reinstated": reported["superseded"]
        - reported["reinstated"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgresql"])
    parser.add_argument("--count", type=int, default=4000)
    parser.add_argument("--chunks", type=int, nargs="+", default=[4000, 2000, 1000])
    parser.add_argument("--every", type=int, default=0, help="also compile every N ingests")
    parser.add_argument(
        "--backfill", action="store_true", help="also compile the newer half, then the older"
    )
    parser.add_argument(
        "--shuffled", type=int, default=0, help="also ingest in a random order, compiling every N"
    )
    parser.add_argument("--seed", type=int, default=28, help="the random order's seed")
    args = parser.parse_args()
    runs: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as directory:
        plans: list[tuple[int, int, bool, int | None]] = [
            (chunk, 0, False, None) for chunk in args.chunks
        ]
        if args.every:
            plans.append((max(args.chunks), args.every, False, None))
        if args.backfill:
            plans.append((max(args.chunks), args.count // 2, True, None))
        if args.shuffled:
            plans.append((min(args.chunks), args.shuffled, False, args.seed))
        for chunk, every, backfill, seed in plans:
            with throwaway_store(args.db, directory) as url:
                label = f"chunk={chunk}" + (f",every={every}" if every else "")
                label += ",newer half first" if backfill else ""
                label += f",random order (seed {seed})" if seed is not None else ""
                runs.append((label, snapshot(url, args.count, chunk, every, backfill, seed)))
    (base_label, base), *others = runs
    for label, run in runs:
        statuses = Counter(state[0] for state in run["memories"].values())
        reported = run["reported"]
        print(
            f"{label}: {dict(statuses)}, {sum(run['records'].values())} records; the compiles "
            f"reported {reported['created']} created, {reported['superseded']} superseded, "
            f"{reported['reinstated']} reinstated"
        )
    failures = 0
    for label, run in others:
        print(f"{label} vs {base_label}:")
        failures += compare(label, base, run)
    print(f"differences (memories, records, counts): {failures}")


if __name__ == "__main__":
    main()
