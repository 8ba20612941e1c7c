"""Durable jobs: a generic queue in the database, workers, and schedules.

The queue knows nothing of what a job does. The application registers a handler per
job kind on its workers (:class:`Worker`) and a tick action per kind on its schedule
firer (:class:`ScheduleFirer`), the way procrastinate's ``App`` registers tasks.
"""

from __future__ import annotations

from memsync.runtime.jobs.queue import Job, JobOutcome, JobQueue, JobStatus, RetryPolicy
from memsync.runtime.jobs.schedules import (
    Schedule,
    ScheduleFirer,
    Scheduler,
    TickAction,
    enqueue_target,
    fire_key,
)
from memsync.runtime.jobs.worker import (
    JobHandler,
    JobResult,
    NeedsAttention,
    PermanentJobError,
    RetryAt,
    Worker,
    run_workers,
    worker_name,
)

__all__ = [
    "Job",
    "JobHandler",
    "JobOutcome",
    "JobQueue",
    "JobResult",
    "JobStatus",
    "NeedsAttention",
    "PermanentJobError",
    "RetryAt",
    "RetryPolicy",
    "Schedule",
    "ScheduleFirer",
    "Scheduler",
    "TickAction",
    "Worker",
    "enqueue_target",
    "fire_key",
    "run_workers",
    "worker_name",
]
