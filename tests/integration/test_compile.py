"""The compile service: memories as a derivation, on both databases."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.compile.heuristic import HeuristicCompiler
from memsync.compile.types import CandidateMemory, EpisodeView, MemoryStatus
from memsync.episode import EpisodeDraft
from memsync.runtime.compiling import CompileService
from memsync.runtime.compiling.episodes import (
    marking_compiled,
    pending_episode_ids,
    uncompiled_episodes,
    uncompiled_stamps,
)
from memsync.runtime.compiling.memories import RECORDED_EPISODES_PER_SIDE
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store, metadata, tables

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def said(key: str, text: str, day: int, subject: str = "ana") -> EpisodeDraft:
    return EpisodeDraft(
        subject_id=subject,
        source="chat",
        type="message",
        payload={"messages": [{"role": "user", "content": text}]},
        idempotency_key=key,
        occurred_at=START + timedelta(days=day),
    )


def snapshot(store: Store) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, sorted: equal snapshots mean an unchanged store."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    with store.read() as connection:
        for table in metadata.sorted_tables:
            rows = connection.execute(sa.select(table)).all()
            tables[table.name] = sorted(tuple(map(str, row)) for row in rows)
    return tables


def active(store: Store, tenant: str = "t1", subject: str = "ana") -> dict[str, str]:
    memories = MemoryRepository(store).memories(tenant, subject)
    return {memory.memory_key: memory.content for memory in memories}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + timedelta(days=30))


EPISODES = [
    said("m1", "My name is Ana. I live in Lisbon and I work at Acme.", 0),
    said("m2", "I'm in Berlin this week for a conference.", 1),
    said("m3", "I prefer Postgres. We decided to use Alembic for migrations.", 2),
]


def test_the_second_compile_creates_nothing_and_changes_nothing(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    ingest.ingest("t1", EPISODES)
    first = compiler.compile("t1", "ana")
    before = snapshot(store)
    second = compiler.compile("t1", "ana")

    assert first.memories_created > 0
    assert first.episodes_compiled == 3
    assert (second.memories_created, second.episodes_compiled) == (0, 0)
    assert snapshot(store) == before


def test_re_ingesting_the_same_episodes_then_compiling_creates_nothing(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    ingest.ingest("t1", EPISODES)
    compiler.compile("t1", "ana")
    before = snapshot(store)

    ingest.ingest("t1", EPISODES)  # an overlapping re-read
    ingest.ingest("t1", list(reversed(EPISODES)))  # a backfill of everything
    again = compiler.compile("t1", "ana")

    assert again.memories_created == 0
    assert snapshot(store) == before


def test_berlin_this_week_does_not_contradict_living_in_lisbon(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    ingest.ingest("t1", EPISODES)
    compiler.compile("t1", "ana")
    contents = set(active(store).values())
    assert "Lives in Lisbon" in contents
    assert "Currently in Berlin" in contents


def test_a_revised_episode_supersedes_what_only_it_supported(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    ingest.ingest("t1", [said("m1", "I work at Acme.", 0), said("m2", "I live in Lisbon.", 1)])
    compiler.compile("t1", "ana")
    ingest.ingest("t1", [said("m1", "I work at Globex.", 0)])  # the message was edited
    result = compiler.compile("t1", "ana")

    memories = MemoryRepository(store).memories("t1", "ana", statuses=tuple(MemoryStatus))
    by_content = {memory.content: memory for memory in memories}
    assert by_content["Works at Acme"].status is MemoryStatus.SUPERSEDED
    assert by_content["Works at Globex"].status is MemoryStatus.ACTIVE
    assert by_content["Lives in Lisbon"].status is MemoryStatus.ACTIVE
    assert result.episodes_compiled == 1
    rules = {record.rule for record in MemoryRepository(store).supersessions("t1", "ana")}
    assert "source_revised" in rules


def test_a_record_lists_a_bounded_sample_of_each_side_and_counts_all(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    ingest.ingest("t1", [said(f"home{i}", "I live in Lisbon.", i) for i in range(100)])
    ingest.ingest("t1", [said("moved", "I moved to Porto.", 200)])
    compiler.compile("t1", "ana")

    [record] = [
        record
        for record in MemoryRepository(store).supersessions("t1", "ana")
        if record.rule == "claim_contradiction"
    ]
    assert (record.winner_episode_count, record.loser_episode_count) == (1, 100)
    assert len(record.winner_episode_ids) == 1
    assert len(record.loser_episode_ids) == RECORDED_EPISODES_PER_SIDE
    every = MemoryRepository(store).memories("t1", "ana", statuses=None)
    [lisbon] = [memory for memory in every if memory.content == "Lives in Lisbon"]
    assert len(lisbon.source_episode_ids) == 100  # the full provenance is kept
    assert set(record.loser_episode_ids) <= {str(e) for e in lisbon.source_episode_ids}


class ExplodingCompiler(HeuristicCompiler):
    """A compiler that derives, then fails: the transaction must roll everything back."""

    def compile(self, episodes: Sequence[EpisodeView]) -> list[CandidateMemory]:
        super().compile(episodes)
        raise RuntimeError("model went away")


def test_a_failed_compile_consumes_nothing(
    store: Store, ingest: IngestService, clock: FakeClock
) -> None:
    ingest.ingest("t1", EPISODES)
    before = snapshot(store)
    with pytest.raises(RuntimeError, match="model went away"):
        CompileService(store, compiler=ExplodingCompiler(), clock=clock).compile("t1", "ana")
    assert snapshot(store) == before

    retried = CompileService(store, clock=clock).compile("t1", "ana")
    assert retried.episodes_compiled == 3


class FailsOnCall(HeuristicCompiler):
    """The heuristic compiler, except that its ``failing_call``-th call raises."""

    def __init__(self, failing_call: int) -> None:
        super().__init__()
        self.calls = 0
        self.failing_call = failing_call

    def compile(self, episodes: Sequence[EpisodeView]) -> list[CandidateMemory]:
        self.calls += 1
        if self.calls == self.failing_call:
            raise RuntimeError("model went away")
        return super().compile(episodes)


def compiled_marks(store: Store) -> list[tuple[str, int]]:
    """(idempotency key, compiled revision) of every episode."""
    with store.read() as connection:
        rows = connection.execute(
            sa.text("SELECT idempotency_key, compiled_revision FROM episodes ORDER BY 1")
        )
        return [(key, compiled) for key, compiled in rows]


def test_a_failure_in_a_later_chunk_keeps_the_chunks_before_it(
    store: Store, ingest: IngestService, clock: FakeClock
) -> None:
    ingest.ingest("t1", EPISODES)  # m1, m2, m3 in time order
    failing = CompileService(store, compiler=FailsOnCall(2), clock=clock, chunk_episodes=2)

    with pytest.raises(RuntimeError, match="model went away"):
        failing.compile("t1", "ana")

    assert compiled_marks(store) == [("m1", 1), ("m2", 1), ("m3", 0)]
    kept = active(store)
    assert any("Lisbon" in content for content in kept.values())
    retried = CompileService(store, clock=clock).compile("t1", "ana")
    assert retried.episodes_compiled == 1
    assert compiled_marks(store) == [("m1", 1), ("m2", 1), ("m3", 1)]


class RevisesWhileDeriving(HeuristicCompiler):
    """The heuristic compiler, except that its ``revising_call``-th call, having been
    handed its episodes, revises one of them in the store before deriving from the copy
    it holds: what it returns describes a revision that is no longer current."""

    def __init__(self, store: Store, revising_call: int, revision: EpisodeDraft) -> None:
        super().__init__()
        self.store, self.revising_call, self.revision = store, revising_call, revision
        self.calls = 0

    def compile(self, episodes: Sequence[EpisodeView]) -> list[CandidateMemory]:
        self.calls += 1
        if self.calls == self.revising_call:
            IngestService(self.store).ingest("t1", [self.revision])
        return super().compile(episodes)


def revision_of(store: Store, key: str) -> tuple[int, int]:
    """(revision, compiled revision) of the episode with idempotency key ``key``."""
    with store.read() as connection:
        row = connection.execute(
            sa.text("SELECT revision, compiled_revision FROM episodes WHERE idempotency_key = :k"),
            {"k": key},
        ).one()
        return row.revision, row.compiled_revision


@pytest.mark.parametrize(
    ("revising_call", "revised"),
    [(1, said("m1", "I live in Porto.", 0)), (2, said("m3", "I prefer MySQL.", 2))],
    ids=["first chunk, derived on the compile's thread", "second chunk, derived ahead"],
)
def test_an_episode_revised_after_it_was_derived_from_is_compiled_at_its_new_revision(
    store: Store, ingest: IngestService, clock: FakeClock, revising_call: int, revised: EpisodeDraft
) -> None:
    ingest.ingest("t1", EPISODES)  # m1, m2 in the first chunk, m3 in the second
    compiler = RevisesWhileDeriving(store, revising_call, revised)

    result = CompileService(store, compiler=compiler, clock=clock, chunk_episodes=2).compile(
        "t1", "ana"
    )

    # Derived from the revision read before the chunk's lock, then checked under it:
    # the stale derivation is dropped and the current revision compiled instead.
    assert result.episodes_compiled == 3
    assert revision_of(store, revised.idempotency_key or "") == (2, 2)
    contents = set(active(store).values())
    text = revised.payload["messages"][0]["content"]
    assert any(text.rstrip(".").split()[-1] in content for content in contents)
    replaced = {"m1": "Lisbon", "m3": "Postgres"}[revised.idempotency_key or ""]
    assert not any(replaced in content for content in contents)
    assert CompileService(store, clock=clock).compile("t1", "ana").episodes_compiled == 0


def test_marks_are_written_with_the_chunk_or_not_at_all(
    store: Store, ingest: IngestService
) -> None:
    ingest.ingest("t1", EPISODES)
    with store.read() as connection:
        views = [
            found.view
            for found in uncompiled_episodes(
                connection,
                "t1",
                "ana",
                [p.id for p in pending_episode_ids(connection, "t1", "ana")],
            )
        ]

    with (
        pytest.raises(RuntimeError, match="resolver failed"),
        store.write() as connection,
        marking_compiled(connection, "t1", views),
    ):
        raise RuntimeError("resolver failed")
    assert compiled_marks(store) == [("m1", 0), ("m2", 0), ("m3", 0)]

    with store.write() as connection:
        with marking_compiled(connection, "t1", views[:2]):
            pass
        # Done when the block ends, in the same transaction.
        ids = [view.id for view in views]
        assert [stamp.id for stamp in uncompiled_stamps(connection, "t1", "ana", ids)] == ids[2:]
    assert compiled_marks(store) == [("m1", 1), ("m2", 1), ("m3", 0)]


@pytest.mark.parametrize("chunk_episodes", [1, 3, 7])
def test_compiling_in_chunks_gives_what_one_pass_gives(
    store: Store, clock: FakeClock, chunk_episodes: int
) -> None:
    lines = [
        "I live in Lisbon.",
        "I'm in Berlin this week.",
        "I prefer tea.",
        "I moved to Porto.",
        "I prefer coffee.",
        "The rate limit is 5000 requests per hour.",
        "I'm in Madrid this week.",
        "The rate limit is 6000 requests per hour.",
        "I use Postgres.",
        "We decided to use Alembic.",
    ] * 2
    episodes = [said(f"e{i}", text, i) for i, text in enumerate(lines)]
    IngestService(store, clock).ingest("one-pass", episodes)
    IngestService(store, clock).ingest("chunked", episodes)

    whole = CompileService(store, clock=clock).compile("one-pass", "ana")
    chunked = CompileService(store, clock=clock, chunk_episodes=chunk_episodes).compile(
        "chunked", "ana"
    )

    assert chunked.episodes_compiled == whole.episodes_compiled == len(episodes)
    assert chunked.memories_created == whole.memories_created
    assert active(store, "chunked") == active(store, "one-pass")
    assert CompileService(store, clock=clock).compile("chunked", "ana").memories_created == 0


def test_a_chunk_larger_than_one_statement_may_bind_is_read_in_slices(
    store: Store, ingest: IngestService, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "IDS_PER_STATEMENT", 2)
    ingest.ingest("t1", [said(f"m{i}", f"I like tool{i}.", i) for i in range(5)])

    result = CompileService(store, clock=clock).compile("t1", "ana")

    assert result.episodes_compiled == 5
    assert compiled_marks(store) == [(f"m{i}", 1) for i in range(5)]


def test_a_chunk_size_below_one_is_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="chunk_episodes must be at least 1"):
        CompileService(store, chunk_episodes=0)


@pytest.mark.parametrize("chunk_episodes", [2_000, 7])
def test_two_concurrent_compiles_of_one_subject_never_duplicate(
    store: Store, ingest: IngestService, clock: FakeClock, chunk_episodes: int
) -> None:
    ingest.ingest("t1", [said(f"m{i}", f"I like tool{i}. I live in Lisbon.", i) for i in range(40)])
    start_together = threading.Barrier(2)
    results = []

    def compile_once() -> None:
        start_together.wait(timeout=30)
        service = CompileService(store, clock=clock, chunk_episodes=chunk_episodes)
        results.append(service.compile("t1", "ana"))

    threads = [threading.Thread(target=compile_once) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert len(results) == 2
    # Chunks of the two compiles may interleave; each episode is compiled by one.
    assert sum(result.episodes_compiled for result in results) == 40
    if chunk_episodes >= 40:
        assert sorted(result.episodes_compiled for result in results) == [0, 40]
    with store.read() as connection:
        rows = connection.execute(
            sa.text("SELECT count(*), count(DISTINCT memory_key) FROM memories")
        )
        total, distinct = rows.one()
    assert total == distinct == sum(result.memories_created for result in results)


def test_the_two_stripe_rates_are_flagged_not_overwritten(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    ingest.ingest("t1", [said("r1", "Stripe charges 3.5% + 35¢ per card payment.", 0)])
    compiler.compile("t1", "ana")
    ingest.ingest("t1", [said("r2", "Stripe charges 2.9% + 30¢ per card payment.", 5)])
    result = compiler.compile("t1", "ana")

    assert result.conflicts_opened == 1
    [conflict] = MemoryRepository(store).conflicts("t1", "ana")
    assert conflict.conflict.rule.value == "lexical"
    assert conflict.conflict.threshold == pytest.approx(0.6)
    contents = set(active(store).values())
    assert {
        "Stripe charges 3.5% + 35¢ per card payment",
        "Stripe charges 2.9% + 30¢ per card payment",
    } <= contents


def test_a_person_resolves_a_flagged_conflict(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    ingest.ingest("t1", [said("r1", "Stripe charges 3.5% + 35¢ per card payment.", 0)])
    ingest.ingest("t1", [said("r2", "Stripe charges 2.9% + 30¢ per card payment.", 5)])
    compiler.compile("t1", "ana")
    [record] = MemoryRepository(store).conflicts("t1", "ana")
    keep, drop = record.conflict.memory_ids

    resolution = compiler.resolve_conflict("t1", record.conflict.id, keep)

    assert resolution.superseded_memory_id == drop
    memories = MemoryRepository(store).get("t1", [keep, drop])
    assert memories[keep].status is MemoryStatus.ACTIVE
    assert memories[drop].status is MemoryStatus.SUPERSEDED
    assert MemoryRepository(store).conflicts("t1", "ana") == []
    assert compiler.compile("t1", "ana").memories_created == 0


def test_compiles_are_tenant_scoped(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    ingest.ingest("t1", [said("m1", "I live in Lisbon.", 0)])
    ingest.ingest("t2", [said("m1", "I live in Porto.", 0)])
    compiler.compile("t1", "ana")
    compiler.compile("t2", "ana")
    assert set(active(store, "t1").values()) >= {"Lives in Lisbon"}
    assert "Lives in Porto" not in set(active(store, "t1").values())
    assert set(active(store, "t2").values()) >= {"Lives in Porto"}


# -- property: one pass or k batches gives the same active memories ----------------------

SENTENCES = [
    "I live in Lisbon.",
    "I moved to Porto.",
    "I work at Acme.",
    "I now work at Globex.",
    "I'm in Berlin this week.",
    "I'm in Madrid this week.",
    "I prefer tea.",
    "I prefer coffee.",
    "I use Postgres.",
    "I don't use MySQL.",
    "We decided to use Alembic.",
    "The rate limit is 5000 requests per hour.",
]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=8),
    st.lists(st.integers(1, 7), max_size=3),
)
def test_compiling_in_one_pass_or_in_batches_gives_the_same_active_memories(
    store: Store, statements: list[str], cuts: list[int]
) -> None:
    clock = FakeClock(START + timedelta(days=60))
    episodes = [said(f"e{i}", text, i) for i, text in enumerate(statements)]
    one_pass, batched = f"one-{uuid.uuid4()}", f"batched-{uuid.uuid4()}"
    ingest, compiler = IngestService(store, clock), CompileService(store, clock=clock)

    ingest.ingest(one_pass, episodes)
    compiler.compile(one_pass, "ana")

    bounds = sorted({0, len(episodes), *(cut for cut in cuts if cut < len(episodes))})
    for start, end in itertools.pairwise(bounds):
        ingest.ingest(batched, episodes[start:end])
        compiler.compile(batched, "ana")

    assert active(store, batched) == active(store, one_pass)
