"""The job kinds this application runs, and their handlers.

The job queue is generic (:mod:`memsync.runtime.jobs`); the composition root
registers these handlers on its workers, and the matching tick actions on its
schedule firer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from memsync.connectors.config import ConnectorConfig
from memsync.runtime.app.config import MissingVariables
from memsync.runtime.jobs.queue import Job, JobQueue
from memsync.runtime.jobs.status import JobOutcome
from memsync.runtime.jobs.worker import JobHandler, JobResult, NeedsAttention, RetryAt
from memsync.runtime.sync.policy import RunStatus
from memsync.runtime.sync.records import COUNTERS, RunRecord

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from memsync.runtime.compiling.service import CompileService

__all__ = ["SYNC_JOB", "SyncRunFailed", "compile_handler", "sync_handler"]

SYNC_JOB = "sync"
"""The job kind that runs one incremental sync of a connector (the target is its name)."""

SyncOne = Callable[[ConnectorConfig], RunRecord]
"""Runs one incremental sync of a configured connector and returns its run record."""


def compile_handler(compile_service: CompileService, queue: JobQueue) -> JobHandler:
    """Compile jobs: the single compile path, with the job id on every record it makes.

    Compile is idempotent, so a job reclaimed after its worker died compiles what is
    left and creates no memory twice. Each chunk's counts and created memory ids are
    added to the job in the chunk's own transaction, so the job's result counts every
    attempt: a reclaimed job ends with the counts a clean run would have.
    """
    from memsync.runtime.compiling.service import compile_extras, result_summary

    def handle(job: Job) -> Mapping[str, Any] | JobResult:
        totals: dict[str, Any] = dict(job.result or {})

        def record(connection: Connection, counts: Mapping[str, Any]) -> None:
            totals.update(queue.add_progress(connection, job, counts))

        result = compile_service.compile(
            job.tenant_id, job.target, job_id=str(job.id), on_chunk=record
        )
        summary = {
            **result_summary(result),
            "memory_ids": [],
            **{name: value for name, value in totals.items() if name in _COUNTED},
            **compile_extras(result),
        }
        if result.stopped is not None:
            # Stopped by its token ceiling or the model's rate limit: what it compiled
            # stays, and the next compile (job, schedule or trigger) carries on.
            return JobResult(summary, JobOutcome.PARTIAL)
        return summary

    return handle


# What a chunk adds to a compile job (see CompileService.compile's ``on_chunk``).
_COUNTED = frozenset(
    {
        "episodes_compiled",
        "memories_created",
        "memories_superseded",
        "memories_reinstated",
        "memories_tombstoned",
        "conflicts_opened",
        "memory_ids",
    }
)


class SyncRunFailed(Exception):
    """The sync run a job started ended ``failed`` (its record says why); the job is
    retried with backoff, as a source that is down for a while usually comes back."""


def sync_handler(
    connectors: Mapping[tuple[str, str], ConnectorConfig], sync_one: SyncOne
) -> JobHandler:
    """Sync jobs: one incremental sync of the connector the job names, in its tenant.

    ``connectors`` maps (tenant, name) to the configured connectors. The result is the
    run's id, status and counters; how the run ended decides the job's outcome:

    - ``succeeded``: the job succeeds;
    - ``partial``: the job completes with outcome ``partial`` (what was read is stored;
      the run record lists the errors); when a rate limit cut the run short and the
      source said when it resets, a follow-up job is enqueued for that moment, so no
      worker sleeps through the wait;
    - ``failed`` on an error a person must fix (refused credentials, a missing
      resource): the job fails at once with outcome ``needs_attention``; a connector no
      longer in the configuration does too, and so does one naming an environment
      variable this worker does not have (the error names it);
    - ``failed`` on a rate limit with a known reset: the attempt is retried then;
    - ``failed`` otherwise, or another run of the connector still going: the attempt
      fails and is retried with backoff;
    - cut short because the worker is stopping (``partial``, ``RunInterrupted`` raised):
      the worker releases the job to the queue, the attempt not counted.

    Re-running is safe: the window overlaps the last one on purpose and ingest
    recognises repeats.
    """

    def handle(job: Job) -> JobResult:
        config = connectors.get((job.tenant_id, job.target))
        if config is None:
            raise NeedsAttention(
                f"no connector named {job.target!r} for tenant {job.tenant_id!r} "
                "in this worker's configuration"
            )
        try:
            record = sync_one(config)
        except MissingVariables as error:
            raise NeedsAttention(str(error)) from None
        if record.status is RunStatus.FAILED:
            message = f"sync run {record.id} failed: {record.error}"
            if record.needs_attention:
                raise NeedsAttention(message)
            if record.retry_at is not None:
                raise RetryAt(
                    f"{message}; retrying at {record.retry_at.isoformat()}", at=record.retry_at
                )
            raise SyncRunFailed(message)
        result = {
            "run_id": str(record.id),
            "run_status": record.status.value,
            **{counter: getattr(record, counter) for counter in COUNTERS},
            "error": record.error,
        }
        if record.status is RunStatus.PARTIAL:
            return JobResult(result, JobOutcome.PARTIAL, follow_up_at=record.retry_at)
        return JobResult(result)

    return handle
