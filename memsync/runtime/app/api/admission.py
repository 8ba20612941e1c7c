"""At most ``api.concurrent_requests`` requests worked on at once per API process.

A request's Python work holds the GIL, so requests worked on together only take turns
at one core: past a few at once, more lengthen every request's time, and the cheap ones
(a single ``POST /v1/episodes``, which runs on the event loop) overtook the costly ones,
which then waited over a second at 64 clients. :class:`RequestAdmission` lets
``concurrent_requests`` requests in and queues the others in arrival order, on the event
loop, where waiting costs nothing. A request's body is received before it queues, so a
slow upload holds no place. Probes and the metrics scrape go straight through: a busy
process must still say it is alive.
"""

from __future__ import annotations

from collections import deque

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["UNQUEUED_PATHS", "RequestAdmission"]

UNQUEUED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Answered at once, whatever waits: liveness, readiness and the metrics scrape."""


class RequestAdmission:
    """ASGI middleware: let ``limit`` HTTP requests in at once; the others wait their
    turn, first come, first served (anyio's :class:`~anyio.CapacityLimiter` is FIFO).

    A request is let in once its body has arrived (the body's size is bounded outside,
    by ``BodySizeLimit``), and keeps its place until its answer is handed to the server,
    whether it succeeded, failed or its client went away. The limiter is made on the
    event loop that serves, at the application's start (each test client runs a new
    one)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self._limit = limit
        self._admitted: anyio.CapacityLimiter | None = None

    @property
    def waiting(self) -> int:
        """Requests whose body has arrived, waiting for their turn."""
        return 0 if self._admitted is None else self._admitted.statistics().tasks_waiting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            self._admitted = None  # made again on the loop that serves next
        if scope["type"] != "http" or scope["path"] in UNQUEUED_PATHS:
            await self.app(scope, receive, send)
            return
        received, failure = await _whole_body(receive)

        async def replay() -> Message:
            if received:
                return received.popleft()
            if failure is not None:
                # Where the application reads past what arrived (a body over the size
                # limit), as if it had read it itself: its handlers answer.
                raise failure
            return await receive()

        if self._admitted is None:
            self._admitted = anyio.CapacityLimiter(self._limit)
        async with self._admitted:
            await self.app(scope, replay, send)


async def _whole_body(receive: Receive) -> tuple[deque[Message], Exception | None]:
    """The request's messages up to the last part of its body (or a disconnect), and
    the error that ended receiving them early, if one did."""
    received: deque[Message] = deque()
    try:
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request" or not message.get("more_body", False):
                return received, None
    except Exception as error:
        return received, error
