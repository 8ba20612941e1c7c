"""``GET /metrics``: what this process did, and what the store says at scrape time."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from memsync.clock import FakeClock
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.episode import EpisodeDraft
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.observability import LogFormat, configure_logging
from memsync.runtime.app.services import Services
from memsync.runtime.compiling import COMPILE_JOB
from memsync.runtime.ingest import IngestService
from memsync.runtime.jobs import JobQueue, JobStatus
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK
from tests.jobs_support import scalar, wait_until

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` with exactly these labels, or None."""
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return float(found.value)
    return None


def _said(subject: str, text: str, moment: datetime) -> EpisodeDraft:
    return EpisodeDraft(
        subject_id=subject,
        source="chat",
        type="message",
        payload={"text": text},
        occurred_at=moment,
    )


def scrape(client: TestClient) -> str:
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0) as server:
        for number in range(1, 4):
            server.add_issue("acme", "api", number, f"Issue {number}", "body")
        yield server


def github_services(store: Store, clock: FakeClock, fake: FakeGitHub) -> Services:
    connector = {
        "name": "gh",
        "type": "github",
        "repo": "acme/api",
        "token": "t",
        "base_url": fake.base_url,
        "subject": "repo:{repository}",
        "start": "2024-01-01",
        "overlap": "7d",
        "retry": {"max_attempts": 3},
    }
    return Services(Settings(connectors=[connector]), store, clock)


def test_a_sync_counts_its_run_records_and_source_requests(
    store: Store, github: FakeGitHub
) -> None:
    clock = FakeClock(datetime(2026, 3, 2, tzinfo=UTC))
    services = github_services(store, clock, github)
    github.script_rate_limit("secondary", path=r"/issues$", times=1, retry_after=0)
    client = TestClient(create_app(services), base_url=LOOPBACK)

    first = services.run_sync(services.connector("gh"))
    second = services.run_sync(services.connector("gh"))
    text = scrape(client)

    assert (first.created, second.duplicates) == (3, 3)
    assert sample(text, "memsync_sync_runs_total", connector="gh", status="succeeded") == 2
    records = {
        outcome: sample(text, "memsync_sync_records_total", connector="gh", outcome=outcome)
        for outcome in ("created", "duplicate", "revised", "tombstoned", "skipped")
    }
    assert records == {
        "created": 3,
        "duplicate": 3,
        "revised": 0,
        "tombstoned": 0,
        "skipped": 0,
    }
    rate_limited = sample(
        text, "memsync_source_requests_total", connector="gh", status="rate_limited"
    )
    ok = sample(text, "memsync_source_requests_total", connector="gh", status="ok")
    assert rate_limited == 1
    assert ok is not None
    assert ok == len(github.requests) - 1  # every request the fake saw, but the limited one
    assert sample(text, "memsync_source_rate_limit_wait_seconds_total", connector="gh") == 0


def test_connector_lag_is_read_from_the_store_at_scrape_time(
    store: Store, github: FakeGitHub
) -> None:
    clock = FakeClock(datetime(2026, 3, 2, tzinfo=UTC))
    syncing = github_services(store, clock, github)
    syncing.run_sync(syncing.connector("gh"))
    # Another replica that ran nothing reports the same lag: it reads the store.
    replica = Services(Settings(), store, clock)
    client = TestClient(create_app(replica), base_url=LOOPBACK)

    before = sample(
        scrape(client), "memsync_connector_lag_seconds", tenant="default", connector="gh"
    )
    clock.advance(timedelta(hours=1))
    after = sample(
        scrape(client), "memsync_connector_lag_seconds", tenant="default", connector="gh"
    )

    assert before == 0  # the run read up to its start, which is now
    assert after == 3600


def test_job_depth_counts_every_tenant_and_reports_known_kinds_at_zero(store: Store) -> None:
    services = Services(Settings(), store, FakeClock(T0))
    for tenant, subject in (("acme", "ana"), ("acme", "bob"), ("globex", "cy")):
        services.queue.enqueue(tenant, COMPILE_JOB, subject, now=T0)
    text = scrape(TestClient(create_app(services), base_url=LOOPBACK))

    assert sample(text, "memsync_jobs", kind="compile", status="pending") == 3
    assert sample(text, "memsync_jobs", kind="compile", status="failed") == 0
    assert sample(text, "memsync_jobs", kind="sync", status="running") == 0
    # Completed jobs are history that only grows: the scrape never counts them.
    assert sample(text, "memsync_jobs", kind="compile", status="completed") is None


def test_workers_time_each_job_attempt_and_count_how_it_ended(store: Store) -> None:
    clock = FakeClock(T0)
    services = Services(Settings(), store, clock)
    services.ingest.ingest("default", [_said("ana", "I live in Lisbon.", T0)])
    services.queue.enqueue("default", COMPILE_JOB, "ana", now=T0)
    services.queue.enqueue("default", "sync", "not-configured", now=T0)
    worker = services.worker()

    assert worker.run_once() is not None
    assert worker.run_once() is not None
    text = scrape(TestClient(create_app(services), base_url=LOOPBACK))

    assert sample(text, "memsync_job_duration_seconds_count", kind="compile") == 1
    assert sample(text, "memsync_job_attempts_total", kind="compile", outcome="completed") == 1
    assert sample(text, "memsync_job_attempts_total", kind="sync", outcome="error") == 1
    assert sample(text, "memsync_compile_episodes_total") == 1
    assert sample(text, "memsync_jobs", kind="sync", status="failed") == 1
    statuses = {job.target: job.status for job in services.queue.list("default")}
    assert statuses == {"ana": JobStatus.COMPLETED, "not-configured": JobStatus.FAILED}


def test_compiles_count_superseded_memories_and_opened_conflicts(store: Store) -> None:
    clock = FakeClock(T0)
    services = Services(Settings(), store, clock)
    client = TestClient(create_app(services), base_url=LOOPBACK)
    said = [
        ("I live in Lisbon.", T0),
        ("I live in Berlin now.", T0 + timedelta(days=30)),
    ]
    for text, moment in said:
        client.post(
            "/v1/episodes",
            json={
                "subject_id": "ana",
                "source": "chat",
                "type": "message",
                "payload": {"text": text},
                "occurred_at": moment.isoformat(),
            },
        )
        assert client.post("/v1/memories/compile", json={"subject_id": "ana"}).status_code == 200

    text = scrape(client)
    assert sample(text, "memsync_compile_episodes_total") == 2
    assert sample(text, "memsync_memories_superseded_total") == 1
    assert sample(text, "memsync_conflicts_opened_total") == 0


def test_http_requests_are_timed_by_route_template_and_logged(store: Store) -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, "info", stream=stream)
    try:
        client = TestClient(
            create_app(Services(Settings(), store, FakeClock(T0))), base_url=LOOPBACK
        )
        for run_id in (
            "5f0c1a52-0000-4000-8000-000000000001",
            "5f0c1a52-0000-4000-8000-000000000002",
        ):
            assert client.get(f"/v1/runs/{run_id}").status_code == 404
        assert client.get("/no/such/path?token=abc").status_code == 404
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    text = scrape(client)

    routed = {"method": "GET", "route": "/v1/runs/{run_id}", "status": "404"}
    assert sample(text, "memsync_http_request_duration_seconds_count", **routed) == 2
    unmatched = {"method": "GET", "route": "unmatched", "status": "404"}
    assert sample(text, "memsync_http_request_duration_seconds_count", **unmatched) == 1
    access = [
        line
        for line in map(json.loads, stream.getvalue().splitlines())
        if line["logger"] == "memsync.access"
    ]
    assert [(line["method"], line["path"], line["status"]) for line in access] == [
        ("GET", "/v1/runs/5f0c1a52-0000-4000-8000-000000000001", 404),
        ("GET", "/v1/runs/5f0c1a52-0000-4000-8000-000000000002", 404),
        ("GET", "/no/such/path", 404),
    ]
    assert all(line["duration_ms"] >= 0 for line in access)
    assert "token=abc" not in stream.getvalue()


@pytest.mark.slow
def test_a_separate_worker_serves_its_metrics_on_its_own_port(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    IngestService(store).ingest("default", [_said("ana", "I live in Lisbon.", T0)])
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    config = tmp_path / "memsync.yaml"
    config.write_text(f"store: {store_url}\njobs:\n  poll_seconds: 0.05\n")
    worker = subprocess.Popen(
        [sys.executable, "-m", "memsync", "--config", str(config), "worker", "--metrics-port", "0"],
        env=environment,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        url = next(line for line in worker.stderr if line.startswith("metrics on ")).split()[-1]
        JobQueue(store).enqueue("default", COMPILE_JOB, "ana", now=T0)
        wait_until(
            lambda: scalar(store, "SELECT count(*) FROM jobs WHERE status = 'completed'") == 1,
            what="the worker to run the compile job",
        )
        text = httpx.get(url, timeout=10).text
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)
    assert worker.returncode == 0, stderr
    assert sample(text, "memsync_job_attempts_total", kind="compile", outcome="completed") == 1
    assert sample(text, "memsync_jobs", kind="compile", status="pending") == 0
