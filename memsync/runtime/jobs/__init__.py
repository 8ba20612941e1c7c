"""Durable jobs: the queue in the database, workers, triggers and schedules."""

from __future__ import annotations

from memsync.runtime.jobs.queue import COMPILE, SYNC, Job, JobQueue, JobStatus, RetryPolicy
from memsync.runtime.jobs.schedules import (
    NIGHTLY_COMPILE,
    Schedule,
    ScheduleFirer,
    Scheduler,
    fire_key,
    schedules_from_settings,
    sync_schedule_id,
)
from memsync.runtime.jobs.triggers import EveryNEpisodes, enqueue_uncompiled, ingest_service
from memsync.runtime.jobs.worker import (
    JobHandler,
    PermanentJobError,
    SyncRunFailed,
    Worker,
    compile_handler,
    run_workers,
    sync_handler,
    worker_name,
)

__all__ = [
    "COMPILE",
    "NIGHTLY_COMPILE",
    "SYNC",
    "EveryNEpisodes",
    "Job",
    "JobHandler",
    "JobQueue",
    "JobStatus",
    "PermanentJobError",
    "RetryPolicy",
    "Schedule",
    "ScheduleFirer",
    "Scheduler",
    "SyncRunFailed",
    "Worker",
    "compile_handler",
    "enqueue_uncompiled",
    "fire_key",
    "ingest_service",
    "run_workers",
    "schedules_from_settings",
    "sync_handler",
    "sync_schedule_id",
    "worker_name",
]
