"""``GET /v1/runs`` and ``GET /v1/runs/{id}``: sync run records, scoped to the caller's
tenant. Read-only; runs are started by ``memsync sync`` / ``backfill`` (and the
scheduler), never over HTTP."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel

from memsync.runtime.app.api.deps import MAX_PAGE, CallerDep, ServicesDep
from memsync.runtime.app.api.errors import ApiError
from memsync.runtime.app.api.openapi import error_responses
from memsync.runtime.app.api.schemas import MAX_OFFSET, Text
from memsync.runtime.storage.schema import CONNECTOR_NAME_LENGTH
from memsync.runtime.sync import RunRecord

__all__ = ["RunsResponse", "router"]

router = APIRouter(prefix="/v1/runs", tags=["sync runs"])


class RunsResponse(BaseModel):
    """A page of runs, newest first."""

    runs: list[RunRecord]
    has_more: bool


@router.get("")
def list_runs(
    services: ServicesDep,
    caller: CallerDep,
    connector: Annotated[Text | None, Query(max_length=CONNECTOR_NAME_LENGTH)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> RunsResponse:
    """The caller's tenant's runs, newest first, optionally of one connector."""
    records = services.runs.list_runs(
        caller.tenant_id, connector=connector, limit=limit + 1, offset=offset
    )
    return RunsResponse(
        runs=records[:limit],
        has_more=len(records) > limit,
    )


@router.get("/{run_id}", responses=error_responses(404))
def get_run(run_id: uuid.UUID, services: ServicesDep, caller: CallerDep) -> RunRecord:
    """One run of the caller's tenant; 404 for another tenant's run."""
    record = services.runs.get_run(caller.tenant_id, run_id)
    if record is None:
        raise ApiError(404, "not_found", f"no run {run_id}")
    return record
