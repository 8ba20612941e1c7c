"""The lazy ranking of a RankingIndex is the exhaustive ranking, entry for entry."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.compile.ranking import RankingEntry, RankingIndex, rank_all, score
from memsync.compile.types import MemoryKind

from .builders import day

VOCABULARY = ("lisbon", "porto", "tea", "gateway", "#", "deploy", "queue", "week")

entries = st.builds(
    RankingEntry,
    id=st.uuids(version=4),
    kind=st.sampled_from(list(MemoryKind)),
    # Few distinct instants, so equal scores (ties broken by id) are common.
    last_asserted=st.integers(0, 6).map(lambda n: day(n * 3)),
    valid_from=st.integers(0, 6).map(lambda n: day(n * 3)),
    valid_to=st.none() | st.integers(0, 8).map(lambda n: day(n * 3)),
    tokens=st.frozensets(st.sampled_from(VOCABULARY), max_size=5),
)


def as_pairs(scored: list[tuple[float, RankingEntry]]) -> list[tuple[float, uuid.UUID]]:
    return [(value, entry.id) for value, entry in scored]


@settings(max_examples=300, deadline=None)
@given(
    population=st.lists(entries, max_size=60, unique_by=lambda e: e.id),
    task=st.frozensets(st.sampled_from(VOCABULARY), max_size=4),
    as_of_days=st.integers(0, 30),
    prefix=st.integers(0, 70),
)
def test_the_lazy_ranking_equals_the_exhaustive_one(
    population: list[RankingEntry], task: frozenset[str], as_of_days: int, prefix: int
) -> None:
    as_of = day(as_of_days)
    exhaustive = rank_all(population, task, as_of)

    lazy = list(itertools.islice(RankingIndex(population).ranked(task, as_of), prefix))

    assert as_pairs(lazy) == as_pairs(exhaustive[:prefix])


@st.composite
def histories(draw: st.DrawFn) -> list[list[RankingEntry]]:
    """Successive states of one subject's active memories: each keeps some entries of
    the one before (the same objects, as the read path lends them), drops others, and
    adds new ones, mostly newer than what it keeps (a compile's), sometimes older (a
    backfill's) or a kept memory asserted again (a new object, same id)."""
    states = [draw(st.lists(entries, max_size=30, unique_by=lambda e: e.id))]
    for _ in range(draw(st.integers(1, 6))):
        before = states[-1]
        kept = [entry for entry in before if draw(st.booleans()) or draw(st.booleans())]
        asserted_again = [
            RankingEntry(
                entry.id,
                entry.kind,
                entry.last_asserted + timedelta(days=draw(st.integers(0, 9))),
                entry.valid_from,
                entry.valid_to,
                entry.tokens,
            )
            for entry in before
            if entry not in kept and draw(st.booleans())
        ]
        newest = max((entry.last_asserted for entry in kept), default=day(0))
        added = draw(st.lists(entries, max_size=12, unique_by=lambda e: e.id))
        if draw(st.booleans()):  # a compile's: asserted no earlier than the rest
            added = [
                RankingEntry(
                    e.id, e.kind, max(e.last_asserted, newest), e.valid_from, e.valid_to, e.tokens
                )
                for e in added
            ]
        taken = {entry.id for entry in kept + asserted_again}
        state = kept + asserted_again + [entry for entry in added if entry.id not in taken]
        states.append(draw(st.permutations(state)))
    return states


@settings(max_examples=300, deadline=None)
@given(
    history=histories(),
    task=st.frozensets(st.sampled_from(VOCABULARY), max_size=4),
    as_of_days=st.integers(0, 40),
)
def test_an_index_extended_from_an_earlier_one_ranks_as_one_built_afresh(
    history: list[list[RankingEntry]], task: frozenset[str], as_of_days: int
) -> None:
    as_of = day(as_of_days)
    indexes = [RankingIndex(history[0])]
    for state in history[1:]:
        indexes.append(RankingIndex(state, indexes[-1]))

    # Every index, the earlier ones after they were extended too, ranks its own state.
    for state, index in zip(history, indexes, strict=True):
        assert len(index) == len(state)
        assert as_pairs(list(index.ranked(task, as_of))) == as_pairs(rank_all(state, task, as_of))


def test_the_index_is_reusable_across_tasks_and_moments() -> None:
    population = [
        RankingEntry(uuid.UUID(int=n), kind, day(n), day(0), None, frozenset({"tea", str(n)}))
        for n, kind in enumerate(MemoryKind)
    ]
    index = RankingIndex(population)

    for task, as_of in [(frozenset({"tea"}), day(10)), (frozenset({"3"}), day(400))]:
        assert as_pairs(list(index.ranked(task, as_of))) == as_pairs(
            rank_all(population, task, as_of)
        )


def test_relevance_outweighs_kind_and_recency() -> None:
    fresh_profile = RankingEntry(
        uuid.UUID(int=1), MemoryKind.PROFILE_FACT, day(30), day(0), None, frozenset({"tea"})
    )
    old_summary = RankingEntry(
        uuid.UUID(int=2), MemoryKind.EPISODE_SUMMARY, day(0), day(0), None, frozenset({"queue"})
    )

    assert score(old_summary, frozenset({"queue"}), day(30)) > score(
        fresh_profile, frozenset({"queue"}), day(30)
    )
    assert score(fresh_profile, frozenset(), day(30) + timedelta(days=1)) < 1.5
