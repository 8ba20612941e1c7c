"""The HTTP side of observability: ``GET /metrics``, request timing and the access log.

:class:`ObservedRequests` is pure ASGI middleware (it never buffers a body): it times
each request from its first byte in to its last byte out, records it under the
*route template* (``/v1/runs/{run_id}``, never the raw path, so the number of series
stays bounded), and writes one access log line with method, path, route, status,
duration and the process id. uvicorn's own access log is off (see ``serve_until_stopped``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, start_http_server
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memsync.runtime.app.api.request_ids import current_request_id, loggable_path
from memsync.runtime.app.observability.metrics import Metrics

__all__ = [
    "UNMATCHED_ROUTE",
    "ObservedRequests",
    "install_observability",
    "route_template",
    "serving_metrics",
]

access_log = logging.getLogger("memsync.access")

UNMATCHED_ROUTE = "unmatched"
"""The route label of a request no route matched (a 404 for an unknown path)."""


def route_template(scope: Scope) -> str:
    """The path template of the route that handled the request (the router records
    the route it matched in the scope), else :data:`UNMATCHED_ROUTE`."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else UNMATCHED_ROUTE


class ObservedRequests:
    """Times every HTTP request into ``metrics`` and logs it to ``memsync.access``."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        # Anything that escapes the application is answered 500 by Starlette's outer
        # error middleware.
        status = 500

        async def observed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            seconds = time.perf_counter() - started
            method = str(scope["method"])
            route = route_template(scope)
            self.metrics.http_request(method, route, status, seconds)
            access_log.info(
                "request",
                extra={
                    "method": method,
                    # The path only: a query string may carry what must not be logged.
                    "path": loggable_path(scope),
                    "request_id": current_request_id(),
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 3),
                    # Which of the API processes answered (serve --processes N).
                    "pid": os.getpid(),
                },
            )


def install_observability(app: FastAPI, metrics: Metrics) -> None:
    """Serve ``GET /metrics`` (no API key: scrapers send none; it holds counts, tenant
    and connector names, never a record) and observe every request, outermost, so even
    a refused oversized body is timed and logged."""

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(ObservedRequests, metrics=metrics)


@contextmanager
def serving_metrics(metrics: Metrics, host: str, port: int) -> Iterator[str]:
    """Serve ``metrics`` on ``host:port`` (0: any free port) from a background thread
    until the block ends; yields the URL of ``/metrics``. For processes with no HTTP
    API of their own (``memsync worker --metrics-port``)."""
    server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    try:
        yield f"http://{host}:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
