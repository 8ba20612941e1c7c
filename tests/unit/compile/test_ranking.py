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
