"""At most ``api.concurrent_requests`` requests worked on at once per API process, the
ones an agent waits on let in first.

A request's Python work holds the GIL, so requests worked on together only take turns
at one core: past a few at once, more lengthen every request's time, and the cheap ones
(a single ``POST /v1/episodes``, which runs on the event loop) overtook the costly ones,
which then waited over a second at 64 clients. :class:`RequestAdmission` lets
``concurrent_requests`` requests in and queues the others on the event loop, where
waiting costs nothing. A request's body is received before it queues, so a slow upload
holds no place. Probes and the metrics scrape go straight through: a busy process must
still say it is alive.

The queue has two lanes. Requests to ``api.prioritized_paths`` (by default the context
bundle and memory search, which an agent waits on before it can answer) are let in
ahead of the other waiting requests (ingest, timelines, compiles, listings): under a
mixed load, waiting for a place was a third of a context request's median time. So
that the other lane is never starved, the oldest of its waiting requests is passed over
by at most ``api.overtake_limit`` prioritized requests that arrived after it; then it
goes first. While both lanes wait, the other lane so gets at least one place in every
``overtake_limit + 1``. Within a lane, first come, first served.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import count

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["UNQUEUED_PATHS", "AdmissionQueue", "RequestAdmission"]

UNQUEUED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
"""Answered at once, whatever waits: liveness, readiness and the metrics scrape."""


@dataclass(eq=False)
class _Waiter:
    arrival: int
    admitted: anyio.Event = field(default_factory=anyio.Event)
    overtaken: int = 0


class AdmissionQueue:
    """``places`` places, and two lanes of requests waiting for one.

    A request takes a place at once if one is free and nobody waits; otherwise it
    waits in its lane. A freed place goes to the prioritized lane's oldest waiter,
    unless the other lane's oldest waiter arrived before it and has already been passed
    over ``overtake_limit`` times by prioritized requests that arrived after it. With
    ``overtake_limit=0``, or no prioritized request, it is one queue in arrival order.

    Used on one event loop only (no locks: nothing here awaits between reading and
    changing its state). A waiter cancelled while it waits leaves its lane; one
    cancelled just after a place was handed to it hands the place on.
    """

    def __init__(self, places: int, overtake_limit: int) -> None:
        self._free = places
        self._overtake_limit = overtake_limit
        self._prioritized: deque[_Waiter] = deque()
        self._others: deque[_Waiter] = deque()
        self._arrivals = count()

    @property
    def waiting(self) -> int:
        """Requests waiting for a place, both lanes."""
        return len(self._prioritized) + len(self._others)

    async def take(self, *, prioritized: bool) -> None:
        """Wait for a place and take it; :meth:`give_back` must follow, once."""
        if self._free > 0:  # then nobody waits: a freed place goes to a waiter first
            self._free -= 1
            return
        waiter = _Waiter(next(self._arrivals))
        lane = self._prioritized if prioritized else self._others
        lane.append(waiter)
        try:
            await waiter.admitted.wait()
        except BaseException:
            if waiter.admitted.is_set():  # a place was handed to it: pass it on
                self.give_back()
            else:
                lane.remove(waiter)
            raise

    def give_back(self) -> None:
        """Free a place: it goes straight to the next waiter, if one waits."""
        waiter = self._next()
        if waiter is None:
            self._free += 1
            return
        waiter.admitted.set()

    def _next(self) -> _Waiter | None:
        if not self._prioritized:
            return self._others.popleft() if self._others else None
        if not self._others:
            return self._prioritized.popleft()
        oldest_other = self._others[0]
        if oldest_other.arrival < self._prioritized[0].arrival:
            if oldest_other.overtaken >= self._overtake_limit:
                return self._others.popleft()
            oldest_other.overtaken += 1
        return self._prioritized.popleft()


class RequestAdmission:
    """ASGI middleware: let ``limit`` HTTP requests in at once; the others wait their
    turn, requests to ``prioritized_paths`` ahead of the rest, a waiting request passed
    over at most ``overtake_limit`` times (:class:`AdmissionQueue`).

    A request is let in once its body has arrived (the body's size is bounded outside,
    by ``BodySizeLimit``), and keeps its place until its answer is handed to the server,
    whether it succeeded, failed or its client went away. The queue is made on the
    event loop that serves, at the application's start (each test client runs a new
    one)."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int,
        prioritized_paths: Iterable[str] = (),
        overtake_limit: int = 0,
    ) -> None:
        self.app = app
        self._limit = limit
        self._prioritized_paths = frozenset(prioritized_paths)
        self._overtake_limit = overtake_limit
        self._queue: AdmissionQueue | None = None

    @property
    def waiting(self) -> int:
        """Requests whose body has arrived, waiting for their turn."""
        return 0 if self._queue is None else self._queue.waiting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            self._queue = None  # made again on the loop that serves next
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

        if self._queue is None:
            self._queue = AdmissionQueue(self._limit, self._overtake_limit)
        queue = self._queue
        await queue.take(prioritized=scope["path"] in self._prioritized_paths)
        try:
            await self.app(scope, replay, send)
        finally:
            queue.give_back()


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
