"""Job routes: async compile (Statewave shape), and the job list of every kind."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import JobsSettings, Settings
from memsync.runtime.app.services import Services
from memsync.runtime.jobs import JobQueue
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK
from tests.jobs_support import worker

NOW = datetime(2026, 6, 1, tzinfo=UTC)
ACME = {"X-Tenant-ID": "acme"}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


def app_client(store: Store, clock: FakeClock, jobs: JobsSettings | None = None) -> TestClient:
    settings = Settings(store=str(store.engine.url), jobs=jobs or JobsSettings())
    return TestClient(create_app(Services(settings, store, clock)), base_url=LOOPBACK)


@pytest.fixture
def client(store: Store, clock: FakeClock) -> Iterator[TestClient]:
    with app_client(store, clock) as client:
        yield client


def say(client: TestClient, key: str, text: str, subject: str = "ana") -> None:
    episode = {
        "subject_id": subject,
        "source": "chat",
        "type": "message",
        "payload": {"messages": [{"role": "user", "content": text}]},
        "idempotency_key": key,
    }
    assert client.post("/v1/episodes", json=episode, headers=ACME).status_code == 201


def test_async_compile_answers_202_with_a_pending_job_that_a_worker_completes(
    client: TestClient, store: Store, clock: FakeClock
) -> None:
    say(client, "m1", "I live in Lisbon and I prefer tea.")
    submitted = client.post(
        "/v1/memories/compile", json={"subject_id": "ana", "async": True}, headers=ACME
    )
    again = client.post(
        "/v1/memories/compile", json={"subject_id": "ana", "async": True}, headers=ACME
    )

    assert submitted.status_code == 202
    job = submitted.json()
    assert (job["status"], job["subject_id"], job["memories_created"]) == ("pending", "ana", 0)
    assert again.json()["job_id"] == job["job_id"]
    pending = client.get(f"/v1/memories/compile/{job['job_id']}", headers=ACME).json()
    assert pending["status"] == "pending"

    worker(store, clock).run_once()

    done = client.get(f"/v1/memories/compile/{job['job_id']}", headers=ACME).json()
    assert done["status"] == "completed"
    assert done["error"] is None
    assert done["memories_created"] == len(done["memories"]) > 0
    assert {m["content"] for m in done["memories"]} >= {"Lives in Lisbon", "Prefers tea"}


def test_compile_jobs_are_tenant_scoped_and_unknown_ids_are_404(client: TestClient) -> None:
    job = client.post(
        "/v1/memories/compile", json={"subject_id": "ana", "async": True}, headers=ACME
    ).json()
    other_tenant = {"X-Tenant-ID": "globex"}

    status = client.get(f"/v1/memories/compile/{job['job_id']}", headers=other_tenant)
    assert status.status_code == 404
    assert client.get(f"/v1/jobs/{job['job_id']}", headers=other_tenant).status_code == 404
    unknown = client.get("/v1/memories/compile/00000000-0000-0000-0000-000000000000", headers=ACME)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"
    assert client.get("/v1/jobs/not-a-uuid", headers=ACME).status_code == 404


def test_jobs_can_be_listed_by_status_and_kind_and_shown(
    client: TestClient, store: Store, clock: FakeClock
) -> None:
    for subject in ("ana", "bob"):
        client.post(
            "/v1/memories/compile", json={"subject_id": subject, "async": True}, headers=ACME
        )
    JobQueue(store).enqueue("acme", "test", "x", now=clock.now())
    worker(store, clock).run_once()

    every = client.get("/v1/jobs", headers=ACME).json()["jobs"]
    pending = client.get(
        "/v1/jobs", params={"status": "pending", "kind": "compile"}, headers=ACME
    ).json()["jobs"]
    page = client.get("/v1/jobs", params={"limit": 1, "offset": 1}, headers=ACME).json()["jobs"]
    shown = client.get(f"/v1/jobs/{every[0]['id']}", headers=ACME).json()

    assert len(every) == 3
    assert [(j["kind"], j["status"]) for j in pending] == [("compile", "pending")]
    assert len(page) == 1
    assert shown == every[0]
    assert set(shown) >= {"attempts", "max_attempts", "lease_owner", "run_after", "error"}
    assert client.get("/v1/jobs", params={"status": "nope"}, headers=ACME).status_code == 422


def test_episodes_posted_to_the_api_trigger_a_compile_every_n(
    store: Store, clock: FakeClock
) -> None:
    with app_client(store, clock, JobsSettings(compile_every_n_episodes=2)) as client:
        say(client, "m1", "I use Rust at work.")
        assert client.get("/v1/jobs", headers=ACME).json()["jobs"] == []
        say(client, "m2", "I use Go at work.")
        [job] = client.get("/v1/jobs", headers=ACME).json()["jobs"]
    assert (job["kind"], job["target"], job["trigger"]) == ("compile", "ana", "every_n_episodes")
