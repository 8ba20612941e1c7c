"""Properties of the resolver: compile is a derivation, not an append.

- Idempotency: resolving candidates against the store they produced changes nothing.
- Batching: one pass over all candidates and k passes over consecutive batches leave the
  same memories active.
- Arrival order: for claim keys under every policy (recency_wins, keep_existing with
  explicit changes, flag), multi-valued keys and their negations, and flagged facts,
  the active set does not even depend on which batch a candidate arrives in (an older
  statement compiled after a newer one is decided as time order would decide it).
- Episode summaries: an active summary no candidate names changes no decision, which is
  why a compile does not load them (``load_for_resolution``).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.compile.resolve import (
    _ID_NAMESPACE,
    _beyond,
    _cites,
    _united,
    memory_id,
    processing_order,
)
from memsync.compile.types import CandidateMemory, MemoryKind, MemoryStatus, StoredMemory, evolve

from .builders import claim, day, episode, run, statement

DAYS = st.integers(min_value=0, max_value=12)
SOURCES = st.integers(min_value=1, max_value=40)

current_location = st.builds(
    lambda city, on, source: claim("location.current", city, on, source=source),
    st.sampled_from(["Berlin", "Madrid", "Lisbon"]),
    DAYS,
    SOURCES,
)
tools = st.builds(
    lambda tool, on, source, negated: claim("tools.used", tool, on, source=source, negated=negated),
    st.sampled_from(["vim", "emacs", "helix"]),
    DAYS,
    SOURCES,
    st.booleans(),
)
home_city = st.builds(
    lambda city, on, source, explicit: claim(
        "location.home_city", city, on, source=source, explicit=explicit
    ),
    st.sampled_from(["Lisbon", "Porto"]),
    DAYS,
    SOURCES,
    st.booleans(),
)
facts = st.builds(
    lambda content, on, source: statement(content, on, source=source),
    st.sampled_from(
        [
            "Stripe charges 3.5% + 35¢ per transaction",
            "Stripe charges 2.9% + 30¢ per transaction",
            "The API rate limit is 100 requests per minute",
            "Invoices are due in 30 days",
        ]
    ),
    DAYS,
    SOURCES,
)

# Summaries worded alike (as the facts are), so that one taken for a statement would
# contest the others.
summaries = st.builds(
    lambda content, on, source: statement(
        content, on, kind=MemoryKind.EPISODE_SUMMARY, source=source
    ),
    st.sampled_from(
        [
            "chat message: Stripe charges 3.5% + 35¢ per transaction",
            "chat message: Stripe charges 2.9% + 30¢ per transaction",
            "chat message: The API rate limit is 100 requests per minute",
            "chat message: The API rate limit is 1000 requests per minute",
        ]
    ),
    DAYS,
    SOURCES,
)

order_free = st.lists(current_location | tools, min_size=1, max_size=12)
everything = st.lists(current_location | tools | home_city | facts, min_size=1, max_size=14)
with_summaries = st.lists(
    current_location | tools | home_city | facts | summaries, min_size=1, max_size=14
)


def _active(store: Sequence[StoredMemory]) -> set[str]:
    return {memory.memory_key for memory in store if memory.status is MemoryStatus.ACTIVE}


def _in_batches(
    batches: Sequence[Sequence[CandidateMemory]],
) -> list[StoredMemory]:
    store: list[StoredMemory] = []
    for batch in batches:
        _, store = run(batch, store)
    return store


def _split(candidates: list[CandidateMemory], cuts: list[int]) -> list[list[CandidateMemory]]:
    bounds = [0, *sorted({cut % (len(candidates) + 1) for cut in cuts}), len(candidates)]
    return [candidates[start:end] for start, end in itertools.pairwise(bounds)]


@settings(max_examples=150, deadline=None)
@given(everything)
def test_resolving_the_same_candidates_twice_changes_nothing(
    candidates: list[CandidateMemory],
) -> None:
    _, store = run(candidates)

    again, _ = run(candidates, store)

    assert again.is_empty
    assert again.memories_created == 0


@settings(max_examples=150, deadline=None)
@given(everything, st.lists(st.integers(min_value=0, max_value=20), max_size=4))
def test_one_pass_and_consecutive_batches_leave_the_same_memories_active(
    candidates: list[CandidateMemory], cuts: list[int]
) -> None:
    in_order = sorted(candidates, key=processing_order)

    _, one_pass = run(in_order)
    batched = _in_batches(_split(in_order, cuts))

    assert _active(batched) == _active(one_pass)
    assert {m.memory_key for m in batched} == {m.memory_key for m in one_pass}


@settings(max_examples=300, deadline=None)
@given(order_free | everything, st.lists(st.integers(min_value=0, max_value=20), max_size=4))
def test_for_claim_keys_under_every_policy_arrival_order_does_not_matter(
    candidates: list[CandidateMemory], cuts: list[int]
) -> None:
    _, one_pass = run(candidates)
    batched = _in_batches(_split(candidates, cuts))

    assert _active(batched) == _active(one_pass)


@settings(max_examples=100, deadline=None)
@given(everything)
def test_a_batched_store_is_also_a_fixed_point(candidates: list[CandidateMemory]) -> None:
    half = len(candidates) // 2
    store = _in_batches([candidates[:half], candidates[half:]])

    again, _ = run(candidates, store)

    assert again.is_empty


@given(st.lists(st.lists(st.uuids(), min_size=1, max_size=3), min_size=2, max_size=6))
def test_episode_ids_break_ties_in_the_order_of_their_text(ids: list[list[uuid.UUID]]) -> None:
    # processing_order compares candidates' episode ids as ids (by number); ties between
    # candidates of one statement were broken by the ids' sorted text before, and must
    # still be.
    said = statement("We decided to use Redis.", 0)
    candidates = [replace(said, source_episode_ids=tuple(some)) for some in ids]

    def by_text(candidate: CandidateMemory) -> tuple[str, ...]:
        return tuple(sorted(str(episode) for episode in candidate.source_episode_ids))

    assert sorted(candidates, key=processing_order) == sorted(candidates, key=by_text)


@settings(max_examples=200, deadline=None)
@given(
    candidate=current_location,
    status=st.sampled_from(list(MemoryStatus)),
    sources=st.lists(SOURCES, max_size=3),
    on=DAYS,
)
def test_evolve_copies_as_dataclasses_replace_does(
    candidate: CandidateMemory, status: MemoryStatus, sources: list[int], on: int
) -> None:
    stored = run([candidate])[1][0]
    changes = {
        "status": status,
        "source_episode_ids": tuple(uuid.UUID(int=source) for source in sources),
        "valid_to": day(on),
    }

    assert evolve(stored, **changes) == replace(stored, **changes)
    assert evolve(candidate, claim_key="location.home_city") == replace(
        candidate, claim_key="location.home_city"
    )
    assert evolve(candidate, content="x").memory_key == replace(candidate, content="x").memory_key


def test_evolve_refuses_a_field_the_class_does_not_take() -> None:
    candidate = claim("location.current", "Lisbon", 1)

    with pytest.raises(TypeError, match="memory_key"):
        evolve(candidate, memory_key="forged")
    with pytest.raises(TypeError, match="colour"):
        evolve(candidate, colour="blue")


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_memory_id_is_the_uuid5_of_the_key(key: str) -> None:
    assert memory_id(key) == uuid.uuid5(_ID_NAMESPACE, f"memory:{key}")


@settings(max_examples=150, deadline=None)
@given(with_summaries, with_summaries)
def test_an_active_summary_no_candidate_names_changes_no_decision(
    earlier: list[CandidateMemory], later: list[CandidateMemory]
) -> None:
    _, store = run(earlier)
    named = {candidate.memory_key for candidate in later}
    without_summaries = [
        memory
        for memory in store
        if memory.kind is not MemoryKind.EPISODE_SUMMARY
        or memory.status is not MemoryStatus.ACTIVE
        or memory.memory_key in named
    ]

    given_everything, _ = run(later, store)
    given_less, _ = run(later, without_summaries)

    assert given_less == given_everything


ids_of_few_numbers = st.lists(st.integers(min_value=0, max_value=30).map(episode))


@settings(max_examples=300, deadline=None)
@given(ids_of_few_numbers, ids_of_few_numbers)
def test_provenance_is_united_and_compared_as_sets_would_be(
    cited: list[uuid.UUID], more: list[uuid.UUID]
) -> None:
    provenance = tuple(sorted(set(cited)))

    assert _united(provenance, more) == tuple(sorted(set(provenance) | set(more)))
    assert _beyond(provenance, more) == tuple(sorted(set(provenance) - set(more)))
    assert [_cites(provenance, id_) for id_ in more] == [id_ in provenance for id_ in more]
