"""Each built-in connector against its fake source and a real store: records moved,
deleted and re-created at the source, as the run records count them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors import Connector, load_registry
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.slack.fake_api import FakeSlack
from memsync.runtime.app.config import load_settings
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import ContextReader, EpisodeRepository, MemoryRepository
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import episodes
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
        query = sa.select(episodes.c.idempotency_key).where(episodes.c.deleted_at.is_(None))
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


# -- zendesk -------------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "memsync.example.yaml"
ZENDESK = "https://acme.zendesk.com"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "zendesk"


class ZendeskSource:
    """One ticket as the export serves it; tests change its organisation and status."""

    def __init__(self, api: respx.MockRouter) -> None:
        self.organization_id = 509974
        self.status = "open"
        self.updated_at = NOW - timedelta(hours=1)
        api.get("/api/v2/incremental/tickets/cursor.json").mock(side_effect=self._export)
        api.get("/api/v2/tickets/35436/comments.json").respond(json=_fixture("ticket_comments"))
        api.get("/api/v2/tickets/35436/audits.json").respond(json=_fixture("ticket_audits"))

    def change(self, at: datetime, **fields: object) -> None:
        for name, value in fields.items():
            setattr(self, name, value)
        self.updated_at = at

    def _export(self, request: httpx.Request) -> httpx.Response:
        page = _fixture("incremental_tickets_cursor")
        ticket = page["tickets"][0]
        ticket.update(
            organization_id=self.organization_id,
            status=self.status,
            updated_at=self.updated_at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        return httpx.Response(200, json=page)


def _fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


@pytest.fixture
def zendesk() -> Iterator[tuple[ZendeskSource, Connector]]:  # type: ignore[type-arg]
    """The Zendesk connector exactly as the example configuration declares it."""
    settings = load_settings(EXAMPLE, environ={"ZENDESK_TOKEN": "example-token"})
    registry = load_registry()
    [config] = [c for c in registry.parse_configs(settings.connectors) if c.type == "zendesk"]
    assert config.subject.text == "org:{organization_id}"
    with respx.mock(base_url=ZENDESK, assert_all_called=False) as api:
        connector = registry.build(config)
        yield ZendeskSource(api), connector
        connector.close()


def test_zendesk_a_ticket_moved_between_organisations_is_one_episode_and_leaves_the_old_one(
    store: Store,
    runner: SyncRunner,
    clock: FakeClock,
    zendesk: tuple[ZendeskSource, Connector],  # type: ignore[type-arg]
) -> None:
    source, connector = zendesk
    compiler = CompileService(store, clock=clock)
    reader = ContextReader(EpisodeRepository(store), MemoryRepository(store))
    first = runner.sync(connector)
    compiler.compile("default", "org:509974")
    fact = "printer is on fire"
    assert fact in reader.bundle("default", "org:509974", "status?", 2000).assembled_context

    clock.advance(timedelta(minutes=15))
    source.change(clock.now() - timedelta(minutes=2), organization_id=200)
    moved = runner.sync(connector)
    for subject in CompileService(store, clock=clock).subjects_with_uncompiled("default"):
        compiler.compile("default", subject)

    # The ticket, its comment and its status change: each moved, none created again.
    assert counts(first) == (3, 0, 0)
    assert counts(moved) == (0, 3, 0)
    with store.read() as connection:
        rows = connection.execute(
            sa.select(episodes.c.subject_id, episodes.c.revision).where(
                episodes.c.idempotency_key == "zendesk:acme:ticket:35436"
            )
        ).all()
    assert [tuple(row) for row in rows] == [("org:200", 2)]
    assert fact not in reader.bundle("default", "org:509974", "status?", 2000).assembled_context
    assert fact in reader.bundle("default", "org:200", "status?", 2000).assembled_context

    clock.advance(timedelta(minutes=15))
    source.change(clock.now() - timedelta(minutes=2), status="deleted")
    deleted = runner.sync(connector)
    compiler.compile("default", "org:200")
    assert counts(deleted) == (0, 0, 3)
    assert fact not in reader.bundle("default", "org:200", "status?", 2000).assembled_context

    clock.advance(timedelta(minutes=15))
    source.change(clock.now() - timedelta(minutes=2), status="open")
    restored = runner.sync(connector)
    compiler.compile("default", "org:200")
    assert counts(restored) == (0, 3, 0)
    assert fact in reader.bundle("default", "org:200", "status?", 2000).assembled_context


# -- slack ---------------------------------------------------------------------------------


def test_slack_a_deleted_message_is_tombstoned_and_an_unchanged_re_read_tombstones_nothing(
    store: Store, runner: SyncRunner, clock: FakeClock
) -> None:
    start = int((NOW - timedelta(hours=2)).timestamp())
    with FakeSlack(token="xoxb-test", start_ts=start) as fake:
        fake.add_channel("C1", "general")
        posted = [fake.post_message("C1", f"note {i}") for i in range(3)]
        connector = build(
            {
                "name": "sl",
                "type": "slack",
                "token": "xoxb-test",
                "channels": ["C1"],
                "subject": "slack:{channel}",
                "base_url": f"{fake.base_url}/api",
            }
        )
        first = runner.sync(connector)
        clock.advance(timedelta(minutes=15))
        unchanged = runner.sync(connector)
        fake.delete_message("C1", posted[1].ts)
        clock.advance(timedelta(minutes=15))
        deleted = runner.sync(connector)
        connector.close()

    assert (counts(first), counts(unchanged), counts(deleted)) == (
        (3, 0, 0),
        (0, 0, 0),
        (0, 0, 1),
    )
    assert f"slack:T12345678:C1:{posted[1].ts}" not in live_keys(store)


# -- github --------------------------------------------------------------------------------


def test_github_a_transferred_issue_and_a_deleted_one_are_tombstoned_with_what_hangs_on_them(
    store: Store, runner: SyncRunner, clock: FakeClock
) -> None:
    with FakeGitHub(token="t", start=NOW - timedelta(minutes=30)) as fake:
        fake.add_issue("acme", "api", 1, "Webhooks ignore Retry-After", "steps")
        fake.add_issue("acme", "api", 2, "Docs are stale", "which ones")
        fake.add_comment("acme", "api", 1, "seen it too")
        fake.add_comment("acme", "api", 2, "the API page")
        connector = build(
            {
                "name": "gh",
                "type": "github",
                "repo": "acme/api",
                "token": "t",
                "base_url": fake.base_url,
                "subject": "repo:{repository}",
            }
        )
        first = runner.sync(connector)
        fake.transfer_issue("acme", "api", 1, "acme", "platform")
        clock.advance(timedelta(minutes=15))
        transferred = runner.sync(connector)
        fake.add_event("acme", "api", 2, "deleted")
        fake.delete_issue("acme", "api", 2)
        clock.advance(timedelta(minutes=15))
        deleted = runner.sync(connector)
        connector.close()

    assert counts(first) == (4, 0, 0)
    assert (counts(transferred), counts(deleted)) == ((0, 0, 2), (0, 0, 2))
    assert live_keys(store) == set()
