"""The HTTP API: the core of the Statewave v1 contract over memsync's services.

Handlers are thin: they authenticate, validate, call the same services the CLI and
the sync runner use, and shape the response. Every query is scoped to the caller's
tenant.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI

import memsync
from memsync.runtime.app.api import (
    connectors,
    episodes,
    health,
    jobs,
    memories,
    receipts,
    runs,
    support,
    webhooks,
)
from memsync.runtime.app.api.admission import RequestAdmission
from memsync.runtime.app.api.auth import LoopbackHostOnly
from memsync.runtime.app.api.errors import (
    BodySizeLimit,
    install_error_handlers,
)
from memsync.runtime.app.api.openapi import document_api
from memsync.runtime.app.api.request_ids import RequestIds
from memsync.runtime.app.observability.http import install_observability
from memsync.runtime.app.services import Services
from memsync.runtime.app.ui import install_ui

__all__ = ["Services", "create_app"]


def create_app(
    services: Services, *, beside: Callable[[], AbstractContextManager[object]] | None = None
) -> FastAPI:
    """Build the ASGI application around ``services``.

    ``beside``: work the application runs for as long as it serves (the job workers of
    a process of ``memsync serve --processes N``), entered at its lifespan startup and
    left at its shutdown, once the requests in flight were answered.
    """

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # No more threads than requests admitted at once (RequestAdmission), nor
        # connections in use than the store keeps open (ApiSettings.concurrent_requests).
        threads = anyio.to_thread.current_default_thread_limiter()
        threads.total_tokens = services.settings.api.concurrent_requests
        with ExitStack() as running:
            if beside is not None:
                running.enter_context(beside())
            yield
            # The store's asyncio pool (single ingests) is closed on the loop that used it.
            await services.store.dispose_async()

    app = FastAPI(
        title="memsync",
        version=memsync.__version__,
        description="Scheduled connector sync for agent memory (Statewave v1 compatible).",
        lifespan=lifespan,
    )
    app.state.services = services
    install_error_handlers(app)
    # Innermost of the middlewares: the access log and the metrics time a request's wait.
    api = services.settings.api
    app.add_middleware(
        RequestAdmission,
        limit=api.concurrent_requests,
        prioritized_paths=api.prioritized_paths,
        overtake_limit=api.overtake_limit,
    )
    app.add_middleware(
        BodySizeLimit,
        max_bytes=api.max_body_bytes,
        on_refused=webhooks.counting_refusals(services),
    )
    if not services.authenticator.enabled:
        app.add_middleware(LoopbackHostOnly)
    install_observability(app, services.metrics)
    # Added last, so it runs first: every request, even a body refused for its size,
    # has an id, and the access line written inside knows it.
    app.add_middleware(RequestIds)
    document_api(app)
    # First: the hottest routes (see its module), the single create before them all.
    app.include_router(episodes.lean_router)
    app.include_router(episodes.router)
    app.include_router(health.router)
    app.include_router(memories.router)
    app.include_router(receipts.router)
    app.include_router(support.router)
    app.include_router(runs.router)
    app.include_router(jobs.router)
    app.include_router(connectors.router)
    app.include_router(webhooks.router)
    install_ui(app, services)

    return app
