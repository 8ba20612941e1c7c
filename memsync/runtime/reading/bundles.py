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
- **With** ``as_of`` every memory that existed then is read as its history had it then
  (status, validity, sources), each recent episode at the revision it had then, and
  ranked exhaustively: the reference path, as slow as the subject is large. A bundle
  served at T is built again byte for byte by ``as_of=T`` (receipts rely on it).

Both give byte-identical bundles for the same state and ``as_of`` (a test compares
them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice

from memsync.clock import utc
from memsync.compile.bundle import (
    Bundle,
    BundleLayout,
    RankedMemory,
    assemble_bundle,
    assemble_ranked,
    contested_memories,
)
from memsync.compile.ranking import Scored
from memsync.compile.similarity import tokens
from memsync.compile.tokenizer import RememberingCounter, TokenCounter, default_counter
from memsync.runtime.reading.episodes import EpisodeRecord, EpisodeRepository
from memsync.runtime.reading.indexes import SubjectIndex, SubjectIndexes
from memsync.runtime.reading.labels import EVERYTHING, Visibility
from memsync.runtime.reading.memories import MemoryRepository, MemoryVersion

__all__ = ["BUNDLE_EPISODES", "EMPTY_STORE_AS_OF", "ContextReader", "latest_change"]

BUNDLE_EPISODES = 20
"""The most recent episodes a bundle considers."""

EMPTY_STORE_AS_OF = datetime(1970, 1, 1, tzinfo=UTC)
"""The date of a bundle of a subject with no memories and no episodes."""

_FIRST_FETCH = 64
"""Full rows are read this many ranked memories at a time, then twice as many."""


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
        indexes: SubjectIndexes | None = None,
        layout: BundleLayout = BundleLayout.MEMSYNC,
        counter: TokenCounter | None = None,
    ) -> None:
        """``indexes`` may be shared with search; ``layout`` is the default when a
        request names none; ``counter`` defaults to cl100k_base (or the estimate when it
        is not installed)."""
        self._episodes = episodes
        self._memories = memories
        self._indexes = indexes or SubjectIndexes(memories)
        self._layout = layout
        self._counter = counter
        self._remembering: RememberingCounter | None = None

    @property
    def layout(self) -> BundleLayout:
        """The layout of a request that names none."""
        return self._layout

    def bundle(
        self,
        tenant_id: str,
        subject_id: str,
        task: str,
        max_tokens: int,
        as_of: datetime | None = None,
        *,
        layout: BundleLayout | None = None,
        valid_at: datetime | None = None,
        visibility: Visibility = EVERYTHING,
    ) -> Bundle:
        """The bundle as of ``as_of``, or as of the latest change it reflects.

        ``visibility`` (a read policy's, for one caller) leaves out denied memories and
        the episodes behind them, and shows redacted ones as the marker, before anything
        is ranked into the budget, counted or dated.

        With ``valid_at``: what the store at that transaction time says held at that
        valid time (the reference path, from the memories' history). Without ``as_of``
        its ``as_of`` is the latest change, as without ``valid_at``, so the same request
        with that ``as_of`` builds it again byte for byte."""
        layout = layout or self._layout
        if valid_at is not None and as_of is None:
            # The moment the fast path would date the bundle; the history read as of it
            # is the current state, and a change committed meanwhile is later than it.
            recent = self._episodes.recent(tenant_id, subject_id, as_of=None, limit=BUNDLE_EPISODES)
            as_of = latest_change(self._memories.version(tenant_id, subject_id), recent)
        if as_of is not None:
            return self._as_it_stood(
                tenant_id,
                subject_id,
                task,
                max_tokens,
                utc(as_of),
                layout,
                utc(valid_at) if valid_at is not None else None,
                visibility,
            )
        recent, version = self._episodes.recent_and_memory_version(
            tenant_id, subject_id, limit=BUNDLE_EPISODES
        )
        index = self._indexes.at(tenant_id, subject_id, version)
        recent = [episode for episode in recent if visibility.shows_episode(episode.id)]
        moment = latest_change(index.inputs.version, recent)
        conflicts = visibility.conflicts(index.inputs.open_conflicts)
        # Passed over by the assembly whatever their rows say: not read at all.
        stated = contested_memories(subject_id, conflicts)
        ranked = (
            scored
            for scored in index.ranking.ranked(tokens(task), moment)
            if scored[1].id not in stated
        )
        return assemble_ranked(
            subject_id,
            task,
            self._with_rows(tenant_id, index, ranked, visibility),
            conflicts,
            visibility.episodes(episode.view() for episode in recent),
            max_tokens,
            moment,
            withheld=index.inputs.withheld,
            counter=self._remembered(),
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
        valid_at: datetime | None,
        visibility: Visibility,
    ) -> Bundle:
        memories = self._memories.memories_at(tenant_id, subject_id, moment)
        conflicts = self._memories.conflicts(tenant_id, subject_id, as_of=moment)
        episodes = self._episodes.recent(
            tenant_id, subject_id, as_of=moment, limit=BUNDLE_EPISODES, occurred_by=valid_at
        )
        return assemble_bundle(
            subject_id,
            task,
            visibility.memories(memories),
            visibility.conflicts(record.conflict for record in conflicts),
            visibility.episodes(
                episode.view() for episode in episodes if visibility.shows_episode(episode.id)
            ),
            max_tokens,
            moment,
            counter=self._counter,
            layout=layout,
            valid_at=valid_at,
        )

    def _remembered(self) -> TokenCounter:
        """The counter, remembering the counts of lines it has seen (built on first use:
        loading cl100k_base takes a while, and a CLI command may never need it)."""
        if self._remembering is None:
            self._remembering = RememberingCounter(self._counter or default_counter())
        return self._remembering

    def _with_rows(
        self,
        tenant_id: str,
        index: SubjectIndex,
        ranked: Iterator[Scored],
        visibility: Visibility,
    ) -> Iterable[RankedMemory]:
        """The ranked memories with their full rows, a batch at a time as the budget
        asks for more (rows the index has not read yet are read then)."""
        size = _FIRST_FETCH
        while batch := list(islice(ranked, size)):
            rows = index.rows(tenant_id, [entry.id for _, entry in batch], self._memories)
            for score, entry in batch:
                # A memory changed since the index was built is shown as it is now; the
                # next request sees the new version and rebuilds.
                memory = rows.get(entry.id)
                if memory is not None and (shown := visibility.memory(memory)) is not None:
                    yield RankedMemory(shown, score)
            size *= 2


def latest_change(
    version: MemoryVersion | None, recent: Iterable[EpisodeRecord], *more: datetime
) -> datetime:
    """The latest change a read reflects: the subject's last memory change, the newest
    time (occurred, stored, revised) of the episodes it read, and ``more`` (other
    records' times); :data:`EMPTY_STORE_AS_OF` when there is none. What a read is dated
    by instead of the wall clock."""
    times = [version.changed_at] if version is not None else []
    times.extend(more)
    for episode in recent:
        times.extend((episode.occurred_at, episode.created_at))
        if episode.revised_at is not None:
            times.append(episode.revised_at)
    return max(times, default=EMPTY_STORE_AS_OF)
