"""API keys and tenants: one tenant can never read, count or delete another's data."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from memsync.runtime.app.config import ApiKey, ApiSettings, hash_api_key
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK, build_app

ACME_KEY = "ms_acme_secret"
GLOBEX_KEY = "ms_globex_secret"
ADMIN_KEY = "ms_admin_secret"


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    api = ApiSettings(
        keys=[
            ApiKey(name="acme", sha256=hash_api_key(ACME_KEY), tenants=["acme"]),
            ApiKey(name="globex", sha256=hash_api_key(GLOBEX_KEY), tenants=["globex"]),
            ApiKey(name="admin", key=ADMIN_KEY, tenants=["*"]),
        ]
    )
    with TestClient(build_app(store, api), base_url=LOOPBACK) as client:
        yield client


def as_tenant(key: str, tenant: str | None = None) -> dict[str, str]:
    headers = {"X-API-Key": key}
    if tenant is not None:
        headers["X-Tenant-ID"] = tenant
    return headers


EPISODE = {
    "subject_id": "shared-subject",
    "source": "chat",
    "type": "message",
    "payload": {"text": "hello"},
    "idempotency_key": "same-key",
}


def test_requests_without_or_with_an_unknown_key_are_401(client: TestClient) -> None:
    assert client.get("/v1/subjects").status_code == 401
    response = client.get("/v1/subjects", headers={"X-API-Key": "nope"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthorized"


def test_a_key_cannot_act_for_a_tenant_it_does_not_hold(client: TestClient) -> None:
    response = client.get("/v1/subjects", headers=as_tenant(ACME_KEY, "globex"))
    assert response.status_code == 403


def test_a_malformed_tenant_header_is_422(client: TestClient) -> None:
    response = client.get("/v1/subjects", headers=as_tenant(ADMIN_KEY, "../etc"))
    assert response.status_code == 422


def test_tenants_are_isolated_across_every_endpoint(client: TestClient) -> None:
    acme, globex = as_tenant(ACME_KEY), as_tenant(GLOBEX_KEY)
    acme_episode = client.post("/v1/episodes", json=EPISODE, headers=acme)
    globex_episode = client.post("/v1/episodes", json=EPISODE, headers=globex)

    # The same key in two tenants is two episodes, each created.
    assert acme_episode.status_code == globex_episode.status_code == 201
    assert acme_episode.json()["id"] != globex_episode.json()["id"]

    # Reads see only the caller's tenant.
    assert (
        client.get(f"/v1/episodes/{acme_episode.json()['id']}", headers=globex).status_code == 404
    )
    timeline = client.get("/v1/timeline", params={"subject_id": "shared-subject"}, headers=acme)
    assert [item["id"] for item in timeline.json()["episodes"]] == [acme_episode.json()["id"]]
    client.post(
        "/v1/episodes",
        json={**EPISODE, "subject_id": "acme-only", "idempotency_key": "acme-only-1"},
        headers=acme,
    )
    assert client.get("/v1/subjects", headers=globex).json()["total"] == 1
    assert client.get("/v1/subjects", headers=acme).json()["total"] == 2

    # A delete in one tenant leaves the other untouched.
    deleted = client.delete("/v1/subjects/shared-subject", headers=globex).json()
    assert deleted["episodes_deleted"] == 1
    after = client.get("/v1/timeline", params={"subject_id": "shared-subject"}, headers=acme)
    assert len(after.json()["episodes"]) == 1


def test_a_wildcard_key_may_choose_any_tenant(client: TestClient) -> None:
    client.post("/v1/episodes", json=EPISODE, headers=as_tenant(ACME_KEY))
    seen = client.get("/v1/subjects", headers=as_tenant(ADMIN_KEY, "acme")).json()
    assert seen["total"] == 1


def test_health_probes_need_no_key(client: TestClient) -> None:
    for probe in ("/v1/health", "/healthz", "/readyz"):
        assert client.get(probe).status_code == 200, probe
