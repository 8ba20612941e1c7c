"""Context bundles: what an agent reads about a subject, for a task, within a budget.

The ranking and the token budget are the pure :func:`~memsync.compile.bundle.
assemble_bundle`; this module reads what it needs, as the store stood at ``as_of``.
"""

from __future__ import annotations

from datetime import datetime

from memsync.clock import Clock, utc
from memsync.compile.bundle import Bundle, assemble_bundle
from memsync.runtime.reading.episodes import EpisodeRepository
from memsync.runtime.reading.memories import MemoryRepository

__all__ = ["BUNDLE_EPISODES", "ContextReader"]

BUNDLE_EPISODES = 20
"""The most recent episodes a bundle considers."""


class ContextReader:
    """Assembles context bundles from the subject's memories, conflicts and episodes.

    Repeats: with ``as_of`` the wall clock is never read, so equal store state, task,
    budget and ``as_of`` give equal bundles.
    """

    def __init__(
        self, episodes: EpisodeRepository, memories: MemoryRepository, clock: Clock
    ) -> None:
        self._episodes = episodes
        self._memories = memories
        self._clock = clock

    def bundle(
        self,
        tenant_id: str,
        subject_id: str,
        task: str,
        max_tokens: int,
        as_of: datetime | None = None,
    ) -> Bundle:
        """The bundle as of ``as_of`` (default: now)."""
        moment = utc(as_of) if as_of is not None else self._clock.now()
        memories = self._memories.memories(tenant_id, subject_id, as_of=moment)
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
        )
