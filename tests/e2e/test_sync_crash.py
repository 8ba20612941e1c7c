"""A sync or backfill killed with SIGKILL half-way, then run again: the store ends
exactly as after one clean run, and no checkpoint ever ran ahead of committed data."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors.fake import FakeConnector
from memsync.episode import content_hash
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import episode_revisions, episodes
from memsync.runtime.sync import RunKind, RunStatus, SyncRepository, SyncRunner
from tests.e2e import sync_driver
from tests.e2e.sync_driver import BATCH, NOW, T0, fake_config, generated
from tests.e2e.test_cli import memsync
from tests.jobs_support import wait_until

pytestmark = pytest.mark.slow

REPOSITORY = Path(__file__).resolve().parents[2]


@contextmanager
def blocked_at_gate(
    tmp_path: Path,
    mode: str,
    store_url: str,
    *,
    count: int,
    every: int,
    gate_at: int,
    real_clock: bool = False,
) -> Iterator[None]:
    """Run the driver until it blocks at record ``gate_at``; SIGKILL it on exit."""
    gate, marker = tmp_path / "gate", tmp_path / "reached"
    os.mkfifo(gate)
    process = subprocess.Popen(
        [
            sys.executable, "-m", sync_driver.__name__, mode, store_url,
            "--count", str(count), "--every-minutes", str(every),
            "--gate-at", f"r{gate_at:05d}", "--gate", str(gate), "--marker", str(marker),
            *(["--real-clock"] if real_clock else []),
        ],
        cwd=REPOSITORY,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:

        def at_gate() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"driver exited early: {process.stderr.read()!r}")  # type: ignore[union-attr]
            return marker.exists()

        wait_until(at_gate, timeout=60, what="the driver to reach the gate")
        yield
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        assert process.stderr is not None
        process.stderr.close()


def kill_at_gate(
    tmp_path: Path, mode: str, store_url: str, *, count: int, every: int, gate_at: int
) -> None:
    with blocked_at_gate(tmp_path, mode, store_url, count=count, every=every, gate_at=gate_at):
        pass


def stored(store: Store) -> dict[str, tuple[str, int]]:
    with store.read() as connection:
        rows = connection.execute(
            sa.select(episodes.c.idempotency_key, episodes.c.content_hash, episodes.c.revision)
        ).all()
    return {row.idempotency_key: (row.content_hash, row.revision) for row in rows}


def clean_run(count: int, every: int) -> dict[str, tuple[str, int]]:
    """What one uninterrupted run stores: every record once, at revision 1."""
    return {
        f"fake:src:record:{r.id}": (content_hash({"id": r.id, "body": r.body}), 1)
        for r in generated(count, timedelta(minutes=every))
    }


def revisions(store: Store) -> int:
    with store.read() as connection:
        return connection.execute(
            sa.select(sa.func.count()).select_from(episode_revisions)
        ).scalar_one()


def test_a_killed_sync_rerun_equals_a_clean_run_and_its_cursor_never_passed_committed_data(
    tmp_path: Path, store_url: str, store: Store
) -> None:
    count, every, gate_at = 1000, 1, 550
    kill_at_gate(tmp_path, "sync", store_url, count=count, every=every, gate_at=gate_at)

    after_kill = stored(store)
    clock = FakeClock(NOW + timedelta(minutes=5))
    runner = SyncRunner(
        SyncRepository(store), IngestService(store, clock), clock=clock, batch_size=BATCH
    )
    cursor = runner.repository.cursor("default", "src")
    # Batches before the gate committed; the batch in flight did not.
    assert len(after_kill) == gate_at // BATCH * BATCH
    assert cursor is not None
    committed_positions = [T0 + timedelta(minutes=i) for i in range(len(after_kill))]
    assert cursor.position == max(committed_positions)
    assert all(
        f"fake:src:record:r{i:05d}" in after_kill
        for i in range(count)
        if T0 + timedelta(minutes=i) < cursor.position
    )

    rerun = runner.sync(FakeConnector(fake_config(), generated(count, timedelta(minutes=every))))

    assert rerun.status is RunStatus.SUCCEEDED
    assert rerun.window_start == cursor.position - timedelta(hours=1)
    assert rerun.created == count - len(after_kill)
    assert stored(store) == clean_run(count, every)
    assert revisions(store) == 0
    [killed] = [run for run in runner.repository.list_runs("default") if run.id != rerun.id]
    assert killed.status is RunStatus.FAILED
    assert killed.created == len(after_kill)  # counted in the transactions that stored them
    assert killed.error is not None
    assert killed.error.startswith("abandoned: process")


def test_a_killed_backfill_resumes_from_its_last_completed_slice(
    tmp_path: Path, store_url: str, store: Store
) -> None:
    count, every, gate_at = 96, 60, 60  # hourly records over 4 daily slices; gate in slice 3
    kill_at_gate(tmp_path, "backfill", store_url, count=count, every=every, gate_at=gate_at)
    clock = FakeClock(NOW + timedelta(minutes=5))
    runner = SyncRunner(
        SyncRepository(store), IngestService(store, clock), clock=clock, batch_size=BATCH
    )
    connector = FakeConnector(fake_config(), generated(count, timedelta(minutes=every)))

    resumed = runner.backfill(
        connector, since=sync_driver.BACKFILL_SINCE, until=sync_driver.BACKFILL_UNTIL
    )

    assert resumed.kind is RunKind.BACKFILL
    assert resumed.status is RunStatus.SUCCEEDED
    # Slices 1 and 2 were done before the kill; only slices 3 and 4 were read again.
    assert [window.start for window, _ in connector.fetches] == [
        T0 + timedelta(days=2),
        T0 + timedelta(days=3),
    ]
    assert stored(store) == clean_run(count, every)
    assert revisions(store) == 0
    assert runner.repository.cursor("default", "src") is None  # backfill never moves it


def test_a_second_sync_of_a_running_connector_fails_fast_with_exit_1(
    tmp_path: Path, store_url: str, store: Store
) -> None:
    config = tmp_path / "memsync.yaml"
    config.write_text(
        f"store: {store_url}\nconnectors:\n  - name: src\n    type: fake\n"
        "    subject: 'thing:{id}'\n"
    )
    # The wall clock, as the CLI uses: a heartbeat stamped with a fake date would look
    # months old to it, and rightly be reclaimed as abandoned.
    with blocked_at_gate(
        tmp_path, "sync", store_url, count=300, every=1, gate_at=150, real_clock=True
    ):
        second = memsync("--config", str(config), "sync", "src", cwd=tmp_path)
        running = SyncRepository(store).list_runs("default")

    assert second.returncode == 1
    assert "connector 'src' (tenant 'default') is already running" in second.stderr
    assert [run.status for run in running] == [RunStatus.RUNNING]  # the refused run left no row
