"""Each built-in connector against its fake source and a real store: records moved,
deleted and re-created at the source, as the run records count them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors import Connector, load_registry
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import EpisodeRow
from memsync.runtime.sync import RunRecord, SyncRepository, SyncRunner

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def runner(store: Store, clock: FakeClock) -> SyncRunner:
    return SyncRunner(
        SyncRepository(store), IngestService(store, clock), clock=clock, heartbeat_every=None
    )


def build(config: dict[str, object]) -> Connector:  # type: ignore[type-arg]
    registry = load_registry()
    [parsed] = registry.parse_configs([config])
    return registry.build(parsed)


def counts(record: RunRecord) -> tuple[int, int, int]:
    return record.created, record.revised, record.tombstoned


def live_keys(store: Store) -> set[str]:
    with store.read() as connection:
        query = sa.select(EpisodeRow.idempotency_key).where(EpisodeRow.deleted_at.is_(None))
        return set(connection.execute(query).scalars())


# -- workspace -------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[tuple[Path, Connector]]:  # type: ignore[type-arg]
    root = tmp_path / "tree"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "refunds.md").write_text("We refund within 30 days.\n")
    (root / "README.md").write_text("# The API\n")
    connector = build(
        {"name": "ws", "type": "workspace", "subject": "ws:{workspace_id}", "root": str(root)}
    )
    yield root, connector
    connector.close()


def test_workspace_a_removed_file_is_tombstoned_and_comes_back_when_restored(
    store: Store,
    runner: SyncRunner,
    clock: FakeClock,
    workspace: tuple[Path, Connector],  # type: ignore[type-arg]
) -> None:
    root, connector = workspace
    first = runner.sync(connector)
    refunds = (root / "docs" / "refunds.md").read_text()

    (root / "docs" / "refunds.md").unlink()
    clock.advance(timedelta(minutes=15))
    removed = runner.sync(connector)
    clock.advance(timedelta(minutes=15))
    unchanged = runner.sync(connector)
    (root / "docs" / "refunds.md").write_text(refunds)
    clock.advance(timedelta(minutes=15))
    restored = runner.sync(connector)

    # Files plus a snapshot; each changed tree is one new snapshot.
    assert counts(first) == (3, 0, 0)
    assert counts(removed) == (1, 0, 1)
    assert counts(unchanged) == (0, 0, 0)
    assert counts(restored) == (0, 1, 0)
    assert any("docs/refunds.md" in key for key in live_keys(store))
