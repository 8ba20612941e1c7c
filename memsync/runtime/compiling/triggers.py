"""What enqueues compile jobs: every N new episodes of a subject, and schedules.

Both are set-based: one grouped count per ingest batch (only for the subjects that
batch created or revised episodes for), one insert for all the jobs a trigger asks
for. Coalescing is the pending-job index's business, not theirs.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from memsync.clock import Clock
from memsync.runtime.compiling.episodes import subjects_due, uncompiled_targets
from memsync.runtime.jobs.queue import JobQueue
from memsync.runtime.storage.engine import Store

__all__ = ["COMPILE_JOB", "EVERY_N_TRIGGER", "EveryNEpisodes", "enqueue_uncompiled"]

COMPILE_JOB = "compile"
"""The job kind that compiles one subject (the job's target)."""
EVERY_N_TRIGGER = "every_n_episodes"


class EveryNEpisodes:
    """After an ingest batch: compile each touched subject with ``n`` or more
    uncompiled episodes. Attach it as the ingest service's ``on_batch_committed``.

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
        with self._store.read() as connection:
            return subjects_due(connection, tenant_id, subject_ids, self._n)

    def __call__(self, tenant_id: str, subject_ids: frozenset[str]) -> None:
        due = self.due(tenant_id, subject_ids)
        if due:
            self._queue.enqueue_many(
                COMPILE_JOB,
                [(tenant_id, subject) for subject in due],
                now=self._clock.now(),
                trigger=EVERY_N_TRIGGER,
            )


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
    with store.write() as connection:
        return queue.enqueue_many(
            COMPILE_JOB,
            uncompiled_targets(connection),
            now=now,
            trigger=trigger,
            dedup_key=dedup_key,
            connection=connection,
        )
