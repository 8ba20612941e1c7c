"""The derived state of a subject is a function of its episodes and the configuration.

Memories (status, status rule, validity, assertion time, provenance), supersession
records (rule, claim key, score, threshold, winner, loser and their episodes) and open
conflicts are the same whatever order the episodes arrived in, however the compiles were
scheduled and whatever the chunk size: the same as one compile of every episode in time
order. What is not derivation — ``created_at``, ``updated_at``, ``job_id``,
``decided_at`` and ``detected_at``, which say when the store learned something — is
not compared. See docs/compile.md, "Valid time and the order of arrival".
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.compile.resolve import memory_id
from memsync.compile.types import MemoryStatus, SupersessionRule
from memsync.episode import EpisodeDraft, Tombstone
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store
from tests.integration.test_compile_chunking import (
    CHUNK_SIZES,
    CLAIMED,
    CUTS,
    LEXICAL,
    PROPERTY,
    SUBJECT,
    Compiles,
    cut,
    histories,
    idempotency_keys,
    said,
)


def derivation(store: Store, tenant: str) -> dict[str, Any]:
    """Everything about the subject that is derived from its episodes, with episodes
    named by their idempotency keys (their ids are drawn per tenant)."""
    repository = MemoryRepository(store)
    key_of = idempotency_keys(store, tenant)

    def named(ids: Any) -> list[str]:
        return sorted(key_of[uuid.UUID(str(episode))] for episode in ids)

    memories = {
        memory.memory_key: (
            memory.status,
            memory.status_rule,
            memory.valid_from,
            memory.valid_to,
            memory.last_asserted,
            memory.explicit_change,
            named(memory.source_episode_ids),
        )
        for memory in repository.memories(tenant, SUBJECT, statuses=None)
    }
    records = sorted(
        (
            (
                record.rule,
                record.claim_key,
                record.score,
                record.threshold,
                str(record.winner_memory_id),
                str(record.loser_memory_id),
                named(record.winner_episode_ids),
                named(record.loser_episode_ids),
            )
            for record in repository.supersessions(tenant, SUBJECT)
        ),
        key=repr,
    )
    conflicts = sorted(
        (tuple(sorted(c.conflict.memory_keys)), c.conflict.rule, c.conflict.score)
        for c in repository.conflicts(tenant, SUBJECT)
    )
    return {"memories": memories, "records": records, "conflicts": conflicts}


# A wrong decision shows only for some orders of some histories: more examples than
# the chunking properties take (about 0.1 s each on SQLite).
ORDERS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@ORDERS
@given(histories(CLAIMED + LEXICAL), st.randoms(use_true_random=False), CUTS, CHUNK_SIZES)
def test_any_arrival_order_and_schedule_derive_what_one_compile_in_time_order_does(
    store: Store, episodes: list[EpisodeDraft], shuffler: Any, cuts: list[int], chunk: int
) -> None:
    # Up to ten statements over five days (so several share a moment), arriving in a
    # random order, compiled after random batches in chunks of 1 to 4 episodes.
    compiles = Compiles(store)
    arrival = list(episodes)
    shuffler.shuffle(arrival)

    once = compiles.at_once(episodes)
    scheduled = compiles.incrementally(cut(arrival, cuts), chunk_episodes=chunk)

    assert derivation(store, scheduled) == derivation(store, once)


def test_a_backfill_of_older_statements_changes_who_beat_whom_as_one_compile_would(
    store: Store,
) -> None:
    # Day 0 Redis for the queue, day 2 Postgres for the queue, day 4 Postgres for the
    # cache: in time order Redis loses to Postgres-queue, which loses to Postgres-cache.
    # Arriving newest first, Postgres-queue meets only Postgres-cache and loses; Redis,
    # when it comes, meets nothing active it matches: the re-decision makes it lose to
    # Postgres-queue at day 2, as in one compile.
    compiles = Compiles(store)
    redis, queue, cache = (said(n, text, 2 * n) for n, text in enumerate(LEXICAL))

    once = compiles.at_once([redis, queue, cache])
    backfilled = compiles.incrementally([[cache], [queue], [redis]])

    assert derivation(store, backfilled) == derivation(store, once)
    memories = MemoryRepository(store).memories(backfilled, SUBJECT, statuses=None)
    redis_memory = next(m for m in memories if "Redis" in m.content and m.claim_key is None)
    assert redis_memory.status is MemoryStatus.SUPERSEDED
    assert redis_memory.valid_to == queue.occurred_at


def test_two_episodes_of_one_moment_saying_one_thing_are_one_assertion(store: Store) -> None:
    # Same moment, same statement, one worded as an explicit change: contested as one
    # explicit assertion naming both episodes, whichever arrived (or got the lower id)
    # first, so "I moved to Porto" replaces Lisbon under keep_existing either way.
    compiles = Compiles(store)
    lisbon = said(1, "I live in Lisbon.", 0)
    plain, explicit = said(2, "I live in Porto.", 1), said(3, "I moved to Porto.", 1)

    once = compiles.at_once([lisbon, plain, explicit])
    one_way = compiles.incrementally([[lisbon], [explicit], [plain]])
    other_way = compiles.incrementally([[plain], [lisbon, explicit]])

    assert derivation(store, one_way) == derivation(store, once)
    assert derivation(store, other_way) == derivation(store, once)
    [porto] = [
        m
        for m in MemoryRepository(store).memories(once, SUBJECT)
        if m.claim_key == "location.home_city"
    ]
    assert "porto" in (porto.claim_value or "")
    assert sorted(idempotency_keys(store, once)[e] for e in porto.source_episode_ids) == [
        "e2",
        "e3",
    ]


def active_times(store: Store, tenant: str) -> dict[str, Any]:
    """The subject's active memories and their validity and latest assertion (what the
    sources date; the store's provenance lists also keep the sources that went away)."""
    return {
        m.memory_key: (m.valid_from, m.valid_to, m.last_asserted)
        for m in MemoryRepository(store).memories(tenant, SUBJECT)
    }


@PROPERTY
@given(
    st.permutations(range(4)),
    st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=3),
)
def test_deleting_the_winners_source_brings_back_what_the_other_sources_support(
    store: Store, order: list[int], cuts: list[int]
) -> None:
    # Berlin (days 0 and 2) and Madrid (day 1) this week, then Madrid again (day 3):
    # Madrid wins. Whatever order they arrived in, deleting both Madrid episodes brings
    # Berlin back (winner_retired), valid from day 0, as a compile of what is left has it.
    compiles = Compiles(store)
    episodes = [
        said(0, "I'm in Berlin this week.", 0),
        said(1, "I'm in Madrid this week.", 1),
        said(2, "I'm in Berlin this week.", 2),
        said(3, "I'm in Madrid this week.", 3),
    ]
    arrival = [episodes[i] for i in order]

    tenant = compiles.incrementally(cut(arrival, cuts))
    compiles.clock.advance(timedelta(hours=1))
    compiles.ingest.tombstone(tenant, [Tombstone("e1"), Tombstone("e3")])
    compiles.compiler(10).compile(tenant, SUBJECT)
    remaining = compiles.at_once([episodes[0], episodes[2]])

    assert active_times(store, tenant) == active_times(store, remaining)
    berlin = next(
        m
        for m in MemoryRepository(store).memories(tenant, SUBJECT)
        if m.claim_key == "location.current"
    )
    assert berlin.status_rule is SupersessionRule.WINNER_RETIRED


OTHER = "bob"
# What happens to a compiled episode: its text is edited, it is deleted at the source,
# or it is filed under another subject.
CHANGES = st.one_of(
    st.tuples(st.just("edit"), st.sampled_from(CLAIMED + LEXICAL)),
    st.tuples(st.just("delete"), st.just("")),
    st.tuples(st.just("move"), st.just("")),
)


def changed(
    compiles: Compiles, tenant: str, episode: EpisodeDraft, change: tuple[str, str]
) -> None:
    what, text = change
    if what == "delete":
        compiles.ingest.tombstone(tenant, [Tombstone(episode.idempotency_key or "")])
    elif what == "edit":
        edited = said(int((episode.idempotency_key or "e0")[1:]), text, 0)
        compiles.ingest.ingest(tenant, [replace(edited, occurred_at=episode.occurred_at)])
    else:
        compiles.ingest.ingest(tenant, [replace(episode, subject_id=OTHER)])


def compile_both(compiles: Compiles, tenant: str, chunk: int) -> None:
    compiles.clock.advance(timedelta(seconds=1))
    for subject in (SUBJECT, OTHER):
        compiles.compiler(chunk).compile(tenant, subject)


# How the store got where it is when evidence went away: a memory the remaining
# evidence does not derive exists only if a compile saw the evidence it rested on, and
# the records of rules ``source_*`` and ``winner_retired`` (a memory coming back when
# its winner was retired) tell when in the compile history that happened. Transaction
# time, not derivation.
HISTORY_RULES = {
    SupersessionRule.SOURCE_REVISED,
    SupersessionRule.SOURCE_MOVED,
    SupersessionRule.SOURCE_DELETED,
    SupersessionRule.WINNER_RETIRED,
}


def current_derivation(store: Store, tenant: str, derived: set[str]) -> dict[str, Any]:
    """:func:`derivation` of what the current evidence supports: the memories whose keys
    are ``derived`` (what one compile of the remaining episodes derives), the records
    between them, and no record or status rule that tells how evidence went away
    (:data:`HISTORY_RULES`)."""
    full = derivation(store, tenant)
    derived_ids = {str(memory_id(key)) for key in derived}
    return {
        "memories": {
            key: (status, None if rule in HISTORY_RULES else rule, *rest)
            for key, (status, rule, *rest) in full["memories"].items()
            if key in derived
        },
        "records": [
            record
            for record in full["records"]
            if record[0] not in HISTORY_RULES
            and record[4] in derived_ids | {"None"}
            and record[5] in derived_ids | {"None"}
        ],
        "conflicts": full["conflicts"],
    }


def remaining(
    episodes: list[EpisodeDraft], targets: list[tuple[EpisodeDraft, tuple[str, str]]]
) -> list[EpisodeDraft]:
    """The subject's episodes once ``targets`` changed them: deleted and moved ones gone,
    edited ones edited."""
    change_of = {episode.idempotency_key: change for episode, change in targets}
    left = []
    for episode in episodes:
        what, text = change_of.get(episode.idempotency_key, ("", ""))
        if what == "edit":
            edited = said(int((episode.idempotency_key or "e0")[1:]), text, 0)
            left.append(replace(edited, occurred_at=episode.occurred_at))
        elif not what:
            left.append(episode)
    return left


Changes = list[tuple[EpisodeDraft, tuple[str, str]]]


def changed_both_ways(
    compiles: Compiles,
    episodes: list[EpisodeDraft],
    arrivals: list[list[EpisodeDraft]],
    chunk: int,
    change_batches: list[Changes],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The :func:`current_derivation` of two tenants given ``episodes`` and then the
    changes of ``change_batches``: one compiled after ``arrivals`` (batches in order)
    and after each batch of changes, in chunks of ``chunk``; the other compiled once
    with every episode and once with every change."""
    targets = [target for batch in change_batches for target in batch]
    once = compiles.at_once(episodes)
    for episode, change in targets:
        changed(compiles, once, episode, change)
    compile_both(compiles, once, 10_000)
    scheduled = compiles.incrementally(arrivals, chunk_episodes=chunk)
    for batch in change_batches:
        for episode, change in batch:
            changed(compiles, scheduled, episode, change)
        compile_both(compiles, scheduled, chunk)

    store = compiles.store
    derived = set(derivation(store, compiles.at_once(remaining(episodes, targets)))["memories"])
    return (
        current_derivation(store, scheduled, derived),
        current_derivation(store, once, derived),
    )


@settings(ORDERS, max_examples=200)
@given(
    histories(CLAIMED + LEXICAL),
    st.randoms(use_true_random=False),
    CUTS,
    CHUNK_SIZES,
    st.lists(CHANGES, min_size=1, max_size=4),
    CUTS,
)
def test_edits_moves_and_deletions_in_any_schedule_derive_what_one_compile_does(
    store: Store,
    episodes: list[EpisodeDraft],
    shuffler: Any,
    cuts: list[int],
    chunk: int,
    changes: list[tuple[str, str]],
    change_cuts: list[int],
) -> None:
    # The history arrives in a random order and is compiled on a random schedule; then
    # some of its episodes (each at most once) are edited, deleted or moved, compiled
    # after random batches of those changes. One compile of the history, then one of
    # all the changes, must derive the same.
    arrival = list(episodes)
    shuffler.shuffle(arrival)
    targets = [(episodes[i], change) for i, change in enumerate(changes[: len(episodes)])]

    scheduled, once = changed_both_ways(
        Compiles(store), episodes, cut(arrival, cuts), chunk, cut(targets, change_cuts)
    )

    assert scheduled == once


def test_a_summary_moved_away_and_asserted_again_later_is_dated_by_the_later_source(
    store: Store,
) -> None:
    # The schedule the property above found: Porto (e0) and Lisbon (e1, e2) on day 0,
    # Lisbon again (e3) on day 1, compiled; e0 moves to another subject (its summary
    # is tombstoned, source_moved), then e1 and e2 are deleted and e3 edited to say
    # Porto. The summary "I live in Porto." comes back from e3 alone: valid from day 1,
    # as one compile of what is left has it, not day 0 of the source that moved away.
    # (Re-decisions leave summaries out, so only the resolver's rule keeps this right.)
    compiles = Compiles(store)
    porto, lisbon = CLAIMED[1], CLAIMED[0]
    said_on = [(porto, 0), (lisbon, 0), (lisbon, 0), (lisbon, 1)]
    episodes = [said(number, text, day) for number, (text, day) in enumerate(said_on)]
    moved = [(episodes[0], ("move", ""))]
    deleted_and_edited = [(e, ("delete", "")) for e in episodes[1:3]] + [
        (episodes[3], ("edit", porto))
    ]

    scheduled, once = changed_both_ways(
        compiles, episodes, [episodes], 1, [moved, deleted_and_edited]
    )

    assert scheduled == once
    # What e3 derives (its summary and "lives in Porto"), each valid from day 1.
    valid_from = {memory[2] for memory in scheduled["memories"].values()}
    assert valid_from == {episodes[3].occurred_at}


def test_a_loser_whose_sources_were_deleted_is_dated_by_a_later_assertion_alone(
    store: Store,
) -> None:
    # Berlin (day 0) loses to Madrid (day 1); Berlin's message is deleted, so the loser
    # is retired (tombstoned, source_deleted) and holds at no valid time; Berlin said
    # again on day 2 wins, valid from day 2 as one compile of what is left has it (a
    # compile of a later episode decides nothing again: only the resolver's rule).
    compiles = Compiles(store)
    berlin, madrid, again = (
        said(number, f"I'm in {city} this week.", number)
        for number, city in enumerate(["Berlin", "Madrid", "Berlin"])
    )
    tenant = compiles.incrementally([[berlin, madrid]])
    compiles.ingest.tombstone(tenant, [Tombstone("e0")])
    compiles.clock.advance(timedelta(seconds=1))
    compiles.compiler(10).compile(tenant, SUBJECT)
    [retired] = [
        m
        for m in MemoryRepository(store).memories(tenant, SUBJECT, statuses=None)
        if m.claim_key == "location.current" and "Berlin" in m.content
    ]
    assert (retired.status, retired.status_rule) == (
        MemoryStatus.TOMBSTONED,
        SupersessionRule.SOURCE_DELETED,
    )

    compiles.ingest.ingest(tenant, [again])
    compiles.clock.advance(timedelta(seconds=1))
    compiles.compiler(10).compile(tenant, SUBJECT)

    what_is_left = compiles.at_once([madrid, again])
    assert active_times(store, tenant) == active_times(store, what_is_left)
