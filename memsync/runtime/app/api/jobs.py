"""Job endpoints: async compile status (Statewave shape) and the job list of every kind."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query

from memsync.compile.bundle import memory_to_dict
from memsync.runtime.app.api.deps import MAX_PAGE, CallerDep, ServicesDep
from memsync.runtime.app.api.errors import ApiError
from memsync.runtime.app.services import Services
from memsync.runtime.compiling import COMPILE_JOB
from memsync.runtime.jobs import Job, JobStatus

__all__ = ["enqueue_compile", "router"]

router = APIRouter()


def _find(services: Services, tenant_id: str, job_id: str, kind: str | None = None) -> Job:
    try:
        parsed = uuid.UUID(job_id)
    except ValueError:
        parsed = None
    job = services.queue.get(tenant_id, parsed) if parsed is not None else None
    if job is None or (kind is not None and job.kind != kind):
        raise ApiError(404, "not_found", f"no job {job_id}")
    return job


def compile_status(services: Services, job: Job) -> dict[str, Any]:
    """A compile job in the shape of the Statewave SDK's ``CompileJob``."""
    result = job.result or {}
    memory_ids = [uuid.UUID(value) for value in result.get("memory_ids", [])]
    found = services.memories.get(job.tenant_id, memory_ids) if memory_ids else {}
    return {
        "job_id": str(job.id),
        "status": job.status.value,
        "subject_id": job.target,
        "memories_created": int(result.get("memories_created", 0)),
        "memories": [memory_to_dict(found[i]) for i in memory_ids if i in found],
        "error": job.error if job.status is JobStatus.FAILED else None,
        "attempts": job.attempts,
    }


def enqueue_compile(services: Services, tenant_id: str, subject_id: str) -> dict[str, Any]:
    """Enqueue a compile of ``subject_id``; a pending one is reused (coalesced)."""
    job, _ = services.queue.enqueue(tenant_id, COMPILE_JOB, subject_id, now=services.clock.now())
    return compile_status(services, job)


@router.get("/v1/memories/compile/{job_id}")
def get_compile_job(job_id: str, services: ServicesDep, caller: CallerDep) -> dict[str, Any]:
    """The status of an async compile: pending, running, completed or failed."""
    return compile_status(services, _find(services, caller.tenant_id, job_id, COMPILE_JOB))


@router.get("/v1/jobs")
def list_jobs(
    services: ServicesDep,
    caller: CallerDep,
    status: Annotated[list[JobStatus] | None, Query()] = None,
    kind: Annotated[str | None, Query(max_length=32)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    """The tenant's jobs of every kind, newest first; filter by status and kind."""
    jobs = services.queue.list(
        caller.tenant_id, statuses=status, kind=kind, limit=limit, offset=offset
    )
    return {"jobs": [job.to_dict() for job in jobs]}


@router.get("/v1/jobs/{job_id}")
def get_job(job_id: str, services: ServicesDep, caller: CallerDep) -> dict[str, Any]:
    """One job of any kind, with its attempts, lease, result and error."""
    return _find(services, caller.tenant_id, job_id).to_dict()
