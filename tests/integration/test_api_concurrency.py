"""``api.request_threads``: how many requests one API process works on at once, and the
store's connections kept open for them."""

from __future__ import annotations

import anyio.to_thread
from fastapi.testclient import TestClient

from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import ApiSettings, Settings
from memsync.runtime.app.services import Services
from tests.helpers import LOOPBACK


def test_the_api_runs_request_threads_requests_at_once_with_a_pool_as_large(
    store_url: str,
) -> None:
    services = Services.open(Settings(store=store_url, api=ApiSettings(request_threads=3)))
    try:
        with TestClient(create_app(services), base_url=LOOPBACK) as client:
            assert client.get("/healthz").status_code == 200
            threads = client.portal.call(
                lambda: anyio.to_thread.current_default_thread_limiter().total_tokens
            )
        pool = services.store.engine.pool
    finally:
        services.close()
    assert threads == 3
    if services.store.is_postgresql:  # SQLite's pool is one connection per thread
        assert pool.size() == 3  # type: ignore[attr-defined]
