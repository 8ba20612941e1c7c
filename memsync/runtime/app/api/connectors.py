"""Connector endpoints: what is configured, where each stands, and steering it.

Scoped to the caller's tenant: a connector configured for another tenant is a 404.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from memsync.clock import utc
from memsync.connectors.checkpoints import STREAM_NAME_LENGTH
from memsync.connectors.config import ConnectorConfig
from memsync.runtime.app.api.deps import CallerDep, ServicesDep
from memsync.runtime.app.api.errors import ApiError
from memsync.runtime.app.api.openapi import error_responses
from memsync.runtime.app.api.schemas import Moment, RequestBody
from memsync.runtime.app.handlers import SYNC_JOB
from memsync.runtime.app.removals import ConnectorForgotten
from memsync.runtime.app.services import Services, UnknownStream, sync_schedule_id
from memsync.runtime.sync import RunInProgress
from memsync.runtime.sync.repository import ConnectorState

__all__ = ["router"]

router = APIRouter(prefix="/v1/connectors", tags=["connectors"])


class ConnectorSummary(BaseModel):
    """One configured connector: its type, key policy, schedule and where it stands."""

    name: str
    type: str
    key_policy: str
    key_rationale: str
    schedule: str
    next_fire: datetime | None
    last_run_status: str | None
    lag_seconds: float | None


class ConnectorsResponse(BaseModel):
    connectors: list[ConnectorSummary]


class ResetRequest(RequestBody):
    """``stream``: the one stream to reset (absent: every stream of the connector).
    ``to``: the new checkpoint (backwards too), from 1990-01-01T00:00:00Z to now;
    absent: remove it (read from start)."""

    stream: str | None = Field(default=None, min_length=1, max_length=STREAM_NAME_LENGTH)
    to: Moment | None = None


class SyncAccepted(BaseModel):
    """An enqueued sync job (joined if one was already pending)."""

    job_id: str
    status: str


def _configured(services: Services, tenant_id: str, name: str) -> ConnectorConfig:
    for config in services.connectors:
        if config.name == name and config.tenant == tenant_id:
            return config
    raise ApiError(404, "not_found", f"no connector named {name!r}")


def _next_fire(services: Services, config: ConnectorConfig) -> datetime | None:
    schedule = {s.id: s for s in services.schedules}.get(sync_schedule_id(config))
    if schedule is None:
        return None
    now = services.clock.now()
    fire = schedule.trigger().get_next_fire_time(None, now)
    return utc(fire) if fire is not None else None


@router.get("")
def list_connectors(services: ServicesDep, caller: CallerDep) -> ConnectorsResponse:
    """The caller's tenant's connectors: type, key policy, schedule and next fire, the
    last run's status and the lag."""
    summaries = []
    for config in services.connectors:
        if config.tenant != caller.tenant_id:
            continue
        state = services.connector_state(config)
        connector_class = services.registry.get(config.type)
        summaries.append(
            ConnectorSummary(
                name=config.name,
                type=config.type,
                key_policy=connector_class.key_policy.value,
                key_rationale=connector_class.key_rationale,
                schedule=str(config.schedule),
                next_fire=_next_fire(services, config),
                last_run_status=state.last_run.status.value if state.last_run else None,
                lag_seconds=state.lag_seconds,
            )
        )
    return ConnectorsResponse(connectors=summaries)


@router.get("/{name}/state", responses=error_responses(404))
def connector_state(name: str, services: ServicesDep, caller: CallerDep) -> ConnectorState:
    """The connector's last run, last success and lag, and per stream its checkpoint,
    last run and status, last success and lag."""
    config = _configured(services, caller.tenant_id, name)
    return services.connector_state(config)


@router.post("/{name}/state/reset", responses=error_responses(404, 409, 422))
def reset_state(
    name: str, body: ResetRequest, services: ServicesDep, caller: CallerDep
) -> ConnectorState:
    """Move the checkpoint of one stream or of every stream (backwards too), or remove
    it; 404 for a stream the connector does not have, 409 while a run is going, 422
    for a ``to`` before 1990-01-01 or in the future (no run could read from there)."""
    config = _configured(services, caller.tenant_id, name)
    try:
        return services.reset_connector_state(
            config, stream=body.stream, to=utc(body.to) if body.to else None
        )
    except UnknownStream as error:
        raise ApiError(404, "not_found", str(error)) from None
    except RunInProgress as error:
        raise ApiError(409, "conflict", str(error)) from None


@router.post("/{name}/sync", status_code=202, responses=error_responses(404))
def enqueue_sync(name: str, services: ServicesDep, caller: CallerDep) -> SyncAccepted:
    """Enqueue one incremental sync of the connector for a worker (202 with the job id);
    a sync already pending is joined."""
    config = _configured(services, caller.tenant_id, name)
    job, _ = services.queue.enqueue(config.tenant, SYNC_JOB, config.name, now=services.clock.now())
    return SyncAccepted(job_id=str(job.id), status=job.status.value)


@router.delete("/{name}/data", responses=error_responses(404, 409))
def forget_connector(
    name: str,
    services: ServicesDep,
    caller: CallerDep,
    dry_run: Annotated[
        bool, Query(description="say what would be removed; remove nothing")
    ] = False,
) -> ConnectorForgotten:
    """Remove the connector's data in the caller's tenant, in one transaction: its
    episodes and their revisions, the memories derived only from them (memories with
    other sources keep those), its checkpoints, run records and backfills; nothing of
    another connector. The counts say what went (``dry_run``: what would). 404 for a
    connector neither configured in the tenant nor with anything stored; 409 while a
    run of it is going."""
    configured = any(c.name == name and c.tenant == caller.tenant_id for c in services.connectors)
    try:
        result = services.forget_connector(caller.tenant_id, name, dry_run=dry_run)
    except RunInProgress as error:
        raise ApiError(409, "conflict", str(error)) from None
    if not configured and not result.found_anything:
        raise ApiError(404, "not_found", f"no connector named {name!r}")
    return result
