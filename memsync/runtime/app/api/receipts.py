"""Receipts of context bundles: read one, list a subject's, replay one.

Statewave's routes and field names; a replay answers Statewave's
``{original_receipt_id, replay_receipt_id, diff}`` plus memsync's ``mode``,
``reproduced`` and the ``bundle`` built (docs/api.md, "Receipts").
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Query, Response
from pydantic import BaseModel, Field

from memsync.clock import IsoDatetime
from memsync.episode import canonical_json
from memsync.runtime.app.api.deps import CallerDep, ReaderDep, ServicesDep
from memsync.runtime.app.api.errors import ApiError, validation_error
from memsync.runtime.app.api.openapi import error_responses
from memsync.runtime.app.api.policy import shown_entries, visibility
from memsync.runtime.app.api.schemas import Moment, RequestBody, SubjectId, Text
from memsync.runtime.reading.labels import Visibility
from memsync.runtime.reading.receipts import BadCursor, Receipt, Replay, ReplayMode

__all__ = ["ReceiptJson", "ReceiptListResponse", "ReplayResponse", "router"]

router = APIRouter()


class ReceiptJson(BaseModel):
    """A receipt in Statewave's ``Receipt`` shape, plus ``request`` and
    ``context_hash`` (also in ``output``, where Statewave keeps it)."""

    receipt_id: str
    parent_receipt_id: str | None
    mode: str
    query_id: str | None
    task_id: str | None
    tenant_id: str
    subject_id: str
    task: str
    as_of: IsoDatetime = Field(description="the bundle's transaction time (provenance.as_of)")
    created_at: IsoDatetime
    context_hash: str = Field(description="SHA-256 (hex) of the exact bytes served")
    request: dict[str, Any] = Field(
        description="{subject_id, task, max_tokens, as_of, layout} as the bundle was built, "
        "and valid_at when one was asked for"
    )
    selected_entries: list[dict[str, Any]]
    policy: dict[str, Any] = Field(default_factory=dict)
    output: dict[str, Any]

    @classmethod
    def of(cls, receipt: Receipt, seen: Visibility) -> ReceiptJson:
        """The receipt as the caller may see it: entries of denied memories, and of
        the episodes behind them, left out."""
        request = receipt.request
        return cls(
            receipt_id=str(receipt.id),
            parent_receipt_id=receipt.parent_receipt_id,
            mode=receipt.mode.value,
            query_id=receipt.query_id,
            task_id=receipt.task_id,
            tenant_id=receipt.tenant_id,
            subject_id=request.subject_id,
            task=request.task,
            as_of=receipt.as_of,
            created_at=receipt.created_at,
            context_hash=receipt.context_hash,
            request={
                "subject_id": request.subject_id,
                "task": request.task,
                "max_tokens": request.max_tokens,
                "as_of": request.as_of.isoformat() if request.as_of else None,
                "layout": request.layout.value,
                # Only when asked for, as in the bundle: older receipts read as before.
                **({"valid_at": request.valid_at.isoformat()} if request.valid_at else {}),
            },
            selected_entries=[
                entry.to_json() for entry in shown_entries(receipt.selected_entries, seen)
            ],
            output={
                "context_hash": receipt.context_hash,
                "token_estimate": receipt.token_estimate,
            },
        )


class ReceiptListResponse(BaseModel):
    receipts: list[ReceiptJson]
    next_cursor: str | None


class ReplayRequest(RequestBody):
    mode: ReplayMode = Field(
        default=ReplayMode.CURRENT,
        description="exact: the bundle as of the receipt's as_of, hashed and compared; "
        "current: today's bundle for the same request, with what came and went",
    )


class ReplayDiff(BaseModel):
    context_hash: dict[str, Any] = Field(description="{original, replay, changed}")
    selected_entries: dict[str, Any] = Field(description="{added, removed, common}")
    filters_applied: dict[str, Any] = Field(description="{added, removed}: always empty")


class ReplayResponse(BaseModel):
    """Statewave's ``ReceiptReplayResult`` plus ``mode``, ``reproduced`` and the
    ``bundle`` built (its canonical JSON is the bytes hashed)."""

    original_receipt_id: str
    replay_receipt_id: str | None
    mode: ReplayMode
    reproduced: bool
    diff: ReplayDiff
    bundle: dict[str, Any]


@router.get("/v1/receipts/{receipt_id}", responses=error_responses(404))
def get_receipt(
    receipt_id: str, services: ServicesDep, caller: CallerDep, reader: ReaderDep
) -> ReceiptJson:
    """One receipt of the caller's tenant; another tenant's id is unknown (404)."""
    receipt = services.receipts.get(caller.tenant_id, receipt_id)
    if receipt is None:
        raise _unknown(receipt_id)
    seen = visibility(services, caller.tenant_id, receipt.request.subject_id, reader, "receipts")
    return ReceiptJson.of(receipt, seen)


@router.get("/v1/receipts")
def list_receipts(
    services: ServicesDep,
    caller: CallerDep,
    reader: ReaderDep,
    subject_id: Annotated[SubjectId, Query()],
    since: Annotated[Moment | None, Query()] = None,
    until: Annotated[Moment | None, Query()] = None,
    cursor: Annotated[Text | None, Query(max_length=512)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> ReceiptListResponse:
    """The subject's receipts created in ``[since, until)``, newest first; pass
    ``next_cursor`` back as ``cursor`` for the next page."""
    seen = visibility(services, caller.tenant_id, subject_id, reader, "receipts")
    try:
        page = services.receipts.list(
            caller.tenant_id, subject_id, since=since, until=until, cursor=cursor, limit=limit
        )
    except BadCursor as error:
        raise validation_error("cursor", str(error)) from None
    return ReceiptListResponse(
        receipts=[ReceiptJson.of(receipt, seen) for receipt in page.receipts],
        next_cursor=page.next_cursor,
    )


@router.post(
    "/v1/receipts/{receipt_id}/replay",
    response_model=ReplayResponse,
    responses=error_responses(404),
)
def replay_receipt(
    receipt_id: str,
    services: ServicesDep,
    caller: CallerDep,
    reader: ReaderDep,
    body: Annotated[ReplayRequest | None, Body()] = None,
) -> Response:
    """Replay a receipt: ``{"mode": "exact"}`` builds the bundle as of its ``as_of``
    and says whether the bytes are the ones served (``reproduced``); ``current`` (the
    default, and what an empty body means) builds today's bundle for the same request,
    with a receipt of its own, and says which memories and episodes came and went."""
    mode = body.mode if body is not None else ReplayMode.CURRENT
    original = services.receipts.get(caller.tenant_id, receipt_id)
    if original is None:
        raise _unknown(receipt_id)
    seen = visibility(services, caller.tenant_id, original.request.subject_id, reader, "receipts")
    replay = services.receipts.replay(caller.tenant_id, receipt_id, mode, seen)
    if replay is None:
        raise _unknown(receipt_id)
    return Response(_replay_body(replay, seen), media_type="application/json")


def _replay_body(replay: Replay, seen: Visibility) -> str:
    # Canonical JSON throughout, so the bundle inside is written exactly as it was
    # hashed: canonical_json(answer["bundle"]) is the bytes of ``diff.context_hash``.
    return canonical_json(
        {
            "original_receipt_id": str(replay.original.id),
            "replay_receipt_id": str(replay.receipt.id) if replay.receipt else None,
            "mode": replay.mode.value,
            "reproduced": replay.reproduced,
            "diff": {
                "context_hash": {
                    "original": replay.original.context_hash,
                    "replay": replay.context_hash,
                    "changed": not replay.reproduced,
                },
                "selected_entries": {
                    "added": [entry.to_json() for entry in shown_entries(replay.added, seen)],
                    "removed": [entry.to_json() for entry in shown_entries(replay.removed, seen)],
                    "common": replay.common,
                },
                "filters_applied": {"added": [], "removed": []},
            },
            "bundle": orjson.loads(replay.body),
        }
    )


def _unknown(receipt_id: str) -> ApiError:
    return ApiError(404, "not_found", f"no receipt {receipt_id!r} in this tenant")
