"""``memsync sync``, ``runs`` and ``connectors`` as a user runs them.

Most tests run the command in a subprocess. The rate-limit test runs the same typer
app in-process, because respx can only answer the HTTP calls of this process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from typer.testing import CliRunner

from memsync.runtime.app.cli import app
from memsync.runtime.storage import Store
from memsync.runtime.sync import SyncRepository
from tests.e2e.test_cli import memsync
from tests.helpers import log_lines

pytestmark = pytest.mark.slow


def write_config(directory: Path, store_url: str, connectors: str) -> Path:
    config = directory / "memsync.yaml"
    config.write_text(f"store: {store_url}\nconnectors:\n{connectors}")
    return config


def workspace_config(tmp_path: Path, store_url: str) -> Path:
    root = tmp_path / "workspace"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "adr-001.md").write_text("We use PostgreSQL in production.\n")
    (root / "notes.txt").write_text("Retry webhooks with backoff.\n")
    return write_config(
        tmp_path,
        store_url,
        f"  - name: ws\n    type: workspace\n    subject: 'workspace:{{workspace_id}}'\n"
        f"    root: {root}\n",
    )


def test_sync_prints_the_run_record_and_a_second_sync_creates_nothing(
    tmp_path: Path, store_url: str
) -> None:
    config = workspace_config(tmp_path, store_url)

    first = memsync("--config", str(config), "sync", "ws", "--json", cwd=tmp_path)
    second = memsync("--config", str(config), "sync", "ws", "--json", cwd=tmp_path)

    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    one, two = json.loads(first.stdout), json.loads(second.stdout)
    assert (one["status"], one["fetched"], one["created"]) == ("succeeded", 3, 3)
    assert (two["created"], two["duplicates"]) == (0, 3)
    # Off a terminal the log is JSON lines, each carrying the run's context.
    finished = [line for line in log_lines(first.stderr) if line["event"] == "sync run finished"]
    assert [
        (line["connector"], line["run_id"], line["counts"]["created"]) for line in finished
    ] == [("ws", one["id"], 3)]

    listed = memsync("--config", str(config), "runs", "list", "--json", cwd=tmp_path)
    shown = memsync("--config", str(config), "runs", "show", one["id"], cwd=tmp_path)
    assert [run["id"] for run in json.loads(listed.stdout)] == [two["id"], one["id"]]
    assert "succeeded; fetched 3, created 3, duplicates 0" in shown.stdout


def test_a_sync_at_a_terminal_shows_what_it_read_and_stored_as_batches_commit(
    tmp_path: Path, store_url: str
) -> None:
    config = workspace_config(tmp_path, store_url)
    # rich takes stderr for a terminal when told so; COLUMNS keeps the line whole.
    terminal = {"TTY_COMPATIBLE": "1", "COLUMNS": "200"}

    shown = memsync("--config", str(config), "sync", "ws", cwd=tmp_path, env=terminal)
    as_json = memsync("--config", str(config), "sync", "ws", "--json", cwd=tmp_path, env=terminal)
    piped = memsync("--config", str(config), "sync", "ws", cwd=tmp_path)

    assert [shown.returncode, as_json.returncode, piped.returncode] == [0, 0, 0]
    assert "sync ws: 3 read, 3 stored (3 new, 0 duplicates, 0 revised)" in shown.stderr
    assert "stored (" not in as_json.stderr
    assert "stored (" not in piped.stderr
    assert "duplicates 3" in piped.stdout  # the run record, as ever


def test_backfill_reads_the_range_in_slices_and_exits_0(tmp_path: Path, store_url: str) -> None:
    config = workspace_config(tmp_path, store_url)
    result = memsync(
        "--config", str(config), "backfill", "ws", "--since", "2026-01-01",
        "--until", "2026-01-04", "--slice", "1d", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert (record["kind"], record["status"]) == ("backfill", "succeeded")
    assert record["fetched"] == 9  # the workspace connector scans everything per slice
    slices = [line for line in log_lines(result.stderr) if line["event"] == "backfill slice done"]
    assert [(line["slices_done"], line["slices_total"]) for line in slices] == [
        (1, 3), (2, 3), (3, 3)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "  - name: gh\n    type: trello\n    subject: x\n",
            "connector 'gh' in {config}: type: unknown connector type 'trello'",
        ),
        (
            "  - name: zd\n    type: zendesk\n    subject: x\n    subdomain: acme\n"
            "    email: a@b.c\n",
            "connector 'zd' in {config}: token: field required",
        ),
        (
            "  - name: gh\n    type: workspace\n    subject: x\n    root: /tmp\n"
            "    overlap: soon\n",
            "connector 'gh' in {config}: overlap 'soon' is not a duration (e.g. 2h, 30m, 7d)",
        ),
    ],
    ids=["unknown-type", "missing-field", "bad-duration"],
)
def test_invalid_connector_config_exits_2_naming_the_file_and_the_field(
    tmp_path: Path, store_url: str, entry: str, expected: str
) -> None:
    config = write_config(tmp_path, store_url, entry)
    result = memsync("--config", str(config), "sync", "gh", cwd=tmp_path)
    assert result.returncode == 2
    assert expected.format(config=config) in result.stderr


def test_an_unknown_connector_name_exits_2_listing_the_configured_ones(
    tmp_path: Path, store_url: str
) -> None:
    config = workspace_config(tmp_path, store_url)
    result = memsync("--config", str(config), "sync", "nope", cwd=tmp_path)
    assert result.returncode == 2
    assert f"no connector named 'nope' in {config} (connectors configured: ws)" in result.stderr


def test_connectors_list_shows_each_type_with_its_key_policy_and_rationale(
    tmp_path: Path,
) -> None:
    result = memsync("connectors", "list", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    listed = {entry["type"]: entry for entry in json.loads(result.stdout)}
    assert {"fake", "workspace", "zendesk"} <= set(listed)
    assert listed["zendesk"]["key_policy"] == "identity"
    assert listed["workspace"]["example_key"].startswith("workspace:")
    assert listed["zendesk"]["key_rationale"]


# -- rate limited mid-run, in-process --------------------------------------------------

BASE = "https://acme.zendesk.com"
EXPORT = "/api/v2/incremental/tickets/cursor.json"


def ticket(ticket_id: int) -> dict[str, Any]:
    return {
        "id": ticket_id,
        "updated_at": f"2026-01-0{ticket_id}T10:00:00Z",
        "organization_id": 7,
        "subject": f"ticket {ticket_id}",
        "status": "open",
    }


@pytest.fixture
def zendesk() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE, assert_all_called=False) as mock:
        mock.get(url__regex=r"/api/v2/tickets/\d+/comments\.json").respond(json={"comments": []})
        mock.get(url__regex=r"/api/v2/tickets/\d+/audits\.json").respond(json={"audits": []})
        yield mock


def test_a_rate_limit_mid_run_exits_3_and_the_next_run_completes_without_duplicates(
    tmp_path: Path,
    store_url: str,
    store: Store,
    zendesk: respx.MockRouter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ZD_TEST_TOKEN", "t0ken")
    config = write_config(
        tmp_path,
        store_url,
        "  - name: zd\n    type: zendesk\n    subject: 'org:{organization_id}'\n"
        "    subdomain: acme\n    email: agent@acme.test\n    token: ${ZD_TEST_TOKEN}\n"
        f"    base_url: {BASE}\n    retry: {{max_attempts: 1}}\n",
    )
    first_page = {"tickets": [ticket(1), ticket(2)], "end_of_stream": False, "after_cursor": "c2"}
    last_page = {"tickets": [ticket(3)], "end_of_stream": True, "after_cursor": "c3"}
    export = zendesk.get(EXPORT)
    export.side_effect = [
        httpx.Response(200, json=first_page),
        httpx.Response(429, headers={"Retry-After": "3600"}, json={"error": "slow down"}),
        httpx.Response(200, json=first_page),
        httpx.Response(200, json=last_page),
    ]
    cli = CliRunner()

    partial = cli.invoke(app, ["--config", str(config), "sync", "zd", "--json"])
    checkpoint_after_partial = SyncRepository(store).cursor("default", "zd", "tickets")
    complete = cli.invoke(app, ["--config", str(config), "sync", "zd", "--json"])

    assert partial.exit_code == 3, partial.output
    first = json.loads(partial.stdout)
    assert first["status"] == "partial"
    assert "rate limit exhausted" in first["error"]
    assert "HTTP 429" in first["error"]
    assert first["created"] == 2
    # The export is ordered: the checkpoint stands at the last committed ticket, and
    # the next run reads from there (the overlap re-reads the tickets before it).
    assert checkpoint_after_partial is not None
    assert checkpoint_after_partial.position == datetime(2026, 1, 2, 10, tzinfo=UTC)
    assert complete.exit_code == 0, complete.output
    second = json.loads(complete.stdout)
    assert (second["created"], second["duplicates"]) == (1, 2)
    with store.read() as connection:
        keys = connection.exec_driver_sql("SELECT idempotency_key FROM episodes").scalars().all()
    assert sorted(keys) == [f"zendesk:acme:ticket:{i}" for i in (1, 2, 3)]


def test_jobs_wait_exits_3_for_a_job_that_completed_partially(
    tmp_path: Path, store: Store, store_url: str
) -> None:
    from datetime import timedelta

    from memsync.clock import SystemClock
    from memsync.runtime.jobs import JobOutcome, JobQueue

    config = write_config(tmp_path, store_url, "  []\n")
    queue, now = JobQueue(store), SystemClock().now()
    job, _ = queue.enqueue("default", "sync", "ws", now=now)
    claimed = queue.claim("test", now=now, lease=timedelta(minutes=1))
    assert claimed is not None
    queue.complete(claimed, "test", {"run_status": "partial"}, now=now, outcome=JobOutcome.PARTIAL)

    waited = CliRunner().invoke(app, ["--config", str(config), "jobs", "wait", str(job.id)])
    listed = CliRunner().invoke(
        app, ["--config", str(config), "jobs", "list", "--outcome", "partial", "--json"]
    )

    assert waited.exit_code == 3, waited.output
    assert json.loads(waited.stdout)["outcome"] == "partial"
    assert [listed_job["id"] for listed_job in json.loads(listed.stdout)] == [str(job.id)]


def test_show_commands_take_a_unique_id_prefix(
    tmp_path: Path, store: Store, store_url: str
) -> None:
    from memsync.clock import SystemClock
    from memsync.runtime.jobs import JobQueue

    config = workspace_config(tmp_path, store_url)
    synced = memsync("--config", str(config), "sync", "ws", "--json", cwd=tmp_path)
    run_id = json.loads(synced.stdout)["id"]
    queue = JobQueue(store)
    jobs = [
        queue.enqueue("default", "compile", f"s{i}", now=SystemClock().now())[0] for i in range(40)
    ]
    by_first = {}
    for job in jobs:
        by_first.setdefault(str(job.id)[0], []).append(job)
    # 40 ids over 16 hex digits: some first digit is shared (pigeonhole).
    shared = next(first for first, same in by_first.items() if len(same) > 1)
    unique_job = jobs[0]
    unique_prefix = str(unique_job.id)[:8]

    def cli(*args: str) -> Any:
        return CliRunner().invoke(app, ["--config", str(config), *args])

    shown_run = cli("runs", "show", run_id[:8], "--json")
    shown_job = cli("jobs", "show", unique_prefix)
    ambiguous = cli("jobs", "show", shared)
    missing = cli("jobs", "show", "ffffffffffff")
    not_hex = cli("jobs", "show", "xyz")

    assert shown_run.exit_code == 0, shown_run.output
    assert json.loads(shown_run.stdout)["id"] == run_id
    assert shown_job.exit_code == 0, shown_job.output
    assert json.loads(shown_job.stdout)["id"] == str(unique_job.id)
    assert ambiguous.exit_code == 2
    assert "starts more than one job id" in ambiguous.output
    assert missing.exit_code == 1
    assert "no job id starts with 'ffffffffffff'" in missing.output
    assert not_hex.exit_code == 2
    assert "is not the start of an id" in not_hex.output


def test_version_prints_the_package_version() -> None:
    import memsync as package

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"memsync {package.__version__}"
