"""Job endpoints: async compile status (Statewave shape) and the job list of every kind."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from memsync.compile.bundle import MemoryJson
from memsync.runtime.app.api.deps import MAX_PAGE, CallerDep, ReaderDep, ServicesDep
from memsync.runtime.app.api.errors import ApiError
from memsync.runtime.app.api.openapi import error_responses
from memsync.runtime.app.api.policy import visibility
from memsync.runtime.app.api.schemas import MAX_OFFSET, Text
from memsync.runtime.app.services import Services
from memsync.runtime.compiling import COMPILE_JOB
from memsync.runtime.jobs import Job, JobOutcome, JobStatus
from memsync.runtime.reading.labels import EVERYTHING, Visibility

__all__ = ["CompileJobResponse", "JobsResponse", "enqueue_compile", "router"]

router = APIRouter()


class CompileJobResponse(BaseModel):
    """A compile job in the shape of the Statewave SDK's ``CompileJob``; ``attempts`` is
    an addition. ``error`` is set only when the job failed."""

    job_id: uuid.UUID
    status: JobStatus
    subject_id: str
    memories_created: int
    memories: list[MemoryJson]
    error: str | None
    attempts: int


class JobsResponse(BaseModel):
    """A page of jobs, newest first."""

    jobs: list[Job]


def _find(services: Services, tenant_id: str, job_id: str, kind: str | None = None) -> Job:
    try:
        parsed = uuid.UUID(job_id)
    except ValueError:
        parsed = None
    job = services.queue.get(tenant_id, parsed) if parsed is not None else None
    if job is None or (kind is not None and job.kind != kind):
        raise ApiError(404, "not_found", f"no job {job_id}")
    return job


def compile_status(
    services: Services, job: Job, seen: Visibility = EVERYTHING
) -> CompileJobResponse:
    """A compile job and the memories it created, once it has, as ``seen`` shows them
    (the read policy's visibility of its subject for the caller)."""
    result = job.result or {}
    memory_ids = [uuid.UUID(value) for value in result.get("memory_ids", [])]
    stored = services.memories.get(job.tenant_id, memory_ids) if memory_ids else {}
    found = {memory.id: memory for memory in seen.memories(stored.values())}
    return CompileJobResponse(
        job_id=job.id,
        status=job.status,
        subject_id=job.target,
        memories_created=int(result.get("memories_created", 0)),
        memories=[MemoryJson.model_validate(found[i]) for i in memory_ids if i in found],
        error=job.error if job.status is JobStatus.FAILED else None,
        attempts=job.attempts,
    )


def enqueue_compile(services: Services, tenant_id: str, subject_id: str) -> CompileJobResponse:
    """Enqueue a compile of ``subject_id``; a pending one is reused (coalesced)."""
    job, _ = services.queue.enqueue(tenant_id, COMPILE_JOB, subject_id, now=services.clock.now())
    return compile_status(services, job)


@router.get("/v1/memories/compile/{job_id}", responses=error_responses(404))
def get_compile_job(
    job_id: str, services: ServicesDep, caller: CallerDep, reader: ReaderDep
) -> CompileJobResponse:
    """The status of an async compile: pending, running, completed or failed. The
    memories it created are shown as the read policy lets the caller see them."""
    job = _find(services, caller.tenant_id, job_id, COMPILE_JOB)
    seen = visibility(services, caller.tenant_id, job.target, reader, "compile")
    return compile_status(services, job, seen)


@router.get("/v1/jobs")
def list_jobs(
    services: ServicesDep,
    caller: CallerDep,
    status: Annotated[list[JobStatus] | None, Query()] = None,
    outcome: Annotated[list[JobOutcome] | None, Query()] = None,
    kind: Annotated[Text | None, Query(max_length=32)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> JobsResponse:
    """The tenant's jobs of every kind, newest first; filter by status, outcome
    (``partial``, ``needs_attention``, ...) and kind."""
    jobs = services.queue.list(
        caller.tenant_id, statuses=status, outcomes=outcome, kind=kind, limit=limit, offset=offset
    )
    return JobsResponse(jobs=jobs)


@router.get("/v1/jobs/{job_id}", responses=error_responses(404))
def get_job(job_id: str, services: ServicesDep, caller: CallerDep) -> Job:
    """One job of any kind, with its attempts, lease, result and error."""
    return _find(services, caller.tenant_id, job_id)
