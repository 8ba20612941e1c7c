"""What a context bundle reads, and in how many statements: the subject's newest
episodes and its memory version come in one; an index kept at that version costs
nothing more, and a rebuild reads the version once more, after its inputs."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.episode import Tombstone, canonical_json
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import (
    ContextReader,
    EpisodeRepository,
    MemoryRepository,
    SubjectIndexes,
)
from memsync.runtime.reading.indexes import SubjectIndex
from memsync.runtime.storage import Store
from tests.integration.test_context import START, build_store, ingest_statements


@contextmanager
def statements_sent(store: Store) -> Iterator[list[str]]:
    sent: list[str] = []

    def seen(_conn: Any, _cursor: Any, sql: str, *_rest: Any) -> None:
        if sql.lstrip().upper().startswith("SELECT"):  # not SQLite's BEGIN of a read
            sent.append(" ".join(sql.split()))

    sa.event.listen(store.engine, "before_cursor_execute", seen)
    try:
        yield sent
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", seen)


def add_episodes(store: Store, clock: FakeClock, subject: str, numbers: range) -> None:
    ingest_statements(IngestService(store, clock), subject, numbers)


@pytest.mark.parametrize("limit", [1, 3, 25])
def test_the_newest_episodes_and_the_memory_version_read_together_are_what_each_reads_alone(
    store: Store, limit: int
) -> None:
    clock = FakeClock(START)
    build_store(store, "compiled", 12)  # memories and episodes
    add_episodes(store, clock, "uncompiled", range(5))  # episodes, no memory yet
    episodes, memories = EpisodeRepository(store), MemoryRepository(store)

    for subject in ("compiled", "uncompiled", "nobody"):
        together = episodes.recent_and_memory_version("t1", subject, limit=limit)
        alone = (
            episodes.recent("t1", subject, as_of=None, limit=limit),
            memories.version("t1", subject),
        )
        assert together == alone, subject
    assert episodes.recent_and_memory_version("t1", "nobody", limit=limit) == ([], None)
    assert episodes.recent_and_memory_version("t1", "uncompiled", limit=limit)[1] is None
    assert len(episodes.recent_and_memory_version("t1", "compiled", limit=limit)[0]) == min(
        limit, 12
    )


def test_a_bundle_from_a_kept_index_is_one_statement_and_a_rebuild_reads_the_version_once_more(
    store: Store,
) -> None:
    build_store(store, "ana", 40)
    reader = ContextReader(EpisodeRepository(store), MemoryRepository(store))
    first = reader.bundle("t1", "ana", "where does ana live", 400)

    with statements_sent(store) as kept:
        again = reader.bundle("t1", "ana", "where does ana live", 400)
    assert again == first
    assert len(kept) == 1

    clock = FakeClock(START + timedelta(days=30))
    add_episodes(store, clock, "ana", range(40, 44))
    CompileService(store, clock=clock).compile("t1", "ana")
    with statements_sent(store) as rebuilt:
        reader.bundle("t1", "ana", "where does ana live", 400)
    version_reads = [sql for sql in rebuilt if "memory_versions" in sql]
    # The version read with the episodes, and once after the inputs (not before them
    # too), each time along with something else, never in a statement of its own.
    assert len(version_reads) == 2, version_reads
    assert all(" JOIN " in sql for sql in version_reads), version_reads


def test_an_index_asked_at_a_version_a_write_has_since_moved_is_built_at_the_new_one(
    store: Store,
) -> None:
    build_store(store, "ana", 40)
    memories = MemoryRepository(store)
    indexes = SubjectIndexes(memories)
    read_before_the_write = memories.version("t1", "ana")
    before = indexes.at("t1", "ana", read_before_the_write)

    clock = FakeClock(START + timedelta(days=30))
    add_episodes(store, clock, "ana", range(40, 44))
    CompileService(store, clock=clock).compile("t1", "ana")
    now = memories.version("t1", "ana")
    assert now != read_before_the_write

    # The caller read the version before the compile committed: the rebuild must not
    # file what it reads under that version, nor miss what the compile wrote.
    indexes = SubjectIndexes(memories)
    after = indexes.at("t1", "ana", read_before_the_write)
    assert after.inputs.version == now
    assert set(after.inputs.texts) > set(before.inputs.texts) - {
        memory.id
        for memory in memories.memories("t1", "ana", statuses=None)
        if memory.status.value != "active"
    }
    assert after.inputs == memories.ranking_inputs("t1", "ana", version_read=now)
    assert indexes.at("t1", "ana", now) is after  # kept under the version it holds


def test_an_index_kept_across_changes_answers_as_one_built_afresh(store: Store) -> None:
    """A rebuilt index takes over what its earlier version made of unchanged memories;
    after each kind of change (newer statements, a backfill of older ones that go
    behind what is kept, episodes deleted) it must hold and answer what a fresh one
    does."""
    clock = FakeClock(START + timedelta(days=60))
    ingest, compiler = IngestService(store, clock), CompileService(store, clock=clock)
    memories = MemoryRepository(store)
    indexes = SubjectIndexes(memories)
    reader = ContextReader(EpisodeRepository(store), memories, indexes=indexes)
    changes = [
        lambda: add_episodes(store, clock, "ana", range(100, 160)),
        lambda: add_episodes(store, clock, "ana", range(160, 166)),
        lambda: add_episodes(store, clock, "ana", range(0, 40)),  # older: goes behind
        lambda: ingest.tombstone("t1", [Tombstone(f"ana:{n}") for n in range(150, 166, 2)]),
        lambda: add_episodes(store, clock, "ana", range(166, 180)),
    ]
    tasks = ["where does ana live", "which tools", "gateway calls", ""]
    lent = []
    for number, change in enumerate(changes):
        earlier = indexes.current("t1", "ana") if number else None
        change()
        clock.advance(timedelta(minutes=5))
        compiler.compile("t1", "ana")

        kept = indexes.current("t1", "ana")
        fresh = SubjectIndex(memories.ranking_inputs("t1", "ana", version_read=None))
        # As sets: the statements have no order (a prepared plan may change it).
        assert kept.inputs.version == fresh.inputs.version
        assert set(kept.inputs.entries) == set(fresh.inputs.entries)
        assert kept.inputs.texts == fresh.inputs.texts
        assert set(kept.inputs.open_conflicts) == set(fresh.inputs.open_conflicts)
        assert kept.inputs.withheld == fresh.inputs.withheld
        moment = kept.inputs.version.changed_at if kept.inputs.version else START
        for task in tasks:
            words = task.split()
            assert list(kept.ranking.ranked(frozenset(words), moment)) == list(
                fresh.ranking.ranked(frozenset(words), moment)
            )
            assert kept.search(words[-1:], None, 50) == fresh.search(words[-1:], None, 50)
            bundle = reader.bundle("t1", "ana", task, 600)
            exhaustive = reader.bundle("t1", "ana", task, 600, bundle.as_of)
            assert canonical_json(bundle.to_dict()) == canonical_json(exhaustive.to_dict())
        if earlier is not None:
            assert kept is not earlier
            lent.append(
                len({id(e) for e in earlier.inputs.entries} & {id(e) for e in kept.inputs.entries})
            )
    assert len(lent) == len(changes) - 1
    assert all(lent), lent  # every rebuild took over entries of the index it replaced


def test_memories_by_id_come_with_their_provenance_in_one_statement(store: Store) -> None:
    build_store(store, "ana", 120)  # the statements repeat: memories of many sources
    build_store(store, "bo", 12)
    memories = MemoryRepository(store)
    listed = {m.id: m for m in memories.memories("t1", "ana", statuses=None)}
    listed.update((m.id, m) for m in memories.memories("t1", "bo", statuses=None))
    assert max(len(m.source_episode_ids) for m in listed.values()) > 3
    wanted = [*listed, uuid.uuid4()]  # one that does not exist

    with statements_sent(store) as sent:
        found = memories.get("t1", wanted)

    assert found == listed  # every field, the sorted sources included
    assert len(sent) == 1
    assert memories.get("t2", wanted) == {}  # another tenant's ids find nothing
    assert memories.get("t1", []) == {}


class RecordingMemories(MemoryRepository):
    """The store's memory reads, noting which memories' full rows were read."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.rows_read: list[uuid.UUID] = []

    def get(self, tenant_id: str, memory_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, Any]:
        self.rows_read.extend(memory_ids)
        return super().get(tenant_id, memory_ids)


def test_a_bundle_reads_no_row_of_a_memory_in_an_open_conflict(store: Store) -> None:
    build_store(store, "ana", 200)
    memories = RecordingMemories(store)
    conflicts = memories.ranking_inputs(
        "t1", "ana", version_read=memories.version("t1", "ana")
    ).open_conflicts
    contested = {memory_id for conflict in conflicts for memory_id in conflict.memory_ids}
    assert len(contested) >= 10  # the statements contradict one another often

    reader = ContextReader(EpisodeRepository(store), memories)
    bundle = reader.bundle("t1", "ana", "where does ana live and what does she use", 4_000)

    assert memories.rows_read  # the probe sees the reads
    assert contested.isdisjoint(memories.rows_read)
    assert len(bundle.abstentions) == len(conflicts)  # stated instead, from the index
