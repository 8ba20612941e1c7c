"""``X-Request-ID``: every response carries one, the caller's or a fresh one.

As in Statewave, a well-formed id the caller sends is echoed back; anything else (no
header, too long, odd characters) is replaced by a fresh one. The id is on the access
log line of the request (written by the observability middleware inside this one), on
the error log line of an unexpected failure, and in the body of every error
(``error.request_id``, which the Statewave SDK reads).
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["REQUEST_ID_HEADER", "RequestIds", "current_request_id", "loggable_path"]

REQUEST_ID_HEADER = "X-Request-ID"

# A correlation token, not free text: it goes into log lines and response headers.
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:\-]{1,128}")
_request_id: ContextVar[str | None] = ContextVar("memsync_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request being handled, or ``None`` outside one."""
    return _request_id.get()


class RequestIds:
    """ASGI middleware: give each HTTP request an id and answer with it."""

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

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        await self.app(scope, receive, send_with_id)


def loggable_path(scope: Scope) -> str:
    """The request path for a log line, without its query string."""
    # The path as sent, still percent-encoded: a decoded "%0A" would start a forged
    # log line.
    raw: bytes | None = scope.get("raw_path")
    return raw.decode("latin-1") if raw else repr(scope["path"])
