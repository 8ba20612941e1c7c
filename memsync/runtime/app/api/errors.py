"""Error bodies in the Statewave shape: ``{"error": {"code", "message", "details"}}``.

No input produces a 500: validation problems are 422 naming the field, oversized
bodies 413, a store that cannot be reached 503 (with ``Retry-After``; the next request
opens a fresh connection, so the API recovers when the store is back), a 405 names the
allowed methods, and anything unexpected is logged and answered with a generic 500
that leaks nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc as sa_exc
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memsync.runtime.app.api.request_ids import REQUEST_ID_HEADER, current_request_id
from memsync.runtime.storage.engine import is_store_unavailable, lost_a_node
from memsync.timerange import TimeOutOfRange

__all__ = [
    "VALIDATION_FAILED",
    "ApiError",
    "BodySizeLimit",
    "error_response",
    "install_error_handlers",
    "validation_error",
]

logger = logging.getLogger("memsync.api")

VALIDATION_FAILED = "Request validation failed"
"""The ``message`` of every 422, as Statewave words it; what failed is in ``details``."""

STORE_RETRY_AFTER_SECONDS = 5


class ApiError(Exception):
    """An error the API answers with a status, a code and a message for the caller."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details


def validation_error(field: str, reason: str) -> ApiError:
    """A 422 found by a handler rather than by request parsing, in the same shape."""
    return ApiError(
        422, "validation_error", VALIDATION_FAILED, [{"field": field, "reason": reason}]
    )


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
    answer_headers = dict(headers or {})
    request_id = current_request_id()
    if request_id is not None:
        # In the body as Statewave puts it, and in the header here too: a 500 is sent
        # by Starlette's outermost middleware, past the one that adds the header.
        body["request_id"] = request_id
        answer_headers[REQUEST_ID_HEADER] = request_id
    return JSONResponse({"error": body}, status_code=status, headers=answer_headers or None)


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
        return error_response(422, "validation_error", VALIDATION_FAILED, problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code == 400 and isinstance(error.__cause__, UnicodeDecodeError):
            # FastAPI answers 400 for a body it cannot decode; to a client it is one
            # more kind of invalid JSON (JSON is UTF-8), so it is answered as such.
            refused = validation_error("body", "not valid JSON: the body is not UTF-8")
            return error_response(refused.status, refused.code, refused.message, refused.details)
        code = _HTTP_CODES.get(error.status_code, "http_error")
        # A 405 says which methods the route allows (Allow), as HTTP requires.
        return error_response(error.status_code, code, str(error.detail), headers=error.headers)

    @app.exception_handler(sa_exc.OperationalError)
    @app.exception_handler(sa_exc.InterfaceError)
    @app.exception_handler(sa_exc.TimeoutError)
    @app.exception_handler(sa_exc.InternalError)
    async def _store_unavailable(request: Request, error: Exception) -> JSONResponse:
        # The store is down, unreachable, (SQLite) locked for longer than the busy
        # timeout, or (Citus) a worker holding the tenant's shards does not answer:
        # nothing was written, so the client may simply try again.
        if not is_store_unavailable(error):
            return await _unexpected(request, error)
        if lost_a_node(error):
            # The node's address stays in the log: it is the operator's to know.
            logger.warning("store node unavailable", extra={"error": _first_line(error)})
            message = "a node of the distributed store is unavailable; retry in a few seconds"
        else:
            logger.warning("store unavailable", extra={"error": type(error).__name__})
            message = "the store is unavailable; retry in a few seconds"
        response = error_response(503, "store_unavailable", message)
        response.headers["Retry-After"] = str(STORE_RETRY_AFTER_SECONDS)
        return response

    @app.exception_handler(TimeOutOfRange)
    async def _out_of_range(_request: Request, error: TimeOutOfRange) -> JSONResponse:
        # A time a service refused (a checkpoint before any source holds data, a
        # backfill in the future): the client's to correct, named as a body field is.
        refused = validation_error(error.field, str(error))
        return error_response(refused.status, refused.code, refused.message, refused.details)

    @app.exception_handler(RecursionError)
    async def _too_deep(_request: Request, _error: RecursionError) -> JSONResponse:
        error = validation_error("body", "JSON nested too deeply")
        return error_response(error.status, error.code, error.message, error.details)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        logger.exception(
            "unhandled error",
            extra={
                "method": request.method,
                "path": request.url.path,
                "request_id": current_request_id(),
            },
        )
        return error_response(500, "internal_error", "internal error; see the server log")


def _first_line(error: Exception) -> str:
    orig = getattr(error, "orig", None)
    return (str(orig) if orig is not None else str(error)).strip().split("\n", 1)[0]


class BodySizeLimit:
    """ASGI middleware: refuse request bodies over ``max_bytes`` with 413.

    It checks ``Content-Length`` up front and also counts streamed chunks, so a
    chunked upload cannot slip past the limit. ``on_refused`` hears of each refusal
    (with the request's scope), once, so a route can count its own (webhooks do).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        on_refused: Callable[[Scope, int], None] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_refused = on_refused

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
                    self._heard(scope)
                    # An HTTPException survives FastAPI's body parsing as itself.
                    raise StarletteHTTPException(413, self._message())
            return message

        await self.app(scope, counting_receive, send)

    def _message(self) -> str:
        return f"request body is over the limit of {self.max_bytes} bytes"

    def _heard(self, scope: Scope) -> None:
        if self.on_refused is not None:
            self.on_refused(scope, self.max_bytes)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._heard(scope)
        response = error_response(413, "payload_too_large", self._message())
        await response(scope, receive, send)
