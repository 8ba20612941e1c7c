"""Context bundles: what an agent reads about a subject, for a task, within a budget.

Ranking, filtering and the token budget are the pure :mod:`memsync.compile.bundle` and
:mod:`memsync.compile.ranking`; this module reads what they need.

- **Without** ``as_of`` (the agent's every turn) a bundle shows the store as it is and
  is dated by it: ``as_of`` is the latest change the bundle reflects — the subject's
  last memory change and the newest time (occurred, stored, revised) of the recent
  episodes it considered — never the wall clock. Ranking reads a
  :class:`~memsync.compile.ranking.RankingIndex` of the subject's active memories,
  built once per memory version and kept in this process (a bounded LRU), so a request
  reads the version (one row), the recent episodes, and the full rows of only the
  memories the budget takes.
- **With** ``as_of`` every memory that existed then is read with its status then, and
  ranked exhaustively: the reference path, as slow as the subject is large.

Both give byte-identical bundles for the same state and ``as_of`` (a test compares
them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import islice

from memsync.clock import utc
from memsync.compile.bundle import (
    Bundle,
    BundleLayout,
    RankedMemory,
    assemble_bundle,
    assemble_ranked,
)
from memsync.compile.ranking import RankingIndex, Scored
from memsync.compile.similarity import tokens
from memsync.compile.tokenizer import TokenCounter
from memsync.runtime.reading.episodes import EpisodeRecord, EpisodeRepository
from memsync.runtime.reading.memories import MemoryRepository, MemoryVersion, RankingInputs

__all__ = ["BUNDLE_EPISODES", "EMPTY_STORE_AS_OF", "INDEXED_MEMORIES", "ContextReader"]

BUNDLE_EPISODES = 20
"""The most recent episodes a bundle considers."""

INDEXED_MEMORIES = 500_000
"""How many memories, over all subjects, this process keeps ranking indexes for (about
a kilobyte each); the least recently used subjects are dropped first."""

EMPTY_STORE_AS_OF = datetime(1970, 1, 1, tzinfo=UTC)
"""The date of a bundle of a subject with no memories and no episodes."""

_FIRST_FETCH = 64
"""Full rows are read this many ranked memories at a time, then twice as many."""


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A subject's ranking inputs and their index, at one memory version."""

    inputs: RankingInputs
    index: RankingIndex


class ContextReader:
    """Assembles context bundles from the subject's memories, conflicts and episodes.

    Repeats: equal store state, task, budget, layout and ``as_of`` (given, or derived
    from the store) give byte-identical bundles; the wall clock is never read.
    """

    def __init__(
        self,
        episodes: EpisodeRepository,
        memories: MemoryRepository,
        *,
        layout: BundleLayout = BundleLayout.MEMSYNC,
        counter: TokenCounter | None = None,
        indexed_memories: int = INDEXED_MEMORIES,
    ) -> None:
        """``layout`` is the default when a request names none; ``counter`` defaults to
        cl100k_base (or the estimate when it is not installed)."""
        self._episodes = episodes
        self._memories = memories
        self._layout = layout
        self._counter = counter
        self._indexes = _IndexCache(indexed_memories)

    def bundle(
        self,
        tenant_id: str,
        subject_id: str,
        task: str,
        max_tokens: int,
        as_of: datetime | None = None,
        *,
        layout: BundleLayout | None = None,
    ) -> Bundle:
        """The bundle as of ``as_of``, or as of the latest change it reflects."""
        layout = layout or self._layout
        if as_of is not None:
            return self._as_it_stood(tenant_id, subject_id, task, max_tokens, utc(as_of), layout)
        prepared = self._prepared(tenant_id, subject_id)
        recent = self._episodes.recent(tenant_id, subject_id, as_of=None, limit=BUNDLE_EPISODES)
        moment = _latest_change(prepared.inputs.version, recent)
        ranked = prepared.index.ranked(tokens(task), moment)
        return assemble_ranked(
            subject_id,
            task,
            self._with_rows(tenant_id, ranked),
            prepared.inputs.open_conflicts,
            [episode.view() for episode in recent],
            max_tokens,
            moment,
            withheld=prepared.inputs.withheld,
            counter=self._counter,
            layout=layout,
        )

    def _as_it_stood(
        self,
        tenant_id: str,
        subject_id: str,
        task: str,
        max_tokens: int,
        moment: datetime,
        layout: BundleLayout,
    ) -> Bundle:
        memories = self._memories.memories_at(tenant_id, subject_id, moment)
        conflicts = self._memories.conflicts(tenant_id, subject_id, as_of=moment)
        episodes = self._episodes.recent(tenant_id, subject_id, as_of=moment, limit=BUNDLE_EPISODES)
        return assemble_bundle(
            subject_id,
            task,
            memories,
            [record.conflict for record in conflicts],
            [episode.view() for episode in episodes],
            max_tokens,
            moment,
            counter=self._counter,
            layout=layout,
        )

    def _prepared(self, tenant_id: str, subject_id: str) -> _Prepared:
        version = self._memories.version(tenant_id, subject_id)
        cached = self._indexes.get((tenant_id, subject_id))
        if cached is not None and cached.inputs.version == version:
            return cached
        inputs = self._memories.ranking_inputs(tenant_id, subject_id)
        prepared = _Prepared(inputs, RankingIndex(inputs.entries))
        if inputs.version is not None:
            self._indexes.put((tenant_id, subject_id), prepared)
        return prepared

    def _with_rows(self, tenant_id: str, ranked: Iterator[Scored]) -> Iterable[RankedMemory]:
        """The ranked memories with their full rows, read a batch at a time as the
        budget asks for more."""
        size = _FIRST_FETCH
        while batch := list(islice(ranked, size)):
            rows = self._memories.get(tenant_id, [entry.id for _, entry in batch])
            for score, entry in batch:
                # A memory changed since the index was built is shown as it is now; the
                # next request sees the new version and rebuilds.
                if (memory := rows.get(entry.id)) is not None:
                    yield RankedMemory(memory, score)
            size *= 2


def _latest_change(version: MemoryVersion | None, recent: list[EpisodeRecord]) -> datetime:
    times = [version.changed_at] if version is not None else []
    for episode in recent:
        times.extend((episode.occurred_at, episode.created_at))
        if episode.revised_at is not None:
            times.append(episode.revised_at)
    return max(times, default=EMPTY_STORE_AS_OF)


class _IndexCache:
    """Ranking indexes by (tenant, subject), least recently used dropped first, bounded
    by the memories they hold. Thread-safe: API requests run on a thread pool."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._held = 0
        self._items: OrderedDict[tuple[str, str], _Prepared] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[str, str]) -> _Prepared | None:
        with self._lock:
            prepared = self._items.get(key)
            if prepared is not None:
                self._items.move_to_end(key)
            return prepared

    def put(self, key: tuple[str, str], prepared: _Prepared) -> None:
        with self._lock:
            if (previous := self._items.pop(key, None)) is not None:
                self._held -= len(previous.index)
            self._items[key] = prepared
            self._held += len(prepared.index)
            while self._held > self._capacity and len(self._items) > 1:
                _, dropped = self._items.popitem(last=False)
                self._held -= len(dropped.index)
