"""The declared example source (memsync.connectors.http.example) through the real sync
runner and store (SQLite or PostgreSQL), against its loopback fake: a source larger than
its rate budget is stored once by successive partial runs; a re-sync stores nothing; an
edit is a revision; a ticket deleted at the source leaves the store on a full re-read."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors.http.example import DeskConfig, DeskConnector
from memsync.connectors.http.fake_desk import FakeDesk
from memsync.runtime.storage import Store, tables
from memsync.runtime.sync import RunStatus
from tests.integration.test_sync_streams import (
    assert_stored_once_with_progress,
    never_waits,
    runner,
    sync_until_complete,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
TICKETS = range(1, 8)


@pytest.fixture
def fake() -> Iterator[FakeDesk]:
    with FakeDesk(per_page=2, notes_per_page=1, budget=5) as server:
        for n in TICKETS:
            server.add_ticket(n, f"ticket {n}", T0 + timedelta(hours=n), notes=1)
        yield server


def build(fake: FakeDesk, clock: FakeClock) -> DeskConnector:
    config = DeskConfig(
        name="helpdesk",
        type="desk",
        subject="desk",
        account="acme",
        token="desk-token",
        base_url=fake.base_url,
        overlap="30m",
    )
    return DeskConnector(config, sleeper=never_waits(clock), clock=clock)


def live_keys(store: Store) -> set[str]:
    episodes = tables.episodes
    with store.read() as connection:
        query = sa.select(episodes.c.idempotency_key).where(episodes.c.deleted_at.is_(None))
        return set(connection.execute(query).scalars())


def test_the_example_source_syncs_resyncs_revises_and_sees_deletions(
    store: Store, fake: FakeDesk
) -> None:
    clock = FakeClock(NOW)
    expected = {f"desk:acme:ticket:{n}" for n in TICKETS} | {
        f"desk:acme:ticket:{n}:note:{n}" for n in TICKETS
    }

    runs = sync_until_complete(store, clock, lambda: build(fake, clock), fake.refill)

    assert_stored_once_with_progress(store, runs, expected)
    fake.budget = None
    fake.refill()
    sync = runner(store, clock)
    again = sync.sync(build(fake, clock))
    assert (again.status, again.created, again.revised) == (RunStatus.SUCCEEDED, 0, 0)

    fake.edit_ticket(7, "ticket 7, reopened", clock.now() - timedelta(minutes=1))
    fake.delete_ticket(3)
    edited = sync.sync(build(fake, clock))
    assert (edited.created, edited.revised, edited.tombstoned) == (0, 1, 0)

    full = sync.sync(build(fake, clock), full_refresh=True)
    assert (full.status, full.created, full.tombstoned) == (RunStatus.SUCCEEDED, 0, 2)
    assert live_keys(store) == expected - {"desk:acme:ticket:3", "desk:acme:ticket:3:note:3"}
