"""``POST /v1/webhooks/{connector_name}``: deliveries a vendor pushes to a connector.

Not behind the API key: a vendor cannot send one. The delivery's signature, checked
against the connector's ``webhook.secret`` before anything is parsed, is what
authenticates it, and the connector's configuration names its tenant. See
:class:`~memsync.runtime.app.webhooks.WebhookIntake` for what each answer means.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.types import Scope

from memsync.runtime.app.api.deps import ServicesDep
from memsync.runtime.app.api.errors import error_response
from memsync.runtime.app.api.openapi import ErrorResponse, error_responses
from memsync.runtime.storage.schema import CONNECTOR_NAME_LENGTH

if TYPE_CHECKING:
    from memsync.runtime.app.services import Services

__all__ = ["counting_refusals", "router"]

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
    429: "Over the connector's webhook.rate_limit; retry after Retry-After seconds",
}

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    404: "not_found",
    413: "payload_too_large",
    422: "unprocessable",
    429: "rate_limited",
}

_PATH_PREFIX = router.prefix + "/"


def counting_refusals(services: Services) -> Callable[[Scope, int], None]:
    """What the API's body limit calls when it refuses a body (413, before the route
    reads it): a delivery to a connector is counted and logged as ``too_large`` under
    it, as every other refusal of a delivery is."""

    def refused(scope: Scope, max_bytes: int) -> None:
        path = str(scope.get("path", ""))
        if scope.get("method") != "POST" or not path.startswith(_PATH_PREFIX):
            return
        name = path[len(_PATH_PREFIX) :]
        if name and "/" not in name:
            services.webhooks.too_large(name, max_bytes)

    return refused


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
        headers = {"Retry-After": str(answer.retry_after)} if answer.retry_after else None
        return error_response(
            answer.status, code, answer.error, {"outcome": answer.outcome}, headers
        )
    return JSONResponse(answer.body, status_code=answer.status)
