"""What enqueues compile jobs: every N new episodes of a subject, and schedules.

Both are set-based: one grouped count per ingest batch (only for the subjects that
batch created or revised episodes for), one insert for all the jobs a trigger asks
for. Coalescing is the pending-job index's business, not theirs.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa

from memsync.clock import Clock, SystemClock
from memsync.runtime.config import JobsSettings
from memsync.runtime.ingest import IngestService
from memsync.runtime.jobs.queue import COMPILE, JobQueue
from memsync.runtime.storage.engine import Store
from memsync.runtime.storage.schema import EpisodeRow

__all__ = ["EVERY_N_TRIGGER", "EveryNEpisodes", "enqueue_uncompiled", "ingest_service"]

EVERY_N_TRIGGER = "every_n_episodes"

_episodes: sa.Table = EpisodeRow.__table__  # type: ignore[assignment]
_uncompiled = _episodes.c.compiled_revision < _episodes.c.revision


class EveryNEpisodes:
    """After an ingest batch: compile each touched subject with ``n`` or more
    uncompiled episodes.

    Repeats: a subject that already has a pending compile job coalesces into it, so
    a flood of batches enqueues one job per subject until a worker takes it.
    """

    def __init__(self, store: Store, queue: JobQueue, n: int, clock: Clock) -> None:
        if n < 1:
            raise ValueError("n must be at least 1 (0 means the trigger is off)")
        self._store = store
        self._queue = queue
        self._n = n
        self._clock = clock

    def due(self, tenant_id: str, subject_ids: Collection[str]) -> list[str]:
        """Of ``subject_ids``, those with at least ``n`` uncompiled episodes."""
        query = (
            sa.select(_episodes.c.subject_id)
            .where(
                _episodes.c.tenant_id == tenant_id,
                _episodes.c.subject_id.in_(sorted(subject_ids)),
                _uncompiled,
            )
            .group_by(_episodes.c.subject_id)
            .having(sa.func.count() >= self._n)
        )
        with self._store.read() as connection:
            return list(connection.execute(query).scalars())

    def __call__(self, tenant_id: str, subject_ids: frozenset[str]) -> None:
        due = self.due(tenant_id, subject_ids)
        if due:
            self._queue.enqueue_many(
                COMPILE,
                [(tenant_id, subject) for subject in due],
                now=self._clock.now(),
                trigger=EVERY_N_TRIGGER,
            )


def ingest_service(
    store: Store, settings: JobsSettings, queue: JobQueue, clock: Clock | None = None
) -> IngestService:
    """The ingest service with the every-N trigger attached when it is configured.

    The API and the CLI build their ingest through this, so both trigger compiles.
    """
    clock = clock or SystemClock()
    hook = (
        EveryNEpisodes(store, queue, settings.compile_every_n_episodes, clock)
        if settings.compile_every_n_episodes > 0
        else None
    )
    return IngestService(store, clock, on_batch_committed=hook)


def enqueue_uncompiled(
    store: Store,
    queue: JobQueue,
    *,
    now: datetime,
    trigger: str,
    dedup_key: str | None = None,
) -> int:
    """Enqueue a compile of every subject, of every tenant, with uncompiled episodes.

    Returns how many jobs are new. The read and the insert share one transaction, so
    with a ``dedup_key`` a tick is recorded for exactly the subjects it saw.
    """
    query = sa.select(_episodes.c.tenant_id, _episodes.c.subject_id).where(_uncompiled).distinct()
    with store.write() as connection:
        targets = [(row.tenant_id, row.subject_id) for row in connection.execute(query)]
        return queue.enqueue_many(
            COMPILE, targets, now=now, trigger=trigger, dedup_key=dedup_key, connection=connection
        )
