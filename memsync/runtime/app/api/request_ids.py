"""``X-Request-ID``: every response carries one, the caller's or a fresh one.

As in Statewave, a well-formed id the caller sends is echoed back; anything else (no
header, too long, odd characters) is replaced by a fresh one. The id is on the access
log line of the request, on the error log line of an unexpected failure, and in the
body of every error (``error.request_id``, which the Statewave SDK reads).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from contextvars import ContextVar

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["REQUEST_ID_HEADER", "RequestIds", "current_request_id"]

REQUEST_ID_HEADER = "X-Request-ID"

access_log = logging.getLogger("memsync.api.access")

# A correlation token, not free text: it goes into log lines and response headers.
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_request_id: ContextVar[str | None] = ContextVar("memsync_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request being handled, or ``None`` outside one."""
    return _request_id.get()


class RequestIds:
    """ASGI middleware: give each HTTP request an id, answer with it, and log one
    access line per request (method, path, status, time to the headers, id).

    The path is logged without its query string, which can hold what a user searched
    for.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        supplied = next(
            (value for name, value in scope["headers"] if name == b"x-request-id"), b""
        ).decode("latin-1")
        request_id = supplied if _WELL_FORMED.fullmatch(supplied) else uuid.uuid4().hex
        # Not reset afterwards: ASGI servers run each request in a task of its own, whose
        # context ends with it, and the 500 handler runs outside this middleware (in
        # Starlette's outermost one), after it has returned, and still needs the id.
        _request_id.set(request_id)
        started = time.perf_counter()
        answered = False

        def log(status: int) -> None:
            access_log.info(
                "%s %s %d %.1fms request_id=%s",
                scope["method"],
                _loggable_path(scope),
                status,
                (time.perf_counter() - started) * 1000,
                request_id,
            )

        async def send_with_id(message: Message) -> None:
            nonlocal answered
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
                # Logged as the answer starts, so the line is written before the caller
                # has the status; the duration is the time to the response's headers.
                log(message["status"])
                answered = True
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if not answered:
                log(500)  # the application failed; Starlette's outermost layer answers


def _loggable_path(scope: Scope) -> str:
    # The path as sent, still percent-encoded: a decoded "%0A" would start a forged
    # log line.
    raw: bytes | None = scope.get("raw_path")
    return raw.decode("latin-1") if raw else repr(scope["path"])
