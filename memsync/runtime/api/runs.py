"""``GET /v1/runs`` and ``GET /v1/runs/{id}``: sync run records, scoped to the caller's
tenant. Read-only; runs are started by ``memsync sync`` / ``backfill`` (and the
scheduler), never over HTTP."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from memsync.runtime.api.app import MAX_PAGE, CallerDep, ServicesDep
from memsync.runtime.api.errors import ApiError
from memsync.runtime.sync import RunRecord, SyncRepository

__all__ = ["RunResponse", "RunsResponse", "router"]

router = APIRouter(prefix="/v1/runs", tags=["sync runs"])


class RunResponse(BaseModel):
    """One sync or backfill run."""

    id: uuid.UUID
    connector: str
    connector_type: str
    kind: str
    window_start: datetime | None
    window_end: datetime
    status: str
    fetched: int
    created: int
    duplicates: int
    revised: int
    skipped: int
    errors: int
    error: str | None
    skipped_reasons: list[str]
    backfill_id: uuid.UUID | None
    started_at: datetime
    finished_at: datetime | None
    duration_seconds: float | None

    @classmethod
    def of(cls, record: RunRecord) -> RunResponse:
        return cls.model_validate(record.to_json())


class RunsResponse(BaseModel):
    """A page of runs, newest first."""

    runs: list[RunResponse]
    has_more: bool


@router.get("")
def list_runs(
    services: ServicesDep,
    caller: CallerDep,
    connector: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> RunsResponse:
    """The caller's tenant's runs, newest first, optionally of one connector."""
    records = SyncRepository(services.store).list_runs(
        caller.tenant_id, connector=connector, limit=limit + 1, offset=offset
    )
    return RunsResponse(
        runs=[RunResponse.of(record) for record in records[:limit]],
        has_more=len(records) > limit,
    )


@router.get("/{run_id}")
def get_run(run_id: uuid.UUID, services: ServicesDep, caller: CallerDep) -> RunResponse:
    """One run of the caller's tenant; 404 for another tenant's run."""
    record = SyncRepository(services.store).get_run(caller.tenant_id, run_id)
    if record is None:
        raise ApiError(404, "not_found", f"no run {run_id}")
    return RunResponse.of(record)
