"""Error bodies in the Statewave shape: ``{"error": {"code", "message", "details"}}``.

No input produces a 500: validation problems are 422 naming the field, oversized
bodies 413, a store that cannot be reached 503 (until it is back: the next request
opens a fresh connection), and anything unexpected is logged and answered with a
generic 500 that leaks nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "ERROR_RESPONSES",
    "ApiError",
    "BodySizeLimit",
    "ErrorResponse",
    "error_response",
    "install_error_handlers",
]

logger = logging.getLogger("memsync.api")


class ErrorProblem(BaseModel):
    field: str
    reason: str


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[ErrorProblem] | None = None


class ErrorResponse(BaseModel):
    """Every error answer: ``{"error": {"code", "message", "details"?}}``."""

    error: ErrorBody


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _error("Without API keys: a Host that is not a loopback name"),
    401: _error("Missing or unknown API key"),
    403: _error("The API key may not act for that tenant"),
    404: _error("Unknown id or route"),
    413: _error("Body over api.max_body_bytes"),
    422: _error("Invalid input; details name each field"),
    503: _error("The store cannot be reached; retry shortly"),
}
"""The errors every route can answer, for the OpenAPI document (each route adds what
only it answers)."""


class ApiError(Exception):
    """An error the API answers with a status, a code and a message for the caller."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def error_response(
    status: int,
    code: str,
    message: str,
    details: Any = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if details is not None:
        body["details"] = details
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _field(location: tuple[Any, ...]) -> str:
    parts = [part for part in location if part != "body"]
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "body"


_HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, error: ApiError) -> JSONResponse:
        return error_response(error.status, error.code, error.message, error.details)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, error: RequestValidationError) -> JSONResponse:
        problems = [
            {"field": _field(tuple(problem["loc"])), "reason": problem["msg"]}
            for problem in error.errors()
        ]
        message = "; ".join(f"{problem['field']}: {problem['reason']}" for problem in problems)
        return error_response(422, "validation_error", message, problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code == 400 and isinstance(error.__cause__, UnicodeDecodeError):
            # FastAPI answers 400 for a body it cannot decode; to a client it is one
            # more kind of invalid JSON (JSON is UTF-8), so it is answered as such.
            return error_response(
                422,
                "validation_error",
                "body: not valid JSON: the body is not UTF-8",
                [{"field": "body", "reason": "not UTF-8"}],
            )
        code = _HTTP_CODES.get(error.status_code, "http_error")
        # A 405 says which methods the route allows (Allow), as HTTP requires.
        return error_response(error.status_code, code, str(error.detail), headers=error.headers)

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    @app.exception_handler(PoolTimeout)
    async def _store_unavailable(request: Request, error: Exception) -> JSONResponse:
        logger.warning(
            "store unavailable on %s %s: %s", request.method, request.url.path, type(error).__name__
        )
        return error_response(
            503,
            "store_unavailable",
            "the store cannot be reached right now; retry shortly",
        )

    @app.exception_handler(RecursionError)
    async def _too_deep(_request: Request, _error: RecursionError) -> JSONResponse:
        return error_response(422, "validation_error", "body: JSON nested too deeply")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        logger.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error; see the server log")


class BodySizeLimit:
    """ASGI middleware: refuse request bodies over ``max_bytes`` with 413.

    It checks ``Content-Length`` up front and also counts streamed chunks, so a
    chunked upload cannot slip past the limit.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await self._refuse(scope, receive, send)
            return

        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # An HTTPException survives FastAPI's body parsing as itself.
                    raise StarletteHTTPException(413, self._message())
            return message

        await self.app(scope, counting_receive, send)

    def _message(self) -> str:
        return f"request body is over the limit of {self.max_bytes} bytes"

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, "payload_too_large", self._message())
        await response(scope, receive, send)
