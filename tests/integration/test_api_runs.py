"""GET /v1/runs and /v1/runs/{id}: run records over HTTP, scoped to the caller's tenant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.sync import SyncRepository, SyncRunner
from tests.helpers import LOOPBACK, build_app

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def sync(store: Store, clock: FakeClock, name: str, tenant: str = "default") -> str:
    config = FakeConfig(name=name, type="fake", subject="thing:{id}", tenant=tenant)  # type: ignore[arg-type]
    connector = FakeConnector(config, [FakeRecord(id="r1", updated_at=T0)])
    record = SyncRunner(
        SyncRepository(store), IngestService(store, clock), clock=clock, heartbeat_every=None
    ).sync(connector)
    clock.advance(timedelta(minutes=1))
    return str(record.id)


def test_runs_are_listed_newest_first_filtered_and_paged(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    first, second, third = (sync(store, clock, name) for name in ("a", "b", "a"))
    client = TestClient(build_app(store), base_url=LOOPBACK)

    listed = client.get("/v1/runs").json()
    only_a = client.get("/v1/runs", params={"connector": "a"}).json()
    page = client.get("/v1/runs", params={"limit": 1, "offset": 1}).json()

    assert [run["id"] for run in listed["runs"]] == [third, second, first]
    assert listed["has_more"] is False
    assert [run["id"] for run in only_a["runs"]] == [third, first]
    assert [run["id"] for run in page["runs"]] == [second]
    assert page["has_more"] is True


def test_one_run_has_its_window_counts_and_status(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    run_id = sync(store, clock, "a")

    body = TestClient(build_app(store), base_url=LOOPBACK).get(f"/v1/runs/{run_id}").json()

    assert body["status"] == "succeeded"
    assert body["kind"] == "incremental"
    assert (body["fetched"], body["created"], body["duplicates"]) == (1, 1, 0)
    assert body["window_start"] is None
    assert body["window_end"].startswith("2026-03-02T00:00:00")


def test_another_tenants_run_is_not_found_and_not_listed(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    run_id = sync(store, clock, "a", tenant="acme")
    client = TestClient(build_app(store), base_url=LOOPBACK)

    assert client.get(f"/v1/runs/{run_id}").status_code == 404
    assert client.get("/v1/runs").json()["runs"] == []
    acme = client.get(f"/v1/runs/{run_id}", headers={"X-Tenant-ID": "acme"})
    assert acme.status_code == 200
    assert acme.json()["id"] == run_id
