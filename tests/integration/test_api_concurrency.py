"""``api.concurrent_requests``: how many requests one API process works on at once (see
tests/unit/test_admission.py for the admission itself), with as many threads, and the
store's connections kept open for them and the job workers beside them."""

from __future__ import annotations

import anyio.to_thread
from fastapi.testclient import TestClient

from memsync.runtime.app.api.admission import RequestAdmission
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import ApiSettings, JobsSettings, Settings
from memsync.runtime.app.services import Services
from tests.helpers import LOOPBACK


def test_concurrent_requests_sets_the_admission_the_threads_and_the_pool(
    store_url: str,
) -> None:
    settings = Settings(
        store=store_url,
        api=ApiSettings(concurrent_requests=3),
        jobs=JobsSettings(serve_workers=2),
    )
    services = Services.open(settings)
    try:
        app = create_app(services)
        with TestClient(app, base_url=LOOPBACK) as client:
            assert client.get("/v1/timeline", params={"subject_id": "ana"}).status_code == 200
            threads = client.portal.call(
                lambda: anyio.to_thread.current_default_thread_limiter().total_tokens
            )
        pool = services.store.engine.pool
    finally:
        services.close()
    [admission] = [entry for entry in app.user_middleware if entry.cls is RequestAdmission]
    assert admission.kwargs == {
        "limit": 3,
        "prioritized_paths": ["/v1/context", "/v1/memories/search"],
        "overtake_limit": 2,
    }
    assert threads == 3
    if services.store.is_postgresql:  # SQLite's pool is one connection per thread
        assert pool.size() == 3 + 2  # type: ignore[attr-defined]
