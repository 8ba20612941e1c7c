"""Connector state over HTTP and the CLI: where each connector stands, and steering it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from memsync.clock import FakeClock
from memsync.connectors import Window
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.cli import app as cli_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunKind, RunStatus
from memsync.runtime.sync.plans import RunOwner, RunPlan
from tests.helpers import LOOPBACK

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir()
    (root / "NOTES.md").write_text("We decided to use Postgres for the queue.\n")
    return root


def settings(store: Store, root: Path) -> Settings:
    return Settings.model_validate(
        {
            "store": str(store.engine.url),
            "connectors": [
                {"name": "notes", "type": "workspace", "subject": "ws:notes", "root": str(root)},
                {
                    "name": "theirs",
                    "type": "workspace",
                    "tenant": "globex",
                    "subject": "ws:theirs",
                    "root": str(root),
                    "schedule": "manual",
                },
            ],
        }
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def services(store: Store, tmp_path: Path, clock: FakeClock) -> Services:
    return Services(settings(store, workspace(tmp_path)), store, clock)


def test_connectors_are_listed_with_their_schedule_and_state_per_tenant(
    services: Services, clock: FakeClock
) -> None:
    client = TestClient(create_app(services), base_url=LOOPBACK)
    before = client.get("/v1/connectors").json()["connectors"]
    services.run_sync(services.connector("notes"))
    clock.advance(timedelta(minutes=5))
    [after] = client.get("/v1/connectors").json()["connectors"]

    assert [c["name"] for c in before] == ["notes"]  # 'theirs' belongs to globex
    assert (before[0]["last_run_status"], before[0]["lag_seconds"]) == (None, None)
    assert after["type"] == "workspace"
    assert after["key_policy"] == "content"
    assert after["schedule"] == "every 15m"
    assert after["next_fire"] == "2026-03-01T12:15:00Z"
    assert (after["last_run_status"], after["lag_seconds"]) == ("succeeded", 300.0)
    assert client.get("/v1/connectors/theirs/state").status_code == 404


def checkpoint(state: dict[str, Any], stream: str = "records") -> str | None:
    [found] = [s for s in state["streams"] if s["stream"] == stream]
    return found["cursor"]["position"] if found["cursor"] else None


def test_state_shows_each_stream_and_a_reset_moves_it_back_or_removes_it(
    services: Services, clock: FakeClock
) -> None:
    client = TestClient(create_app(services), base_url=LOOPBACK)
    never = client.get("/v1/connectors/notes/state").json()
    record = services.run_sync(services.connector("notes"))
    clock.advance(timedelta(minutes=5))

    state = client.get("/v1/connectors/notes/state").json()
    moved = client.post("/v1/connectors/notes/state/reset", json={"to": "2026-01-01T00:00:00Z"})
    removed = client.post("/v1/connectors/notes/state/reset", json={})

    # Before its first run, the stream the connector reads is listed, never read.
    assert [(s["stream"], s["cursor"], s["last_status"]) for s in never["streams"]] == [
        ("records", None, None)
    ]
    [stream] = state["streams"]
    assert checkpoint(state) == "2026-03-01T12:00:00Z" == stream["last_success_at"]
    assert (stream["last_status"], stream["last_run_id"]) == ("succeeded", str(record.id))
    assert stream["lag_seconds"] == state["lag_seconds"] == 300.0
    assert state["last_success"]["id"] == str(record.id)
    assert moved.status_code == 200
    assert checkpoint(moved.json()) == "2026-01-01T00:00:00Z"
    # A reset moves the checkpoint only: what the last run did stays on record.
    assert moved.json()["streams"][0]["last_status"] == "succeeded"
    assert checkpoint(removed.json()) is None
    again = services.run_sync(services.connector("notes"))
    assert (again.window_start, again.created, again.duplicates) == (None, 0, 2)


def test_a_reset_of_one_stream_leaves_the_others_and_an_unknown_stream_is_404(
    services: Services,
) -> None:
    client = TestClient(create_app(services), base_url=LOOPBACK)
    services.run_sync(services.connector("notes"))
    services.runs.reset_checkpoints(
        "default", "notes", stream="old-stream", to=NOW, now=NOW
    )  # a stream the configuration no longer reads, with a checkpoint

    one = client.post(
        "/v1/connectors/notes/state/reset",
        json={"stream": "old-stream", "to": "2026-01-01T00:00:00Z"},
    )
    unknown = client.post("/v1/connectors/notes/state/reset", json={"stream": "nope"})

    assert one.status_code == 200
    streams = {s["stream"]: s for s in one.json()["streams"]}
    assert streams["old-stream"]["declared"] is False
    assert checkpoint(one.json(), "old-stream") == "2026-01-01T00:00:00Z"
    assert checkpoint(one.json(), "records") == "2026-03-01T12:00:00Z"
    assert unknown.status_code == 404
    assert "no stream named 'nope'" in unknown.json()["error"]["message"]
    assert "records, old-stream" in unknown.json()["error"]["message"]


def test_a_reset_while_the_connector_runs_is_refused(services: Services) -> None:
    owner = RunOwner(host="elsewhere", pid=1, lease=timedelta(hours=1), pid_alive=lambda _: True)
    services.runs.start_run(
        tenant_id="default",
        connector="notes",
        connector_type="workspace",
        kind=RunKind.INCREMENTAL,
        now=NOW,
        owner=owner,
        plan=lambda connection: RunPlan(Window(start=None, end=NOW)),
    )
    refused = TestClient(create_app(services), base_url=LOOPBACK).post(
        "/v1/connectors/notes/state/reset", json={}
    )
    assert refused.status_code == 409
    assert "is running" in refused.json()["error"]["message"]
    last_run = services.runs.state("default", "notes", NOW).last_run
    assert last_run is not None
    assert last_run.status is RunStatus.RUNNING


def test_a_sync_is_enqueued_over_http_and_joins_one_already_pending(services: Services) -> None:
    client = TestClient(create_app(services), base_url=LOOPBACK)
    first = client.post("/v1/connectors/notes/sync")
    second = client.post("/v1/connectors/notes/sync")
    assert (first.status_code, first.json()["status"]) == (202, "pending")
    assert second.json()["job_id"] == first.json()["job_id"]
    assert client.post("/v1/connectors/nope/sync").status_code == 404


def test_the_cli_shows_resets_and_fully_refreshes_a_connector(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    root = workspace(tmp_path)
    config = tmp_path / "memsync.yaml"
    config.write_text(
        f"store: {store_url}\nconnectors:\n"
        f"  - {{name: notes, type: workspace, subject: 'ws:notes', root: '{root}'}}\n"
    )
    cli = CliRunner()

    def memsync(*args: str) -> Result:
        return cli.invoke(cli_app, ["--config", str(config), *args])

    first = memsync("sync", "notes", "--json")
    shown = memsync("state", "show", "notes", "--json")
    refreshed = memsync("sync", "notes", "--full-refresh", "--json")
    reset = memsync("state", "reset", "notes", "--to", "2026-01-01")
    after_reset = memsync("state", "show", "notes", "--json")
    table = memsync("state", "show", "notes")
    one = memsync("state", "reset", "notes", "--stream", "records")
    unknown = memsync("state", "reset", "notes", "--stream", "nope")

    assert first.exit_code == 0, first.output
    state = json.loads(shown.stdout)
    assert state["last_success"]["id"] == json.loads(first.stdout)["id"]
    refresh = json.loads(refreshed.stdout)
    assert (refresh["window_start"], refresh["created"], refresh["duplicates"]) == (None, 0, 2)
    assert reset.exit_code == 0, reset.output
    assert "every stream of 'notes': 2026-01-01T00:00:00+00:00" in reset.stdout
    assert checkpoint(json.loads(after_reset.stdout)) == "2026-01-01T00:00:00Z"
    assert "records" in table.stdout
    assert "succeeded" in table.stdout
    assert one.exit_code == 0, one.output
    assert "stream 'records' of 'notes': removed" in one.stdout
    assert unknown.exit_code == 2
    assert "no stream named 'nope'" in unknown.output
