"""Chunking and incremental compiles: the current truth depends on the episodes only.

The same episodes compiled (a) in one transaction, (b) in chunks of any size, (c)
incrementally, a compile after every few ingests in time order, and (d) for claim-keyed
statements, incrementally in any order of arrival (a backfill of older records after
newer ones) leave the same active memories with the same provenance and the same open
conflicts. See docs/compile.md, "Chunking and incremental compiles".
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import Connection

from memsync.clock import FakeClock
from memsync.compile.types import MemoryKind, MemoryStatus
from memsync.episode import EpisodeDraft
from memsync.runtime.compiling import CompileService
from memsync.runtime.compiling.memories import (
    bump_memory_version,
    delete_subject_memories,
    load_for_resolution,
)
from memsync.runtime.compiling.service import ChunkCommitting
from memsync.runtime.compiling.settings import DEFAULT_CACHED_MEMORIES
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import episodes as episodes_table

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
SUBJECT = "ana"
T = TypeVar("T")

# Claim-keyed statements that collide: single-valued slots under recency_wins
# (this week), keep_existing with and without explicit changes (home, employer),
# multi-valued keys with a negation, and two rates the fact policy flags.
CLAIMED = [
    "I live in Lisbon.",
    "I live in Porto.",
    "I moved to Porto.",
    "I moved to Lisbon.",
    "I work at Acme.",
    "I work at Globex.",
    "I now work at Globex.",
    "I'm in Berlin this week.",
    "I'm in Madrid this week.",
    "I prefer tea.",
    "I use Postgres.",
    "I don't use Postgres.",
    "The rate limit is 5000 requests per hour.",
    "The rate limit is 1000 requests per hour.",
]
# Unkeyed statements the lexical matcher pits against each other (decisions:
# recency_wins): a chain, queue~queue and Postgres~Postgres, but not Redis~cache.
LEXICAL = [
    "We decided to use Redis for the queue.",
    "We decided to use Postgres for the queue.",
    "We decided to use Postgres for the cache.",
]

PROPERTY = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def said(number: int, text: str, day: int) -> EpisodeDraft:
    return EpisodeDraft(
        subject_id=SUBJECT,
        source="chat",
        type="message",
        payload={"messages": [{"role": "user", "content": text}]},
        idempotency_key=f"e{number}",
        occurred_at=START + timedelta(days=day),
    )


def one_a_day(sentences: Sequence[str]) -> st.SearchStrategy[list[EpisodeDraft]]:
    """Up to 10 episodes, each on its own day: no two episodes share a moment, so no
    decision rests on the order of their (random) ids, and two tenants given the same
    history make the same decisions."""
    return st.lists(st.sampled_from(sentences), min_size=1, max_size=10).map(
        lambda texts: [said(number, text, number) for number, text in enumerate(texts)]
    )


def histories(sentences: Sequence[str]) -> st.SearchStrategy[list[EpisodeDraft]]:
    """Up to 10 episodes over 5 days, so that statements collide and share moments."""
    said_on = st.tuples(st.sampled_from(sentences), st.integers(min_value=0, max_value=4))
    return st.lists(said_on, min_size=1, max_size=10).map(
        lambda pairs: [said(number, text, day) for number, (text, day) in enumerate(pairs)]
    )


def idempotency_keys(store: Store, tenant: str) -> dict[uuid.UUID, str]:
    """Each episode's idempotency key, by id: what provenance is compared by (episode
    ids are random per tenant)."""
    with store.read() as connection:
        rows = connection.execute(
            sa.select(episodes_table.c.id, episodes_table.c.idempotency_key).where(
                episodes_table.c.tenant_id == tenant
            )
        )
        return {row.id: row.idempotency_key for row in rows}


def truth(store: Store, tenant: str) -> dict[str, Any]:
    """The subject's current truth: each active memory with its provenance (as
    idempotency keys) and times, and the open conflicts (as memory keys)."""
    repository = MemoryRepository(store)
    key_of = idempotency_keys(store, tenant)
    memories = {
        memory.memory_key: (
            memory.content,
            sorted(key_of[episode] for episode in memory.source_episode_ids),
            memory.valid_from,
            memory.last_asserted,
        )
        for memory in repository.memories(tenant, SUBJECT)
    }
    conflicts = sorted(
        tuple(sorted(record.conflict.memory_keys))
        for record in repository.conflicts(tenant, SUBJECT)
    )
    return {"memories": memories, "conflicts": conflicts}


def records(store: Store, tenant: str) -> list[tuple[Any, ...]]:
    """The supersession records as decisions: rule, winner, loser, score."""
    repository = MemoryRepository(store)
    key = {m.id: m.memory_key for m in repository.memories(tenant, SUBJECT, statuses=None)}
    return sorted(
        (r.rule, key.get(r.winner_memory_id), key.get(r.loser_memory_id), r.score)
        for r in repository.supersessions(tenant, SUBJECT)
    )


def every_memory(store: Store, tenant: str) -> dict[str, Any]:
    """Each of the subject's memories in any status, as the resolver would load it
    again: status, validity, the rule that set the status, and provenance (as
    idempotency keys)."""
    repository = MemoryRepository(store)
    key_of = idempotency_keys(store, tenant)
    return {
        memory.memory_key: (
            memory.status,
            memory.status_rule,
            memory.valid_from,
            memory.valid_to,
            memory.last_asserted,
            memory.explicit_change,
            sorted(key_of[episode] for episode in memory.source_episode_ids),
        )
        for memory in repository.memories(tenant, SUBJECT, statuses=None)
    }


class Compiles:
    """Fresh tenants of one store, each compiled in its own way, on one fake clock."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = FakeClock(START + timedelta(days=30))
        self.ingest = IngestService(store, self.clock)

    def tenant(self) -> str:
        return f"t-{uuid.uuid4().hex[:12]}"

    def compiler(
        self, chunk_episodes: int, cached_memories: int = DEFAULT_CACHED_MEMORIES
    ) -> CompileService:
        return CompileService(
            self.store,
            clock=self.clock,
            chunk_episodes=chunk_episodes,
            cached_memories=cached_memories,
        )

    def at_once(
        self,
        episodes: Sequence[EpisodeDraft],
        chunk_episodes: int = 10_000,
        on_chunk: OnChunk | None = None,
    ) -> str:
        tenant = self.tenant()
        self.ingest.ingest(tenant, list(episodes))
        self.clock.advance(timedelta(seconds=1))
        self.compiler(chunk_episodes).compile(
            tenant, SUBJECT, on_chunk=on_chunk(tenant) if on_chunk else None
        )
        return tenant

    def incrementally(
        self,
        batches: Sequence[Sequence[EpisodeDraft]],
        chunk_episodes: int = 10_000,
        on_chunk: OnChunk | None = None,
        cached_memories: int = DEFAULT_CACHED_MEMORIES,
    ) -> str:
        tenant, compiler = self.tenant(), self.compiler(chunk_episodes, cached_memories)
        for batch in batches:
            self.ingest.ingest(tenant, list(batch))
            self.clock.advance(timedelta(seconds=1))
            compiler.compile(tenant, SUBJECT, on_chunk=on_chunk(tenant) if on_chunk else None)
        return tenant


OnChunk = Callable[[str], ChunkCommitting]
"""A tenant's ``on_chunk`` callback."""


def bump_the_version(tenant: str) -> ChunkCommitting:
    def bump(connection: Connection, _counts: Mapping[str, Any]) -> None:
        bump_memory_version(connection, tenant, SUBJECT, START)

    return bump


CHUNK_SIZES = st.integers(min_value=1, max_value=4)
CUTS = st.lists(st.integers(min_value=0, max_value=10), min_size=1, max_size=4)
"""Where :func:`by_moment` cuts a history into the batches of incremental compiles."""


def cut(items: Sequence[T], cuts: Sequence[int]) -> list[list[T]]:
    bounds = sorted({0, len(items), *(c % (len(items) + 1) for c in cuts)})
    return [list(items[start:end]) for start, end in itertools.pairwise(bounds)]


def by_moment(episodes: Sequence[EpisodeDraft], cuts: Sequence[int]) -> list[list[EpisodeDraft]]:
    """Time-ordered batches, each cut between two moments (never inside one)."""
    moments = sorted({episode.occurred_at for episode in episodes})
    groups = [[e for e in episodes if e.occurred_at == moment] for moment in moments]
    return [[e for group in batch for e in group] for batch in cut(groups, cuts)]


@PROPERTY
@given(histories(CLAIMED + LEXICAL), CHUNK_SIZES, CUTS)
def test_chunk_size_and_time_ordered_incremental_compiles_leave_one_truth(
    store: Store, episodes: list[EpisodeDraft], chunk_episodes: int, cuts: list[int]
) -> None:
    compiles = Compiles(store)

    once = compiles.at_once(episodes)
    chunked = compiles.at_once(episodes, chunk_episodes)
    incremental = compiles.incrementally(by_moment(episodes, cuts))

    assert truth(store, chunked) == truth(store, once)
    assert truth(store, incremental) == truth(store, once)


@PROPERTY
@given(one_a_day(CLAIMED + LEXICAL), CHUNK_SIZES, CUTS)
def test_chunks_that_carry_the_memories_on_decide_as_chunks_that_reload_them(
    store: Store, episodes: list[EpisodeDraft], chunk_episodes: int, cuts: list[int]
) -> None:
    # Each chunk starts from the memories the chunk before it left, instead of loading
    # them again; a chunk that bumps the subject's memory version (as any other writer
    # of its memories does) makes the next one load them. Both must leave the same
    # store, history included. Incremental compiles meet memories that earlier
    # compiles left inactive, which a later chunk's candidates may name again.
    compiles = Compiles(store)
    batches = by_moment(episodes, cuts)

    carried = compiles.at_once(episodes, chunk_episodes)
    reloaded = compiles.at_once(episodes, chunk_episodes, on_chunk=bump_the_version)
    carried_incrementally = compiles.incrementally(batches, chunk_episodes)
    reloaded_incrementally = compiles.incrementally(batches, chunk_episodes, bump_the_version)

    assert every_memory(store, carried) == every_memory(store, reloaded)
    assert records(store, carried) == records(store, reloaded)
    assert every_memory(store, carried_incrementally) == every_memory(store, reloaded_incrementally)
    assert records(store, carried_incrementally) == records(store, reloaded_incrementally)


@PROPERTY
@given(
    histories(CLAIMED),
    st.randoms(use_true_random=False),
    st.lists(st.integers(min_value=0, max_value=10), min_size=1, max_size=4),
)
def test_claims_arriving_in_any_order_leave_the_truth_of_one_compile(
    store: Store, episodes: list[EpisodeDraft], shuffler: Any, cuts: list[int]
) -> None:
    compiles = Compiles(store)
    arrival = list(episodes)
    shuffler.shuffle(arrival)

    once = compiles.at_once(episodes)
    late = compiles.incrementally(cut(arrival, cuts))

    assert truth(store, late) == truth(store, once)


# -- regressions -------------------------------------------------------------------------


def test_an_older_home_city_compiled_after_a_newer_one_holds_under_keep_existing(
    store: Store,
) -> None:
    # Regression: keep_existing kept whichever plain statement was compiled first, so a
    # backfill of an older record lost to a newer one that a time-ordered compile keeps out.
    compiles = Compiles(store)
    porto, lisbon = said(1, "I live in Porto.", 0), said(2, "I live in Lisbon.", 3)

    once = compiles.at_once([porto, lisbon])
    backfilled = compiles.incrementally([[lisbon], [porto]])

    assert truth(store, backfilled) == truth(store, once)
    contents = {content for content, *_ in truth(store, backfilled)["memories"].values()}
    assert "Lives in Porto" in contents
    assert "Lives in Lisbon" not in contents


@pytest.mark.parametrize("chunk_episodes", [2, 3])
def test_a_chunk_never_splits_episodes_of_one_moment(store: Store, chunk_episodes: int) -> None:
    # Regression: two lexically matching decisions of one moment, split across chunks,
    # were decided in episode id order (random) instead of by memory key, so the chunk
    # size picked the winner. Eight independent pairs make a random order show.
    compiles = Compiles(store)
    pairs = [
        [
            said(2 * k, f"We decided to use Redis for queue{k}.", k),
            said(2 * k + 1, f"We decided to use Postgres for queue{k}.", k),
        ]
        for k in range(8)
    ]
    episodes = [episode for pair in pairs for episode in pair]

    once = compiles.at_once(episodes)
    chunked = compiles.at_once(episodes, chunk_episodes)

    assert truth(store, chunked) == truth(store, once)
    assert records(store, chunked) == records(store, once)


def test_a_chunk_loads_the_memories_again_when_they_changed_after_the_chunk_before(
    store: Store,
) -> None:
    # A chunk starts from the memories the chunk before it left, unless the subject's
    # memories changed in between. Here the first chunk's own transaction deletes them
    # after it wrote (as forgetting the subject would): the second chunk must find
    # "Lisbon" gone and create it again from its own episode alone.
    compiles = Compiles(store)
    tenant = compiles.tenant()
    first, second = said(1, "I live in Lisbon.", 0), said(2, "I live in Lisbon.", 1)
    compiles.ingest.ingest(tenant, [first, second])
    chunks = 0

    def forget_after_the_first_chunk(connection: Connection, _counts: Mapping[str, Any]) -> None:
        nonlocal chunks
        chunks += 1
        if chunks == 1:
            delete_subject_memories(connection, tenant, SUBJECT)

    compiles.compiler(1).compile(tenant, SUBJECT, on_chunk=forget_after_the_first_chunk)

    assert chunks == 2
    memories = truth(store, tenant)["memories"]
    assert memories
    assert all(sources == ["e2"] for _, sources, *_ in memories.values())


def test_a_carried_chunk_loads_the_inactive_memory_its_candidate_names_again(
    store: Store,
) -> None:
    # The first compile leaves "Berlin this week" superseded by "Madrid this week". In
    # the second, the first chunk never names Berlin, so the memories it carries on do
    # not hold it; the second chunk asserts Berlin again and must find the stored memory
    # (and reinstate it), not create a second one with its key.
    compiles = Compiles(store)
    batches = [
        [said(1, "I'm in Berlin this week.", 0), said(2, "I'm in Madrid this week.", 1)],
        [said(3, "I live in Lisbon.", 2), said(4, "I'm in Berlin this week.", 3)],
    ]

    carried = compiles.incrementally(batches, chunk_episodes=1)
    reloaded = compiles.incrementally(batches, chunk_episodes=1, on_chunk=bump_the_version)

    assert every_memory(store, carried) == every_memory(store, reloaded)
    assert records(store, carried) == records(store, reloaded)
    berlin = [
        sources
        for content, sources, *_ in truth(store, carried)["memories"].values()
        if "Berlin" in content
    ]
    # The claim and the summary of the two identical messages, each active again.
    assert berlin
    assert all(sources == ["e1", "e4"] for sources in berlin)


# -- what a process keeps of a subject's last compile ----------------------------------


@PROPERTY
@given(one_a_day(CLAIMED + LEXICAL), st.integers(min_value=1, max_value=3))
def test_compiles_in_two_processes_taking_turns_decide_as_compiles_that_load_everything(
    store: Store, episodes: list[EpisodeDraft], batch_size: int
) -> None:
    # Each service (a process) keeps what its last compile of the subject left and starts
    # the next from it; the other's compile in between changed the subject's memories,
    # and what was kept must then be read again, not trusted.
    compiles = Compiles(store)
    batches = [episodes[at : at + batch_size] for at in range(0, len(episodes), batch_size)]
    services = itertools.cycle([compiles.compiler(10_000), compiles.compiler(10_000)])

    taking_turns = compiles.tenant()
    for batch in batches:
        compiles.ingest.ingest(taking_turns, list(batch))
        compiles.clock.advance(timedelta(seconds=1))
        next(services).compile(taking_turns, SUBJECT)
    loading = compiles.incrementally(batches, cached_memories=0)

    assert every_memory(store, taking_turns) == every_memory(store, loading)
    assert records(store, taking_turns) == records(store, loading)


def test_a_compile_after_one_in_the_same_process_reads_only_the_memories_it_names(
    store: Store,
) -> None:
    compiles = Compiles(store)
    first = [said(n, text, n) for n, text in enumerate(CLAIMED[:6])]
    second = [said(10, "I'm in Madrid this week.", 10), said(11, "I prefer coffee.", 11)]

    def reads_of_active_memories(cached_memories: int) -> list[str]:
        tenant, service = compiles.tenant(), compiles.compiler(10_000, cached_memories)
        compiles.ingest.ingest(tenant, first)
        service.compile(tenant, SUBJECT)
        compiles.ingest.ingest(tenant, second)
        statements: list[str] = []

        def seen(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
            statements.append(" ".join(statement.split()))

        sa.event.listen(store.engine, "before_cursor_execute", seen)
        try:
            service.compile(tenant, SUBJECT)
        finally:
            sa.event.remove(store.engine, "before_cursor_execute", seen)
        return [
            sql
            for sql in statements
            if sql.startswith("SELECT") and "FROM memories" in sql and "memories.status =" in sql
        ]

    assert reads_of_active_memories(cached_memories=0)  # the probe sees the load
    assert reads_of_active_memories(cached_memories=1_000) == []


def test_a_compile_loads_only_the_episode_summaries_its_candidates_name(store: Store) -> None:
    # Every episode leaves an active summary, which no contest ever involves: loading
    # them all made each compile read a row for every episode the subject ever had.
    compiles = Compiles(store)
    tenant = compiles.tenant()
    compiles.ingest.ingest(tenant, [said(n, text, n) for n, text in enumerate(CLAIMED + LEXICAL)])
    compiles.compiler(10_000, cached_memories=0).compile(tenant, SUBJECT)
    stored = MemoryRepository(store).memories(tenant, SUBJECT, statuses=None)
    summaries = sorted(m.memory_key for m in stored if m.kind is MemoryKind.EPISODE_SUMMARY)
    contending = {
        m.memory_key
        for m in stored
        if m.status is MemoryStatus.ACTIVE and m.kind is not MemoryKind.EPISODE_SUMMARY
    }
    superseded = next(m.memory_key for m in stored if m.status is MemoryStatus.SUPERSEDED)
    assert len(summaries) == len(CLAIMED + LEXICAL)
    assert contending

    with store.read() as connection:
        loaded = load_for_resolution(
            connection, tenant, SUBJECT, {summaries[0], superseded, "unknown"}
        )

    assert sorted(m.memory_key for m in loaded) == sorted(contending | {summaries[0], superseded})
