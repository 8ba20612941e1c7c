"""Health, SLA and handoff of a subject: the reads, then :mod:`memsync.compile.support`.

Each answer is dated by the state it reflects, never by the wall clock: ``as_of`` is
the latest change among what was read (the subject's last memory change, the session
episodes' and recent episodes' times, the resolutions' ``updated_at``), so asking
again with nothing changed gives the same answer, byte for byte.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from memsync.compile.support import (
    STALE_AFTER,
    Handoff,
    Health,
    Resolution,
    SessionMessage,
    SlaSummary,
    assemble_handoff,
    session_issues,
    speaker_of,
    subject_health,
    subject_sla,
)
from memsync.compile.tokenizer import RememberingCounter, TokenCounter, default_counter
from memsync.runtime.reading.bundles import BUNDLE_EPISODES, latest_change
from memsync.runtime.reading.episodes import EpisodeRecord, EpisodeRepository
from memsync.runtime.reading.labels import EVERYTHING, Visibility
from memsync.runtime.reading.memories import MemoryRepository
from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store
from memsync.runtime.support.resolutions import Resolutions

__all__ = ["SupportService"]

_episodes = tables.episodes


class SupportService:
    """Subject health, SLA and handoff briefs, per tenant (read only: nothing here
    writes, so a repeat is a read again)."""

    def __init__(
        self,
        store: Store,
        episodes: EpisodeRepository,
        memories: MemoryRepository,
        resolutions: Resolutions,
        *,
        counter: TokenCounter | None = None,
    ) -> None:
        """``counter`` defaults to the bundles' (cl100k_base when installed)."""
        self._store = store
        self._episodes = episodes
        self._memories = memories
        self._resolutions = resolutions
        self._counter = counter
        self._remembering: RememberingCounter | None = None

    def health(self, tenant_id: str, subject_id: str) -> Health:
        """The subject's health score, state and factors; an unknown subject scores 100
        with no factors."""
        return self._health(tenant_id, subject_id)[0]

    def sla(
        self,
        tenant_id: str,
        subject_id: str,
        *,
        first_response_threshold: timedelta,
        resolution_threshold: timedelta,
    ) -> SlaSummary:
        """SLA metrics of every session of the subject; an unknown subject has none."""
        sessions = self._session_episodes(tenant_id, subject_id)
        resolutions = self._resolutions.list(tenant_id, subject_id)
        return subject_sla(
            subject_id,
            _messages(sessions),
            resolutions,
            first_response_threshold=first_response_threshold,
            resolution_threshold=resolution_threshold,
            as_of=self._moment(tenant_id, subject_id, sessions, resolutions),
        )

    def handoff(
        self,
        tenant_id: str,
        subject_id: str,
        session_id: str,
        reason: str,
        max_tokens: int,
        visibility: Visibility = EVERYTHING,
    ) -> Handoff:
        """The handoff brief of one session, within ``max_tokens``; a session with no
        episodes is briefed from the subject's memories and history alone.
        ``visibility`` (the read policy's, for the caller): denied memories and the
        episodes behind them are absent from every part, redacted ones show the
        marker."""
        health, sessions, resolutions = self._health(tenant_id, subject_id)
        session = [e for e in sessions if e.session_id == session_id]
        recent = self._episodes.recent(tenant_id, subject_id, as_of=None, limit=BUNDLE_EPISODES)
        conflicts = self._memories.conflicts(tenant_id, subject_id)
        return assemble_handoff(
            subject_id,
            session_id,
            reason,
            # Every status: the brief must know the losers, to withhold their episodes.
            memories=visibility.memories(
                self._memories.memories(tenant_id, subject_id, statuses=None)
            ),
            open_conflicts=visibility.conflicts(record.conflict for record in conflicts),
            session=_messages(session, visibility),
            recent=visibility.episodes(episode.view() for episode in recent),
            resolutions=resolutions,
            health=health,
            as_of=self._moment(tenant_id, subject_id, [*sessions, *recent], resolutions),
            max_tokens=max_tokens,
            counter=self._remembered(),
        )

    def _health(
        self, tenant_id: str, subject_id: str
    ) -> tuple[Health, list[EpisodeRecord], list[Resolution]]:
        sessions = self._session_episodes(tenant_id, subject_id)
        resolutions = self._resolutions.list(tenant_id, subject_id)
        moment = self._moment(tenant_id, subject_id, sessions, resolutions)
        health = subject_health(
            subject_id,
            open_conflicts=len(self._memories.conflicts(tenant_id, subject_id)),
            resolutions=resolutions,
            issues=session_issues(_messages(sessions)),
            stale_memories=self._memories.count_not_asserted_since(
                tenant_id, subject_id, moment - STALE_AFTER
            ),
        )
        return health, sessions, resolutions

    def _session_episodes(self, tenant_id: str, subject_id: str) -> list[EpisodeRecord]:
        """The subject's live episodes that belong to a session, in occurrence order."""
        query = (
            sa.select(_episodes)
            .where(
                _episodes.c.tenant_id == tenant_id,
                _episodes.c.subject_id == subject_id,
                _episodes.c.session_id.is_not(None),
                _episodes.c.deleted_at.is_(None),
            )
            .order_by(_episodes.c.occurred_at, _episodes.c.id)
        )
        with self._store.read() as connection:
            return EpisodeRecord.from_rows(connection.execute(query).all())

    def _moment(
        self,
        tenant_id: str,
        subject_id: str,
        episodes: list[EpisodeRecord],
        resolutions: list[Resolution],
    ) -> datetime:
        return latest_change(
            self._memories.version(tenant_id, subject_id),
            episodes,
            *(resolution.updated_at for resolution in resolutions),
        )

    def _remembered(self) -> TokenCounter:
        # Built on first use: loading cl100k_base takes a while.
        if self._remembering is None:
            self._remembering = RememberingCounter(self._counter or default_counter())
        return self._remembering


def _messages(
    episodes: list[EpisodeRecord], visibility: Visibility = EVERYTHING
) -> list[SessionMessage]:
    return [
        SessionMessage(
            episode.session_id or "", view, speaker_of(episode.payload, episode.metadata)
        )
        for episode in episodes
        for view in visibility.episodes([episode.view()])
    ]
