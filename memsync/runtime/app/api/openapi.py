"""An OpenAPI document that tells the truth about errors and authentication.

Every error body is the ``{"error": {"code", "message", "details"}}`` envelope
(:class:`ErrorResponse`). What a route can answer besides success follows from what it
is, and is documented here once rather than on every route:

- it needs the caller (``X-API-Key``, ``X-Tenant-ID``): the ``ApiKeyAuth`` scheme, 401
  and 403;
- it takes a parameter, a body or the tenant header: 422;
- it takes a body: 413 (over ``api.max_body_bytes``);
- it reads the store: 503 while the store is unreachable (with ``Retry-After``).

What only some routes do (404 for an unknown id, 202 for an enqueued job) each such
route declares itself, with :func:`error_responses`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

__all__ = [
    "API_KEY_HEADER",
    "API_KEY_SCHEME",
    "ErrorBody",
    "ErrorResponse",
    "document_api",
    "error_responses",
]

API_KEY_SCHEME = "ApiKeyAuth"
API_KEY_HEADER = "x-api-key"
TENANT_HEADER = "x-tenant-id"

_DESCRIPTIONS = {
    401: "No API key, or an unknown one",
    403: "The API key may not act for the requested tenant",
    404: "No such resource in the caller's tenant",
    409: "The resource is busy: a run of the connector is going; retry once it has ended",
    413: "The request body is over the configured limit",
    422: "A parameter, the body or X-Tenant-ID is invalid; details name the field",
    503: "The store is unreachable; retry after the Retry-After seconds",
}


class ErrorBody(BaseModel):
    code: str = Field(description="machine-readable, e.g. not_found, validation_error")
    message: str = Field(description="what went wrong and what to do, for a person")
    details: Any = Field(
        default=None,
        description="for validation errors: a list of {field, reason}",
    )


class ErrorResponse(BaseModel):
    """The body of every error response."""

    error: ErrorBody


_ERROR_REF = {"$ref": "#/components/schemas/ErrorResponse"}


def _error(status: int) -> dict[str, Any]:
    return {
        "description": _DESCRIPTIONS[status],
        "content": {"application/json": {"schema": _ERROR_REF}},
    }


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route decorator: these error statuses, with the envelope."""
    return {
        status: {"model": ErrorResponse, "description": _DESCRIPTIONS[status]}
        for status in statuses
    }


def _takes_the_caller(operation: dict[str, Any]) -> bool:
    return any(
        parameter.get("in") == "header" and parameter.get("name", "").lower() == TENANT_HEADER
        for parameter in operation.get("parameters", [])
    )


def _generic_statuses(operation: dict[str, Any], authenticated: bool) -> list[int]:
    statuses = [401, 403] if authenticated else []
    if "requestBody" in operation:
        statuses.append(413)
    if (
        operation.get("parameters")
        or "requestBody" in operation
        or "422" in operation.get("responses", {})
    ):
        statuses.append(422)
    if authenticated:
        # Every authenticated route reads or writes the store.
        statuses.append(503)
    return statuses


def document_api(app: FastAPI) -> None:
    """Make ``app.openapi()`` document errors and the API key as described above.

    The routes that need a key are those that take the authenticated caller, whose
    dependency declares the ``X-Tenant-ID`` header; they get the ``ApiKeyAuth``
    security requirement (the dependency reads ``X-API-Key`` without declaring it).
    """

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        document = get_openapi(
            title=app.title,
            version=app.version,
            description=app.description,
            routes=app.routes,
        )
        components = document.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        envelope = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(envelope.pop("$defs", {}))
        schemas["ErrorResponse"] = envelope
        components["securitySchemes"] = {
            API_KEY_SCHEME: {
                "type": "apiKey",
                "in": "header",
                "name": "X-API-Key",
                "description": "An API key from `memsync keys new`; X-Tenant-ID picks "
                "one of its tenants. Not needed when the server has no keys (loopback).",
            }
        }
        for operations in document["paths"].values():
            for operation in operations.values():
                authenticated = _takes_the_caller(operation)
                responses = operation.setdefault("responses", {})
                for status in _generic_statuses(operation, authenticated):
                    responses[str(status)] = _error(status)
                if authenticated:
                    operation["security"] = [{API_KEY_SCHEME: []}]
        # FastAPI's own 422 body is replaced by the envelope everywhere.
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]
