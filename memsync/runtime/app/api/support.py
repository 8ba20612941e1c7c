"""Support routes of Statewave v1: resolutions, handoff briefs, subject health and SLA.

Statewave's routes, field names and defaults (the ``statewave`` SDK's ``create_resolution``,
``list_resolutions``, ``create_handoff``, ``get_health`` and ``get_sla``); docs/api.md,
"Support", says what each signal means and where memsync answers otherwise.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import Field, TypeAdapter

from memsync.compile.support import Handoff, Health, Resolution, ResolutionStatus, SlaSummary
from memsync.episode import canonical_json
from memsync.runtime.app.api.auth import Caller
from memsync.runtime.app.api.deps import MAX_PAGE, CallerDep, ReaderDep, ServicesDep
from memsync.runtime.app.api.memories import MAX_BUNDLE_TOKENS
from memsync.runtime.app.api.openapi import error_responses
from memsync.runtime.app.api.policy import body_visibility
from memsync.runtime.app.api.schemas import (
    MAX_OFFSET,
    JsonObject,
    Label,
    RequestBody,
    SubjectId,
    Text,
)
from memsync.runtime.app.services import Services

__all__ = ["DEFAULT_FIRST_RESPONSE_MINUTES", "DEFAULT_RESOLUTION_HOURS", "router"]

router = APIRouter()

DEFAULT_FIRST_RESPONSE_MINUTES = 5.0
DEFAULT_RESOLUTION_HOURS = 24.0
"""Statewave's default SLA thresholds."""

_MINUTES_PER_YEAR = 525_600.0
_HOURS_PER_DECADE = 87_600.0


class ResolutionRequest(RequestBody):
    """Statewave's resolution body: ``status`` defaults to ``open``; a summary or
    metadata left out keeps what an earlier write stored."""

    subject_id: SubjectId
    session_id: Label
    status: ResolutionStatus = ResolutionStatus.OPEN
    resolution_summary: Text | None = Field(default=None, max_length=10_000)
    metadata: JsonObject | None = None


class HandoffRequest(RequestBody):
    """Statewave's handoff body. ``caller_id`` and ``caller_type`` are the reader the
    read policy decides for (over the ``X-Caller-*`` headers); ``emit_receipt`` and the
    receipt ids are accepted and ignored (no receipt is written)."""

    subject_id: SubjectId
    session_id: Label
    reason: Text = Field(default="escalation", max_length=10_000)
    max_tokens: int = Field(default=1000, ge=1, le=MAX_BUNDLE_TOKENS)
    caller_id: Label | None = None
    caller_type: Label | None = None


_HANDOFF = TypeAdapter(Handoff)


@router.post("/v1/resolutions")
def record_resolution(
    body: ResolutionRequest, services: ServicesDep, caller: CallerDep
) -> Resolution:
    """Create or update the resolution record of a session (one per subject and
    session: a repeat updates it, keeping its ``id``). ``resolved_at`` is set when the
    status becomes ``resolved`` and kept while it stays so."""
    return services.resolutions.record(
        caller.tenant_id,
        body.subject_id,
        body.session_id,
        body.status,
        resolution_summary=body.resolution_summary,
        metadata=body.metadata,
    )


@router.get("/v1/resolutions")
def list_resolutions(
    services: ServicesDep,
    caller: CallerDep,
    subject_id: Annotated[SubjectId, Query()],
    status: ResolutionStatus | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> list[Resolution]:
    """The subject's resolution records (in ``status``, if given), most recently
    updated first: a JSON array, as Statewave answers."""
    return services.resolutions.list(
        caller.tenant_id, subject_id, status=status, limit=limit, offset=offset
    )


@router.post("/v1/handoff", response_model=Handoff)
def handoff(
    body: HandoffRequest, services: ServicesDep, caller: CallerDep, reader: ReaderDep
) -> Response:
    """A handoff brief of one session for the next person or agent: the active issue,
    what the customer is known for, key facts, the agent's attempted steps, earlier
    sessions' resolutions and recent context, as fields and as Markdown
    (``handoff_notes``), within ``max_tokens`` (the bundle's tokenizer).

    Current truth only, as a context bundle: active memories outside open conflicts,
    and no episode behind a superseded, tombstoned or contested memory. The wall clock
    is never read: ``generated_at`` is the latest change the brief reflects, so the
    same request on the same state answers the same bytes (canonical JSON). The read
    policy applies as to a context bundle.
    """
    seen = body_visibility(services, caller.tenant_id, body, reader, "handoff")
    brief = services.support.handoff(
        caller.tenant_id, body.subject_id, body.session_id, body.reason, body.max_tokens, seen
    )
    answer = {**_HANDOFF.dump_python(brief, mode="json"), "receipt_emitted": False}
    return Response(canonical_json(answer), media_type="application/json")


FirstResponseMinutes = Annotated[float, Query(gt=0, le=_MINUTES_PER_YEAR)]
ResolutionHours = Annotated[float, Query(gt=0, le=_HOURS_PER_DECADE)]


# 404 for a path no route matches (an id with a line break): the route is not reached.
@router.get("/v1/subjects/{subject_id:path}/health", responses=error_responses(404))
def subject_health(
    subject_id: Annotated[SubjectId, Path()], services: ServicesDep, caller: CallerDep
) -> Health:
    """The subject's health: ``score`` (0 to 100, from 100 minus each signal's
    points), ``state`` (``healthy`` from 70, ``watch`` from 40, ``at_risk`` below) and
    the ``factors`` behind it. An unknown subject is healthy: 100, no factors. The id
    may contain ``/``; ``GET /v1/subjects/health?subject_id=`` takes any id."""
    return services.support.health(caller.tenant_id, subject_id)


@router.get("/v1/subjects/health")
def subject_health_by_query(
    subject_id: Annotated[SubjectId, Query()], services: ServicesDep, caller: CallerDep
) -> Health:
    """The health of any subject id, however it is spelt in a URL path."""
    return services.support.health(caller.tenant_id, subject_id)


@router.get("/v1/subjects/{subject_id:path}/sla", responses=error_responses(404))
def subject_sla(
    subject_id: Annotated[SubjectId, Path()],
    services: ServicesDep,
    caller: CallerDep,
    first_response_threshold_minutes: FirstResponseMinutes = DEFAULT_FIRST_RESPONSE_MINUTES,
    resolution_threshold_hours: ResolutionHours = DEFAULT_RESOLUTION_HOURS,
) -> SlaSummary:
    """First-response and resolution times of each of the subject's sessions, their
    averages and the breaches of the thresholds. An unknown subject has no sessions.
    ``GET /v1/subjects/sla?subject_id=`` takes any id."""
    return _sla(
        services, caller, subject_id, first_response_threshold_minutes, resolution_threshold_hours
    )


@router.get("/v1/subjects/sla")
def subject_sla_by_query(
    subject_id: Annotated[SubjectId, Query()],
    services: ServicesDep,
    caller: CallerDep,
    first_response_threshold_minutes: FirstResponseMinutes = DEFAULT_FIRST_RESPONSE_MINUTES,
    resolution_threshold_hours: ResolutionHours = DEFAULT_RESOLUTION_HOURS,
) -> SlaSummary:
    """The SLA of any subject id, however it is spelt in a URL path."""
    return _sla(
        services, caller, subject_id, first_response_threshold_minutes, resolution_threshold_hours
    )


def _sla(
    services: Services, caller: Caller, subject_id: str, minutes: float, hours: float
) -> SlaSummary:
    return services.support.sla(
        caller.tenant_id,
        subject_id,
        first_response_threshold=timedelta(minutes=minutes),
        resolution_threshold=timedelta(hours=hours),
    )
