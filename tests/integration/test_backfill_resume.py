"""A backfill stopped inside a slice resumes from the slice's last committed page (less
the overlap), not from the slice's start, and ``runs show`` says how far each slice got."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memsync.clock import FakeClock
from memsync.connectors import RetryableError
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.runtime.app.cli import app as cli_app
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunInterrupted, RunStatus, SyncRepository, SyncRunner
from memsync.stopping import FakeSleeper
from tests.helpers import notes_config

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PAGE = 10


def connector(streams: list[str], count: int) -> FakeConnector:
    config = FakeConfig.model_validate(
        {"name": "src", "subject": "thing:{id}", "overlap": "5m", "streams": streams}
    )
    minute = timedelta(minutes=1)
    return FakeConnector(
        config,
        [
            FakeRecord(id=f"{stream}{i:04d}", updated_at=T0 + i * minute, stream=stream)
            for stream in streams
            for i in range(count)
        ],
    )


def runner(store: Store, clock: FakeClock) -> SyncRunner:
    return SyncRunner(
        SyncRepository(store),
        IngestService(store, clock),
        clock=clock,
        heartbeat_every=None,
        batch_size=PAGE,
    )


def test_a_backfill_stopped_mid_slice_rereads_at_most_one_page_plus_the_overlap(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(days=2))
    source = connector(["records"], 100)
    source.fail_at("records0045", RetryableError("HTTP 503"))
    sync = runner(store, clock)

    first = sync.backfill(source, since=T0, until=T0 + timedelta(days=1))
    second = sync.backfill(source, since=T0, until=T0 + timedelta(days=1))

    assert first.status is RunStatus.PARTIAL
    assert first.created == 45  # records0000 .. records0044, the last page short
    assert second.status is RunStatus.SUCCEEDED
    # Resumed at the last committed position (records0044) less the 5-minute overlap.
    assert source.fetches[-1][0].start == T0 + timedelta(minutes=39)
    assert (second.fetched, second.created, second.duplicates) == (61, 55, 6)
    assert second.duplicates <= PAGE + 5


def test_a_resumed_slice_skips_the_streams_it_read_completely(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=2))
    source = connector(["a", "b"], 30)
    source.fail_at("b0020", RetryableError("HTTP 503"))
    sync = runner(store, clock)

    sync.backfill(source, since=T0, until=T0 + timedelta(days=1))
    reads_before = len(source.fetches)
    second = sync.backfill(source, since=T0, until=T0 + timedelta(days=1))

    [(window, _cursor)] = source.fetches[reads_before:]  # stream b only
    assert window.start == T0 + timedelta(minutes=14)  # b0019 less the overlap
    assert (second.created, second.duplicates) == (10, 6)


def test_runs_show_says_how_far_each_slice_got(
    store: Store, store_url: str, tmp_path: Path
) -> None:
    clock = FakeClock(T0 + timedelta(days=3))
    source = connector(["a", "b"], 30)
    source.fail_at("b0020", RetryableError("HTTP 503"))
    stopped = runner(store, clock).backfill(source, since=T0, until=T0 + timedelta(days=3))
    config = notes_config(tmp_path, store_url)

    shown = CliRunner().invoke(cli_app, ["--config", str(config), "runs", "show", str(stopped.id)])
    as_json = CliRunner().invoke(
        cli_app, ["--config", str(config), "runs", "show", str(stopped.id), "--json"]
    )

    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()[-3:]
    assert lines == [
        "  slices: 0 of 3 done",
        "  slice 2026-03-01T00:00:00+00:00 .. 2026-03-02T00:00:00+00:00: read completely: a; "
        "'b' committed up to 2026-03-01T00:19:00+00:00 (resumes there, less the overlap)",
        "  2 not begun",
    ]
    dumped = json.loads(as_json.stdout)
    assert (dumped["slices_total"], dumped["slices_done"]) == (3, 0)
    assert dumped["slices_not_done"][0]["streams_done"] == ["a"]
    assert dumped["slices_not_done"][0]["position"] == "2026-03-01T00:19:00+00:00"


def test_a_stop_between_empty_slices_ends_the_backfill_at_the_next_slice(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=400))
    sleeper = FakeSleeper(clock)
    empty = FakeConnector(connector(["records"], 0).config, [], sleeper=sleeper)
    sync = runner(store, clock)

    def stop_at_the_third(done: int, _total: int) -> None:
        if done == 3:
            sleeper.request_stop()

    with pytest.raises(RunInterrupted) as interrupted:
        sync.backfill(empty, since=T0, on_slice=stop_at_the_third)

    record = interrupted.value.record
    assert record.status is RunStatus.PARTIAL
    assert record.error == (
        "interrupted: fake 'src': stopped before slice 2026-03-04T00:00:00+00:00 "
        "(3 of 400 slices done); the process is stopping"
    )
    assert len(empty.fetches) == 3
