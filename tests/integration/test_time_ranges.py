"""Times a person or a client gives, at their extremes, through every entry point: the
API and the CLI refuse what the code cannot compute with (422 / exit 2, one line naming
the field and the range), and nothing given can leave a connector unable to sync."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from memsync.clock import FakeClock
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.cli import app as cli_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.handlers import sync_handler
from memsync.runtime.app.services import Services
from memsync.runtime.jobs.queue import JobQueue
from memsync.runtime.jobs.worker import NeedsAttention
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunStatus
from memsync.timerange import SOURCE_FLOOR
from tests.helpers import LOOPBACK, notes_config

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
THE_ISSUES_TIMES = [
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00+14:00",
    "0001-01-01T00:00:00Z",
    "2100-01-01T00:00:00Z",
]


def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    root.mkdir(exist_ok=True)
    (root / "NOTES.md").write_text("We decided to use Postgres for the queue.\n")
    return root


def connector(root: Path, **extra: str) -> dict[str, Any]:
    return {"name": "notes", "type": "workspace", "subject": "ws:notes", "root": str(root), **extra}


@pytest.fixture
def services(store: Store, tmp_path: Path) -> Services:
    configured = Settings.model_validate(
        {"store": str(store.engine.url), "connectors": [connector(workspace(tmp_path))]}
    )
    return Services(configured, store, FakeClock(NOW))


@pytest.fixture
def client(services: Services) -> TestClient:
    return TestClient(create_app(services), base_url=LOOPBACK)


def cli(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli_app, ["--config", str(config), *args])


def one_line_refusal(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    return line


@pytest.mark.parametrize("given_time", THE_ISSUES_TIMES)
def test_a_reset_to_a_time_no_run_can_read_from_is_422_naming_to_and_the_range(
    client: TestClient, services: Services, given_time: str
) -> None:
    services.run_sync(services.connector("notes"))

    refused = client.post("/v1/connectors/notes/state/reset", json={"to": given_time})

    assert refused.status_code == 422, refused.text
    [problem] = refused.json()["error"]["details"]
    assert problem["field"].endswith("to")
    assert "1 to 9999" in problem["reason"] or "1990-01-01" in problem["reason"]
    assert services.run_sync(services.connector("notes")).status is RunStatus.SUCCEEDED


def test_a_reset_to_the_floor_is_kept_as_given(client: TestClient) -> None:
    moved = client.post("/v1/connectors/notes/state/reset", json={"to": "1990-01-01T00:00:00Z"})
    assert moved.status_code == 200
    assert moved.json()["streams"][0]["cursor"]["position"] == "1990-01-01T00:00:00Z"


def test_a_stored_checkpoint_no_window_can_start_from_fails_the_run_once_with_a_record(
    services: Services, store: Store
) -> None:
    # As a state written before such times were refused would hold it.
    ancient = datetime(1, 1, 1, tzinfo=UTC)
    services.runs.reset_checkpoints("default", "notes", stream="records", to=ancient, now=NOW)
    handle = sync_handler({("default", "notes"): services.connector("notes")}, services.run_sync)
    job, _ = JobQueue(store).enqueue("default", "sync", "notes", now=NOW)

    with pytest.raises(NeedsAttention) as attention:
        handle(job)

    [record] = services.runs.list_runs("default", connector="notes", limit=5)
    assert record.status is RunStatus.FAILED
    assert record.needs_attention
    assert record.error is not None
    assert "\n" not in record.error
    assert "checkpoint of stream 'records'" in record.error
    assert "state reset" in str(attention.value)


def test_the_cli_refuses_the_issues_times_in_one_line(tmp_path: Path, store_url: str) -> None:
    config = notes_config(tmp_path, store_url)

    reset = one_line_refusal(cli(config, "state", "reset", "notes", "--to", THE_ISSUES_TIMES[1]))
    ancient = one_line_refusal(cli(config, "state", "reset", "notes", "--to", "0001-01-01"))
    backfill = one_line_refusal(cli(config, "backfill", "notes", "--since", THE_ISSUES_TIMES[1]))
    too_many = one_line_refusal(cli(config, "backfill", "notes", "--since", "0001-01-01"))
    hourly = one_line_refusal(
        cli(config, "backfill", "notes", "--since", "1990-01-01", "--slice", "1h")
    )
    as_of = one_line_refusal(cli(config, "inspect", "ws:notes", "--as-of", THE_ISSUES_TIMES[0]))

    assert reset.startswith("--to 0001-01-01T00:00:00+14:00 lies outside the years 1 to 9999")
    assert ancient.startswith("--to 0001-01-01T00:00:00+00:00 is before 1990-01-01")
    assert backfill.startswith("--since 0001-01-01T00:00:00+14:00 lies outside")
    assert too_many.startswith("--since 0001-01-01T00:00:00+00:00 is before 1990-01-01")
    assert "slices (at most 20,000): give a longer --slice" in hourly
    assert as_of.startswith("--as-of 9999-12-31T23:59:59-14:00 lies outside")


@pytest.mark.parametrize(
    ("start", "says"),
    [
        ("0001-01-01T00:00:00+14:00", "outside the years 1 to 9999"),
        ("1970-01-01", "before 1990"),
        ("2999-01-01", "start 2999-01-01T00:00:00+00:00 is in the future"),
    ],
)
def test_config_validate_refuses_a_start_out_of_range(
    tmp_path: Path, store_url: str, start: str, says: str
) -> None:
    result = cli(notes_config(tmp_path, store_url, start=start), "config", "validate")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert says in result.output


def test_a_start_in_the_future_fails_the_run_with_a_record_not_an_empty_window(
    store: Store, tmp_path: Path
) -> None:
    future = Settings.model_validate(
        {
            "store": str(store.engine.url),
            "connectors": [connector(workspace(tmp_path), start="2100-01-01")],
        }
    )
    later = Services(future, store, FakeClock(NOW))
    record = later.run_sync(later.connector("notes"))
    assert record.status is RunStatus.FAILED
    assert record.error == (
        "stopped: start 2100-01-01T00:00:00+00:00 is in the future (now is "
        "2026-03-01T12:00:00+00:00): change start in the configuration"
    )


# -- the whole range, through every entry point --------------------------------------------

EXTREMES = st.sampled_from(
    [
        datetime(1, 1, 1),
        datetime(9999, 12, 31, 23, 59, 59),
        SOURCE_FLOOR.replace(tzinfo=None),
        SOURCE_FLOOR.replace(tzinfo=None) - timedelta(microseconds=1),
    ]
)
OFFSETS = st.sampled_from(["Z", "+14:00", "-14:00", "+00:00", "-00:30"])


@st.composite
def given_times(draw: st.DrawFn) -> str:
    moment = draw(st.one_of(EXTREMES, st.datetimes()))
    return moment.isoformat() + draw(OFFSETS)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(given_time=given_times())
def test_any_given_time_is_accepted_or_refused_cleanly_everywhere(
    given_time: str, client: TestClient, services: Services, tmp_path: Path, store_url: str
) -> None:
    config = notes_config(tmp_path, store_url)
    reset = client.post("/v1/connectors/notes/state/reset", json={"to": given_time})
    context = client.post(
        "/v1/context",
        json={"subject_id": "ws:notes", "task": "db", "as_of": given_time, "valid_at": given_time},
    )
    search = client.get(
        "/v1/memories/search",
        params={"subject_id": "ws:notes", "query": "db", "valid_at": given_time},
    )
    inspector = client.get(
        "/v1/subjects/ws:notes/inspect", params={"as_of": given_time, "valid_at": given_time}
    )
    cli_reset = cli(config, "state", "reset", "notes", "--to", given_time)
    cli_inspect = cli(
        config, "inspect", "ws:notes", "--as-of", given_time, "--valid-at", given_time, "--json"
    )
    cli_backfill = cli(config, "backfill", "notes", "--since", given_time, "--slice", "366d")
    elsewhere = tmp_path / "with-start"
    elsewhere.mkdir(exist_ok=True)
    validated = cli(notes_config(elsewhere, store_url, start=given_time), "config", "validate")

    assert reset.status_code in (200, 422), reset.text
    assert context.status_code in (200, 422), context.text
    assert search.status_code in (200, 422), search.text
    assert inspector.status_code in (200, 404, 422), inspector.text
    for result in (cli_reset, cli_inspect, cli_backfill, validated):
        assert result.exit_code in (0, 2), result.output
        assert "Traceback" not in result.output
    # Whatever was given, both connectors can still sync.
    assert services.run_sync(services.connector("notes")).status is RunStatus.SUCCEEDED
    synced = cli(config, "sync", "notes", "--json")
    assert synced.exit_code == 0, synced.output
