"""``rederive``: a subject's contests decided again from all of its evidence, as one
resolve of every candidate in time order decides them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from memsync.compile.policy import PolicyTable
from memsync.compile.resolve import (
    ChangeSet,
    RecordedDecision,
    Supersession,
    apply_changes,
    decision_of,
    manual_resolution,
    rederive,
)
from memsync.compile.types import CandidateMemory, MemoryKind, StoredMemory

from .builders import NOW, REGISTRY, SUBJECT, by_content, claim, day, run, statement

LISTED = 64
REDIS = "We decided to use Redis for the queue"
QUEUE = "We decided to use Postgres for the queue"
CACHE = "We decided to use Postgres for the cache"


def decided(kind_of: str, on: float) -> CandidateMemory:
    return statement(kind_of, on, kind=MemoryKind.DECISION)


def recorded(records: Sequence[Supersession]) -> list[RecordedDecision]:
    """The records as the store would list them back, each with an id of its own."""
    return [
        RecordedDecision(
            id=uuid.UUID(int=number + 1),
            rule=record.rule,
            winner_memory_key=record.winner_memory_key,
            loser_memory_key=record.loser_memory_key,
            decision=decision_of(record, LISTED),
        )
        for number, record in enumerate(records)
    ]


def again(
    candidates: Sequence[CandidateMemory],
    stored: Sequence[StoredMemory],
    records: Sequence[RecordedDecision],
) -> ChangeSet:
    return rederive(
        SUBJECT, candidates, stored, records, [], PolicyTable(), REGISTRY, "job-2", NOW,
        listed=LISTED,
    )  # fmt: skip


def test_a_backfill_is_decided_again_as_one_resolve_in_time_order_decides_it() -> None:
    # Newest first, Postgres-queue loses to Postgres-cache and Redis then meets nothing
    # it matches (similarity is not transitive): both end superseded by the cache, or
    # Redis stays active. In time order Redis loses to Postgres-queue at day 2.
    candidates = [decided(REDIS, 0), decided(QUEUE, 2), decided(CACHE, 4)]
    in_time_order, once = run(candidates)
    first, store = run([candidates[2]])
    second, store = run([candidates[1]], store)
    third, store = run([candidates[0]], store)
    stored_records = recorded([*first.supersessions, *second.supersessions, *third.supersessions])

    changes = again(candidates, store, stored_records)
    store = apply_changes(store, changes)

    for content in (REDIS, QUEUE, CACHE):
        memory, expected = by_content(store, content), by_content(once, content)
        assert (memory.status, memory.valid_to, memory.status_rule) == (
            expected.status,
            expected.valid_to,
            expected.status_rule,
        )
    assert by_content(store, REDIS).valid_to == day(2)
    # The records left and written are those of the time-ordered resolve.
    kept = [r.decision for r in stored_records if r.id not in changes.retracted_records]
    written = [decision_of(r, LISTED) for r in changes.supersessions]
    assert sorted(map(repr, kept + written)) == sorted(
        repr(decision_of(r, LISTED)) for r in in_time_order.supersessions
    )


def test_deciding_again_what_was_decided_in_time_order_changes_nothing() -> None:
    candidates = [
        claim("location.home_city", "Lisbon", 1),
        claim("location.home_city", "Porto", 2),
        claim("location.current", "Berlin", 3),
        claim("location.current", "Madrid", 4),
        decided(REDIS, 5),
        decided(QUEUE, 6),
    ]
    changes, store = run(candidates)

    assert again(candidates, store, recorded(changes.supersessions)).is_empty


def test_a_memory_superseded_by_a_person_stays_superseded_and_reopens_no_conflict() -> None:
    # Two rates are a flagged conflict; a person rejected one. Decided again, the
    # rejected one stays as the person left it and no conflict is found again.
    candidates = [statement("Rate limit 5000 an hour", 1), statement("Rate limit 1000 an hour", 2)]
    flagged, store = run(candidates)
    assert flagged.open_conflicts
    resolved = manual_resolution(
        flagged.open_conflicts[0], store[0], store[1], job_id="person", now=NOW
    )
    store = apply_changes(store, resolved)

    changes = again(candidates, store, [])

    assert changes.is_empty
