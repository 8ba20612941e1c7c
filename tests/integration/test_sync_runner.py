"""The sync runner against a real store (SQLite or PostgreSQL) and the fake connector."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors import (
    Cursor,
    Deletion,
    RateLimitExhausted,
    RetryableError,
    StopRun,
    Window,
)
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.connectors.github import GitHubConfig, GitHubConnector
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.workspace import WorkspaceConfig, WorkspaceConnector
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import episodes, sync_runs
from memsync.runtime.sync import (
    RunInProgress,
    RunInterrupted,
    RunKind,
    RunLost,
    RunRecord,
    RunStatus,
    SyncRepository,
    SyncRunner,
    Tally,
)
from memsync.stopping import FakeSleeper
from tests.helpers import BlockingConnector

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def config(**overrides: object) -> FakeConfig:
    values: dict[str, object] = {"name": "src", "subject": "thing:{id}", "overlap": "1h"}
    values.update(overrides)
    return FakeConfig.model_validate(values)


def records(
    count: int, *, every: timedelta = timedelta(minutes=1), body: str = "v1"
) -> list[FakeRecord]:
    return [FakeRecord(id=f"r{i:04d}", updated_at=T0 + i * every, body=body) for i in range(count)]


def stored_keys(store: Store) -> list[str]:
    with store.read() as connection:
        return list(
            connection.execute(
                sa.select(episodes.c.idempotency_key).order_by(episodes.c.idempotency_key)
            ).scalars()
        )


def runner(store: Store, clock: FakeClock, **options: object) -> SyncRunner:
    ingest = IngestService(store, clock)
    return SyncRunner(SyncRepository(store), ingest, clock=clock, heartbeat_every=None, **options)  # type: ignore[arg-type]


def test_first_run_reads_everything_and_moves_the_cursor_to_the_run_start(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(config(), records(10))

    record = runner(store, clock).sync(connector)

    assert record.status is RunStatus.SUCCEEDED
    assert (record.fetched, record.created, record.duplicates) == (10, 10, 0)
    assert record.window_start is None
    assert record.window_end == clock.now()
    assert record.kind is RunKind.INCREMENTAL
    cursor = runner(store, clock).repository.cursor("default", "src")
    assert cursor == Cursor(position=clock.now())


def test_progress_is_reported_after_each_batch_commits_with_the_counts_so_far(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(config(), records(5))
    seen: list[tuple[int, int, int, int]] = []

    def on_batch(tally: Tally) -> None:
        # Read, stored, new, and what the store holds: the batch has committed.
        seen.append((tally.fetched, tally.committed, tally.created, len(stored_keys(store))))

    runner(store, clock, batch_size=2).sync(connector, on_batch=on_batch)
    runner(store, clock, batch_size=2).sync(connector, full_refresh=True, on_batch=on_batch)

    assert seen == [
        (2, 2, 2, 2),
        (4, 4, 4, 4),
        (5, 5, 5, 5),
        (2, 2, 0, 5),
        (4, 4, 0, 5),
        (5, 5, 0, 5),
    ]


def test_overlapping_windows_store_each_record_once_and_count_the_repeats(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(minutes=30))
    connector = FakeConnector(config(overlap="20m"), records(60))
    sync = runner(store, clock)

    first = sync.sync(connector)  # window A: everything up to T0+30m -> r0000..r0030
    clock.set(T0 + timedelta(minutes=59))
    second = sync.sync(connector)  # window B: [T0+10m, T0+59m] overlaps A by 20 minutes

    assert second.window_start == T0 + timedelta(minutes=10)
    assert (first.created, first.duplicates) == (31, 0)
    assert (second.fetched, second.created, second.duplicates) == (50, 29, 21)
    assert len(stored_keys(store)) == 60 == len(set(stored_keys(store)))


def test_a_record_whose_subject_field_changed_is_revised_and_moved_not_created_again(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    filed = FakeRecord(id="t1", updated_at=T0, body="refund", fields={"group": "org-100"})
    connector = FakeConnector(config(subject="org:{group}"), [filed])
    sync = runner(store, clock)
    first = sync.sync(connector)

    clock.advance(timedelta(hours=1))
    connector.records = [
        FakeRecord(
            id="t1", updated_at=T0 + timedelta(hours=1), body="refund", fields={"group": "org-200"}
        )
    ]
    second = sync.sync(connector)

    assert (first.created, second.created, second.revised) == (1, 0, 1)
    with store.read() as connection:
        filed_under = connection.execute(sa.select(episodes.c.subject_id)).scalars().all()
    assert filed_under == ["org:org-200"]


def test_records_with_equal_cursor_values_at_the_window_edge_are_not_lost(store: Store) -> None:
    edge = T0 + timedelta(hours=1)
    clock = FakeClock(edge)
    connector = FakeConnector(config(overlap="0s"), [FakeRecord(id="a", updated_at=edge)])
    sync = runner(store, clock)
    sync.sync(connector)  # reads "a"; cursor lands exactly on the edge

    # Two more records with the very same time arrive late (the source committed them
    # after our read); with no overlap at all, the inclusive window still reads them.
    connector.records += [FakeRecord(id="b", updated_at=edge), FakeRecord(id="c", updated_at=edge)]
    clock.advance(timedelta(minutes=5))
    second = sync.sync(connector)

    assert second.window_start == edge
    assert (second.created, second.duplicates) == (2, 1)
    assert stored_keys(store) == [f"fake:src:record:{x}" for x in "abc"]


def test_a_rate_limit_mid_run_is_partial_keeps_the_committed_cursor_and_the_next_run_completes(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(config(), records(25))
    connector.fail_at(
        "r0017",
        RateLimitExhausted("HTTP 429 for 40 minutes", attempts=5, waited=600, retry_after=60),
    )
    sync = runner(store, clock, batch_size=5)

    partial = sync.sync(connector)

    assert partial.status is RunStatus.PARTIAL
    assert partial.error is not None
    assert "rate limit exhausted" in partial.error
    assert "HTTP 429" in partial.error
    assert (partial.fetched, partial.created, partial.errors) == (17, 17, 1)
    # The 17 records before the failure were committed; the cursor stands at the last.
    cursor = sync.repository.cursor("default", "src")
    assert cursor is not None
    assert cursor.position == T0 + timedelta(minutes=16)

    clock.advance(timedelta(hours=1))
    completed = sync.sync(connector)

    assert completed.status is RunStatus.SUCCEEDED
    assert completed.window_start == T0 + timedelta(minutes=16) - timedelta(hours=1)
    assert completed.created == 8
    assert stored_keys(store) == sorted(f"fake:src:record:r{i:04d}" for i in range(25))


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (StopRun("HTTP 401: bad token"), "stopped: HTTP 401: bad token"),
        (RetryableError("HTTP 503 five times"), "RetryableError: HTTP 503 five times"),
    ],
    ids=["stop-run", "retryable-with-nothing-committed"],
)
def test_a_run_that_committed_nothing_fails_and_leaves_the_cursor_alone(
    store: Store, error: Exception, expected: str
) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(config(), records(5))
    connector.fail_at("r0000", error)

    record = runner(store, clock).sync(connector)

    assert record.status is RunStatus.FAILED
    assert record.error == expected
    assert runner(store, clock).repository.cursor("default", "src") is None


def test_skipped_records_are_counted_with_their_reason_and_the_run_succeeds(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(config(), records(4))
    connector.skip("r0002", "subject field 'id' is empty")

    record = runner(store, clock).sync(connector)

    assert record.status is RunStatus.SUCCEEDED
    assert (record.fetched, record.created, record.skipped) == (4, 3, 1)
    assert record.skipped_reasons == ["subject field 'id' is empty"]


class UnorderedConnector(FakeConnector):
    """Swaps each pair of records, like a source whose children follow their parents."""

    ordered_by_cursor = False

    def fetch(self, window: Window, cursor: Cursor | None) -> Iterator[FakeRecord | Deletion]:
        held: FakeRecord | Deletion | None = None
        for record in super().fetch(window, cursor):
            if held is None:
                held = record
                continue
            yield record
            yield held
            held = None
        if held is not None:
            yield held


@pytest.mark.parametrize(
    ("body", "reason"),
    [("a\x00b", "NUL character"), ("a\ud800b", "not storable"), ("x" * 10, None)],
    ids=["nul", "lone-surrogate", "plain"],
)
def test_text_the_store_cannot_hold_skips_that_record_and_the_run_goes_on(
    store: Store, body: str, reason: str | None
) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    source = records(5)
    source[2] = FakeRecord(id="r0002", updated_at=source[2].updated_at, body=body)
    sync = runner(store, clock)

    record = sync.sync(FakeConnector(config(), source))
    again = sync.sync(FakeConnector(config(), source))

    assert record.status is again.status is RunStatus.SUCCEEDED
    if reason is None:
        assert record.created == 5
        return
    assert (record.created, record.skipped) == (4, 1)
    assert reason in record.skipped_reasons[0]
    assert stored_keys(store) == [f"fake:src:record:r{i:04d}" for i in (0, 1, 3, 4)]


def test_a_workspace_with_a_late_nul_and_an_undecodable_name_syncs_every_other_file(
    store: Store, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "late-nul.txt").write_bytes(b"x" * 9000 + b"\x00")
    with open(os.fsencode(root) + b"/r\xe9sum\xe9.txt", "wb") as handle:
        handle.write(b"cv")
    (root / "z.txt").write_text("last")
    config = WorkspaceConfig.model_validate(
        {"name": "ws", "subject": "workspace:{workspace_id}", "root": root}
    )
    sync = runner(store, FakeClock(T0))

    record = sync.sync(WorkspaceConnector(config))

    assert record.status is RunStatus.SUCCEEDED
    assert (record.fetched, record.created) == (3, 3)  # two files and the snapshot
    assert any(
        key.endswith(":file:r\\xe9sum\\xe9.txt:" + _sha(b"cv")) for key in stored_keys(store)
    )


def sync_github(store: Store, clock: FakeClock, fake: FakeGitHub, token: str) -> RunRecord:
    """One sync of ``acme/api`` from ``fake`` through the real GitHub connector."""
    config = GitHubConfig(
        name="gh", repo="acme/api", token=token, base_url=fake.base_url, subject="r"
    )
    connector = GitHubConnector(config, sleeper=FakeSleeper(clock), clock=clock)
    try:
        return runner(store, clock).sync(connector)
    finally:
        connector.close()


def test_a_github_redirect_fails_the_run_and_leaves_the_cursor(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    with FakeGitHub(token="t", start=T0) as fake:
        fake.add_issue("acme", "api", 1, "x")
        fake.script_error(302, body=[], headers={"Location": "https://sso.example.com/"})
        record = sync_github(store, clock, fake, "t")

    assert record.status is RunStatus.FAILED
    assert record.error is not None
    assert "HTTP 302 redirect to https://sso.example.com/" in record.error
    assert runner(store, clock).repository.cursor("default", "gh") is None


def test_an_upstream_error_echoing_the_token_is_stored_scrubbed(store: Store) -> None:
    token = "ghp_1234567890abcdef"
    clock = FakeClock(T0 + timedelta(days=1))
    with FakeGitHub(token=token, start=T0) as fake:
        fake.add_issue("acme", "api", 1, "x")
        fake.script_error(400, message=f"bad header: Authorization: token {token}")
        record = sync_github(store, clock, fake, token)

    assert record.status is RunStatus.FAILED
    assert record.error is not None
    assert token not in record.error
    assert "Authorization: token ***" in record.error
    [stored] = runner(store, clock).repository.list_runs("default")
    assert stored.error == record.error


def test_a_stop_during_a_rate_limit_wait_ends_the_run_partial_keeping_what_it_committed(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    with FakeGitHub(token="t", start=T0) as fake:
        for number in range(1, 6):
            fake.add_issue("acme", "api", number, f"Issue {number}")
        reset = int(clock.now().timestamp()) + 60
        fake.script_rate_limit("primary", path=r"/issues$", on_request_number=2, reset_at=reset)
        config = GitHubConfig(
            name="gh", repo="acme/api", token="t", base_url=fake.base_url, subject="r",
            streams=frozenset({"issues"}), per_page=2,
        )  # fmt: skip
        sleeper = FakeSleeper(clock, stop_during_wait=1)
        stopping = GitHubConnector(config, sleeper=sleeper, clock=clock)

        with pytest.raises(RunInterrupted) as interrupted:
            runner(store, clock, batch_size=2).sync(stopping)
        stopping.close()

        record = interrupted.value.record
        assert sleeper.waits == [60]  # the reset was a minute away; no time passed
        assert record.status is RunStatus.PARTIAL
        assert record.error is not None
        assert record.error.startswith("interrupted: github 'gh': GET /repos/acme/api/issues")
        assert record.error.endswith(
            "stopped 0.0s into a 60s wait after attempt 1 (rate limited); the process is stopping"
        )
        assert (record.fetched, record.created, record.errors) == (2, 2, 0)
        [stored] = runner(store, clock).repository.list_runs("default")
        assert (stored.id, stored.status, stored.error) == (record.id, record.status, record.error)
        assert len(stored_keys(store)) == 2  # the first page's batch stays committed

        clock.advance(timedelta(minutes=1))
        resumed = sync_github(store, clock, fake, "t")

    assert resumed.status is RunStatus.SUCCEEDED
    keys = stored_keys(store)
    assert len(keys) == len(set(keys)) == 5


def test_a_stop_seen_after_a_batch_commits_ends_the_run_there_and_the_next_run_reads_on(
    store: Store,
) -> None:
    # A connector that never waits: the runner itself stops at the next safe point.
    clock = FakeClock(T0 + timedelta(days=1))
    sleeper = FakeSleeper(clock)
    stopping = FakeConnector(config(), records(5), sleeper=sleeper)
    sync = runner(store, clock, batch_size=2)

    with pytest.raises(RunInterrupted) as interrupted:
        sync.sync(stopping, on_batch=lambda _tally: sleeper.request_stop())

    record = interrupted.value.record
    assert record.status is RunStatus.PARTIAL
    assert record.error == (
        "interrupted: fake 'src': stopped after a committed batch (2 records stored); the "
        "process is stopping"
    )
    assert (record.fetched, record.created) == (2, 2)
    assert stored_keys(store) == ["fake:src:record:r0000", "fake:src:record:r0001"]
    checkpoint = sync.repository.cursor("default", "src")
    assert checkpoint is not None
    assert checkpoint.position == T0 + timedelta(minutes=1)  # r0001, the last one stored

    clock.advance(timedelta(minutes=1))
    resumed = sync.sync(FakeConnector(config(overlap="0s"), records(5)))

    assert resumed.status is RunStatus.SUCCEEDED
    assert resumed.window_start == T0 + timedelta(minutes=1)  # from the checkpoint
    assert resumed.created == 3
    assert len(stored_keys(store)) == 5


def _sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def test_an_unordered_connector_cut_short_keeps_its_old_cursor(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = UnorderedConnector(config(), records(10))
    connector.fail_at("r0003", RetryableError("timeout"))
    sync = runner(store, clock, batch_size=2)

    record = sync.sync(connector)

    assert record.status is RunStatus.PARTIAL
    # r0001 then r0000 were committed, r0002 was held back when the fetch failed:
    # a checkpoint at r0001 would skip nothing here, but no rule can know that.
    assert record.created == 2
    assert sync.repository.cursor("default", "src") is None
    clock.advance(timedelta(minutes=1))
    assert sync.sync(connector).created == 8  # the fault was scripted for one fetch


def test_the_cursor_never_moves_backwards(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    sync = runner(store, clock)
    sync.sync(FakeConnector(config(), records(3)))
    ahead = sync.repository.cursor("default", "src")

    # A run whose clock is behind (another host) finishes with an earlier run start.
    behind = runner(store, FakeClock(T0 + timedelta(hours=1)))
    behind.sync(FakeConnector(config(), records(3)))

    assert sync.repository.cursor("default", "src") == ahead


def test_runs_of_different_tenants_keep_separate_cursors_and_records(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    sync = runner(store, clock)
    sync.sync(FakeConnector(config(tenant="acme"), records(2)))

    assert sync.repository.cursor("acme", "src") is not None
    assert sync.repository.cursor("default", "src") is None
    assert [r.tenant_id for r in sync.repository.list_runs("acme")] == ["acme"]
    assert sync.repository.list_runs("default") == []


def in_thread(action: Callable[[], object]) -> tuple[threading.Thread, list[BaseException]]:
    """Start ``action`` in a thread; the list collects what it raised."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            action()
        except BaseException as error:
            raised.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, raised


def test_a_second_run_of_the_same_connector_fails_fast_while_the_first_runs(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    first = BlockingConnector(config(), records(10), block_at="r0005")
    results: list[object] = []
    thread = threading.Thread(target=lambda: results.append(runner(store, clock).sync(first)))
    thread.start()
    try:
        assert first.reached.wait(timeout=60)
        with pytest.raises(RunInProgress, match=r"connector 'src' .* is already running"):
            runner(store, clock).sync(FakeConnector(config(), records(10)))
        with pytest.raises(RunInProgress):
            runner(store, clock).backfill(FakeConnector(config(), records(10)), since=T0)
    finally:
        first.release.set()
        thread.join(timeout=60)
    [record] = results
    assert getattr(record, "status", None) is RunStatus.SUCCEEDED
    # The refused runs left no trace; the next one starts normally.
    assert len(runner(store, clock).repository.list_runs("default")) == 1
    assert (
        runner(store, clock).sync(FakeConnector(config(), records(10))).status
        is RunStatus.SUCCEEDED
    )


def test_the_database_refuses_two_running_runs_of_one_connector(store: Store) -> None:
    row = {
        "tenant_id": "default",
        "connector": "src",
        "connector_type": "fake",
        "kind": "incremental",
        "window_end": T0,
        "status": "running",
        "fetched": 0,
        "created": 0,
        "duplicates": 0,
        "revised": 0,
        "skipped": 0,
        "errors": 0,
        "skipped_reasons": [],
        "host": "h",
        "pid": 1,
        "started_at": T0,
        "heartbeat_at": T0,
    }
    import uuid

    table = sync_runs
    with store.write() as connection:
        connection.execute(table.insert().values(id=uuid.uuid4(), **row))
    with pytest.raises(sa.exc.IntegrityError), store.write() as connection:
        connection.execute(table.insert().values(id=uuid.uuid4(), **row))


def test_a_run_whose_process_died_is_reclaimed(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    dead = BlockingConnector(config(), records(10), block_at="r0005")
    crashed = runner(store, clock, batch_size=2, pid=999_999, is_alive=lambda pid: pid != 999_999)
    thread, outcome = in_thread(lambda: crashed.sync(dead))
    assert dead.reached.wait(timeout=60)

    # Same host, pid gone: the new run takes over at once and marks the old one failed.
    survivor = runner(store, clock, is_alive=lambda pid: pid != 999_999)
    record = survivor.sync(FakeConnector(config(), records(10)))
    dead.release.set()
    thread.join(timeout=60)
    assert [type(error) for error in outcome] == [RunLost]

    assert record.status is RunStatus.SUCCEEDED
    runs = {run.id: run for run in survivor.repository.list_runs("default")}
    abandoned = [run for run in runs.values() if run.id != record.id]
    assert [run.status for run in abandoned] == [RunStatus.FAILED]
    assert abandoned[0].error is not None
    assert abandoned[0].error.startswith("abandoned")
    assert stored_keys(store) == sorted(f"fake:src:record:r{i:04d}" for i in range(10))


def test_a_batch_commits_with_its_counts_or_not_at_all(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    blocked = BlockingConnector(config(), records(10), block_at="r0005")
    sync = runner(store, clock, batch_size=2)
    thread, outcome = in_thread(lambda: sync.sync(blocked))
    assert blocked.reached.wait(timeout=60)
    # Another process declares the run abandoned while its next batch is on the way.
    with store.write() as connection:
        connection.execute(sa.update(sync_runs).values(status=RunStatus.FAILED.value))

    blocked.release.set()
    thread.join(timeout=60)

    assert [type(error) for error in outcome] == [RunLost]
    [run] = sync.repository.list_runs("default")
    # r0004 and r0005 were ingested after the run was lost: they rolled back with the
    # counts that could not be recorded, so the record says exactly what is stored.
    assert stored_keys(store) == [f"fake:src:record:r{i:04d}" for i in range(4)]
    assert (run.fetched, run.created) == (4, 4)


def test_a_run_on_another_host_is_reclaimed_only_after_its_lease(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    other = BlockingConnector(config(), records(4), block_at="r0002")
    remote = runner(store, clock, host="elsewhere", lease=timedelta(minutes=10))
    thread, outcome = in_thread(lambda: remote.sync(other))
    assert other.reached.wait(timeout=60)
    local = runner(store, clock, host="here", lease=timedelta(minutes=10))

    with pytest.raises(RunInProgress):
        local.sync(FakeConnector(config(), records(4)))
    clock.advance(timedelta(minutes=11))
    assert local.sync(FakeConnector(config(), records(4))).status is RunStatus.SUCCEEDED

    other.release.set()
    thread.join(timeout=60)
    # The reclaimed run noticed it lost the run and wrote no checkpoint of its own.
    assert [type(error) for error in outcome] == [RunLost]
    statuses = sorted(run.status.value for run in local.repository.list_runs("default"))
    assert statuses == ["failed", "succeeded"]


def test_a_backfill_reads_every_slice_and_leaves_the_incremental_cursor_alone(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(days=10))
    connector = FakeConnector(config(), records(72, every=timedelta(hours=1)))
    sync = runner(store, clock)
    sync.sync(connector)
    cursor = sync.repository.cursor("default", "src")

    record = sync.backfill(connector, since=T0, until=T0 + timedelta(days=3))

    assert record.kind is RunKind.BACKFILL
    assert record.status is RunStatus.SUCCEEDED
    assert len(connector.fetches) == 1 + 3
    assert [w.start for w, _ in connector.fetches[1:]] == [T0 + timedelta(days=d) for d in range(3)]
    # Slices share their boundaries: records on them are read twice, stored once.
    assert (record.created, record.duplicates, record.fetched) == (0, 74, 74)
    assert sync.repository.cursor("default", "src") == cursor


def test_an_interrupted_backfill_resumes_from_its_first_unfinished_slice(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=10))
    connector = FakeConnector(config(), records(96, every=timedelta(hours=1)))
    connector.fail_at("r0050", RetryableError("HTTP 503"))  # in the third slice
    sync = runner(store, clock)

    first = sync.backfill(connector, since=T0, until=T0 + timedelta(days=4))
    clock.advance(timedelta(hours=1))
    second = sync.backfill(connector, since=T0)  # the same command, without --until

    assert first.status is RunStatus.PARTIAL
    assert second.status is RunStatus.SUCCEEDED
    assert second.backfill_id == first.backfill_id
    assert [w.start for w, _ in connector.fetches] == [
        T0,
        T0 + timedelta(days=1),
        T0 + timedelta(days=2),  # failed
        T0 + timedelta(days=2),  # resumed here
        T0 + timedelta(days=3),
    ]
    assert stored_keys(store) == sorted(f"fake:src:record:r{i:04d}" for i in range(96))
    # A finished backfill is not resumed: the same command starts a new one.
    third = sync.backfill(connector, since=T0, until=T0 + timedelta(days=4))
    assert third.backfill_id != first.backfill_id
    assert third.created == 0


def test_run_records_are_listed_newest_first_and_filtered_by_connector(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    sync = runner(store, clock)
    sync.sync(FakeConnector(config(name="one"), records(1)))
    clock.advance(timedelta(minutes=1))
    sync.sync(FakeConnector(config(name="two"), records(1)))

    assert [run.connector for run in sync.repository.list_runs("default")] == ["two", "one"]
    assert [run.connector for run in sync.repository.list_runs("default", connector="one")] == [
        "one"
    ]
    [latest] = sync.repository.list_runs("default", limit=1)
    assert sync.repository.get_run("default", latest.id) == latest
    assert sync.repository.get_run("other-tenant", latest.id) is None


def live_keys(store: Store) -> list[str]:
    with store.read() as connection:
        query = sa.select(episodes.c.idempotency_key).where(episodes.c.deleted_at.is_(None))
        return sorted(connection.execute(query).scalars())


def test_a_reported_deletion_is_a_tombstone_once_and_a_re_creation_revives_it(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    connector = FakeConnector(config(), records(3))
    sync = runner(store, clock)
    sync.sync(connector)

    connector.delete("r0001", at=T0 + timedelta(hours=1, minutes=10))
    clock.advance(timedelta(minutes=30))
    deleted = sync.sync(connector)
    clock.advance(timedelta(minutes=20))
    again = sync.sync(connector)  # the overlap holds the deletion again
    connector.records.append(FakeRecord(id="r0001", updated_at=clock.now(), body="v1"))
    clock.advance(timedelta(minutes=1))
    recreated = sync.sync(connector)

    assert (deleted.tombstoned, again.tombstoned) == (1, 0)
    assert (recreated.created, recreated.revised, recreated.tombstoned) == (0, 1, 0)
    assert live_keys(store) == [f"fake:src:record:r000{i}" for i in range(3)]


def test_a_listed_window_tombstones_what_vanished_from_it_and_nothing_when_unchanged(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(config(list_windows=True), records(5))
    sync = runner(store, clock)
    first = sync.sync(connector)
    unchanged = sync.backfill(connector, since=T0 - timedelta(hours=1))

    connector.records = [r for r in connector.records if r.id != "r0002"]
    clock.advance(timedelta(minutes=1))
    vanished = sync.backfill(connector, since=T0 - timedelta(hours=1))

    assert (first.tombstoned, unchanged.tombstoned, vanished.tombstoned) == (0, 0, 1)
    assert "fake:src:record:r0002" not in live_keys(store)
    assert len(live_keys(store)) == 4


def test_a_listing_only_covers_its_window(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(config(list_windows=True, overlap="0s"), records(5))
    sync = runner(store, clock)
    sync.sync(connector)

    connector.records = [r for r in connector.records if r.id != "r0002"]  # long before
    clock.advance(timedelta(hours=1))
    later = sync.sync(connector)  # window: the last hour, which held none of them

    assert later.tombstoned == 0
    assert len(live_keys(store)) == 5
