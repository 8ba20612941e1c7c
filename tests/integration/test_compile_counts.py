"""A compile reports the net change it made to the store, so counts add up over any
schedule: summed over the compiles of a history, ``memories_created`` and
``memories_superseded - memories_reinstated`` are what one compile of the whole history
reports (and that one compile reinstates nothing). See docs/compile.md, "Counts".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given
from sqlalchemy.engine import Connection

from memsync.episode import EpisodeDraft
from memsync.runtime.compiling.service import CompileResult
from memsync.runtime.storage import Store
from tests.integration.test_compile_chunking import (
    CHUNK_SIZES,
    CLAIMED,
    CUTS,
    LEXICAL,
    PROPERTY,
    SUBJECT,
    Compiles,
    by_moment,
    histories,
    said,
)

# "Berlin this week", beaten by "Madrid this week", then asserted again: Berlin wins
# back its slot (recency_wins) and Madrid ends superseded.
BERLIN_MADRID_BERLIN = [
    said(1, "I'm in Berlin this week.", 0),
    said(2, "I'm in Madrid this week.", 1),
    said(3, "I'm in Berlin this week.", 2),
]


def compile_each(
    compiles: Compiles, batches: Sequence[Sequence[EpisodeDraft]], chunk_episodes: int
) -> list[CompileResult]:
    tenant, compiler = compiles.tenant(), compiles.compiler(chunk_episodes)
    results = []
    for batch in batches:
        compiles.ingest.ingest(tenant, list(batch))
        results.append(compiler.compile(tenant, SUBJECT))
    return results


def test_a_memory_superseded_and_won_back_within_one_compile_is_not_counted(
    store: Store,
) -> None:
    # In chunks of one episode, Berlin is superseded by the second chunk and reinstated
    # by the third: the compile as a whole superseded only Madrid.
    (result,) = compile_each(Compiles(store), [BERLIN_MADRID_BERLIN], chunk_episodes=1)

    assert (result.memories_superseded, result.memories_reinstated) == (1, 0)


def test_a_memory_won_back_in_a_later_compile_is_counted_as_reinstated(store: Store) -> None:
    results = compile_each(Compiles(store), [[e] for e in BERLIN_MADRID_BERLIN], 10)

    counts = [(r.memories_superseded, r.memories_reinstated) for r in results]
    assert counts == [(0, 0), (1, 0), (1, 1)]


def test_a_compile_jobs_chunk_counts_add_up_to_the_compiles_net_counts(store: Store) -> None:
    # A compile job adds up what each chunk hands ``on_chunk``; a chunk that undoes an
    # earlier chunk's supersession hands a negative count.
    compiles = Compiles(store)
    tenant = compiles.tenant()
    compiles.ingest.ingest(tenant, BERLIN_MADRID_BERLIN)
    handed: list[Mapping[str, Any]] = []

    def record(_connection: Connection, counts: Mapping[str, Any]) -> None:
        handed.append(counts)

    result = compiles.compiler(1).compile(tenant, SUBJECT, on_chunk=record)

    assert [counts["memories_superseded"] for counts in handed] == [0, 1, 0]
    for name in (
        "memories_created",
        "memories_superseded",
        "memories_reinstated",
        "conflicts_opened",
    ):
        assert sum(counts[name] for counts in handed) == getattr(result, name)


@PROPERTY
@given(histories(CLAIMED + LEXICAL), CHUNK_SIZES, CUTS)
def test_counts_summed_over_any_schedule_are_those_of_one_compile(
    store: Store, episodes: list[EpisodeDraft], chunk_episodes: int, cuts: list[int]
) -> None:
    compiles = Compiles(store)

    (once,) = compile_each(compiles, [episodes], chunk_episodes=10_000)
    scheduled = compile_each(compiles, by_moment(episodes, cuts), chunk_episodes)

    assert once.memories_reinstated == 0
    assert sum(r.memories_created for r in scheduled) == once.memories_created
    net = sum(r.memories_superseded - r.memories_reinstated for r in scheduled)
    assert net == once.memories_superseded
    assert sum(r.conflicts_opened for r in scheduled) == once.conflicts_opened
