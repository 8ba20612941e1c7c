"""``POST /v1/webhooks/{connector_name}``: deliveries a vendor pushes to a connector.

Not behind the API key: a vendor cannot send one. The delivery's signature, checked
against the connector's ``webhook.secret`` before anything is parsed, is what
authenticates it, and the connector's configuration names its tenant. See
:class:`~memsync.runtime.app.webhooks.WebhookIntake` for what each answer means.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from memsync.runtime.app.api.deps import ServicesDep
from memsync.runtime.app.api.errors import error_response
from memsync.runtime.app.api.openapi import ErrorResponse, error_responses
from memsync.runtime.storage.schema import CONNECTOR_NAME_LENGTH

__all__ = ["router"]

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


class EpisodeOutcome(BaseModel):
    """What ingest did with one episode of the delivery."""

    id: str
    status: str = Field(description="created, revised, duplicate or tombstoned")
    revision: int


class WebhookReceipt(BaseModel):
    """What became of a delivery. A vendor handshake (Slack's ``url_verification``) is
    answered with the body the vendor asks for instead."""

    outcome: str = Field(description="stored, revised, duplicate or ignored")
    event: str = Field(description="the vendor's event and action, e.g. issues.edited")
    delivery_id: str | None = None
    episodes: list[EpisodeOutcome] = []


_REFUSALS = {
    400: "The body is not the vendor's JSON envelope",
    401: "Missing or bad signature, or a timestamp outside the vendor's window",
    422: "A signed event that is not a record the connector reads",
}

_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 422: "unprocessable"}


@router.post(
    "/{connector_name}",
    # Read raw (the signature is over the bytes), so FastAPI does not see a body model.
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    },
    responses={
        200: {"model": WebhookReceipt, "description": "Stored, or known already"},
        **error_responses(404, 413, 503),
        **{
            status: {"model": ErrorResponse, "description": description}
            for status, description in _REFUSALS.items()
        },
    },
)
async def receive_webhook(
    connector_name: Annotated[str, Path(max_length=CONNECTOR_NAME_LENGTH)],
    request: Request,
    services: ServicesDep,
) -> Response:
    """Verify, parse and store one delivery; 200 with what became of it (``stored``,
    ``revised``, ``duplicate``, ``ignored``), or the vendor's handshake reply."""
    # The raw bytes: the signature is over them, not over a re-serialised parse.
    body = await request.body()
    answer = await run_in_threadpool(
        services.webhooks.receive, connector_name, dict(request.headers), body
    )
    if answer.error is not None:
        code = _CODES.get(answer.status, answer.outcome)
        return error_response(answer.status, code, answer.error, {"outcome": answer.outcome})
    return JSONResponse(answer.body, status_code=answer.status)
