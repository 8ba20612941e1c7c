"""Forgetting a connector's data, on both databases: its episodes, what they did to
memories, its sync state; nothing of another connector or tenant."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from memsync.clock import FakeClock
from memsync.compile.types import MemoryStatus, StoredMemory
from memsync.connectors import RateLimitExhausted, Window
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.cli import app as cli_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store, metadata, tables
from memsync.runtime.sync import RunInProgress, RunKind
from memsync.runtime.sync.plans import RunOwner, RunPlan
from tests.helpers import LOOPBACK

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
NOW = T0 + timedelta(days=30)

# What each connector says, by subject and day: one statement per record.
SAID: dict[str, list[tuple[str, str, int]]] = {
    "chat-a": [
        # Supersedes b's older Lisbon: an explicit move beats a plain statement under
        # keep_existing in whichever order they are compiled.
        ("ana", "I moved to Berlin.", 5),
        ("ana", "I work at Acme.", 1),  # b says it too
        ("ana", "Stripe charges 3.5% + 35¢ per card payment.", 0),  # conflicts with b
        ("bob", "I live in Paris.", 0),  # superseded by b's move to Rome
        ("dan", "I live in Oslo.", 0),  # b says it too, and Oslo keeps out b's Bergen
    ],
    "chat-b": [
        ("ana", "I live in Lisbon.", 0),
        ("ana", "I work at Acme.", 2),
        ("ana", "Stripe charges 2.9% + 30¢ per card payment.", 5),
        ("bob", "I moved to Rome.", 4),
        ("dan", "I live in Oslo.", 1),
        ("dan", "I live in Bergen.", 3),
        ("carl", "I live in Madrid.", 0),
    ],
}


def fake(name: str, tenant: str = "default") -> FakeConnector:
    config = FakeConfig(name=name, subject="{group}", tenant=tenant, overlap="1h")
    records = [
        FakeRecord(
            id=f"{name}-{i}",
            updated_at=T0 + timedelta(days=day, minutes=i),
            body=text,
            fields={"group": subject},
        )
        for i, (subject, text, day) in enumerate(SAID[name])
    ]
    return FakeConnector(config, records)


def settings(store: Store) -> Settings:
    connectors = [
        {"name": name, "type": "fake", "subject": "{group}", "schedule": "manual"} for name in SAID
    ]
    return Settings.model_validate({"store": str(store.engine.url), "connectors": connectors})


@pytest.fixture
def services(store: Store) -> Services:
    services = Services(settings(store), store, FakeClock(NOW))
    runner = services.sync_runner()
    # chat-a's memories exist when chat-b's arrive, so chat-b's contradict them.
    for connector in (fake("chat-a"), fake("chat-b"), fake("chat-a", tenant="globex")):
        runner.sync(connector)
        tenant = connector.config.tenant
        for subject in services.compile_service.subjects_with_uncompiled(tenant):
            services.compile_service.compile(tenant, subject)
    return services


def memories(store: Store, subject: str, tenant: str = "default") -> dict[str, StoredMemory]:
    found = MemoryRepository(store).memories(tenant, subject, statuses=tuple(MemoryStatus))
    return {memory.content: memory for memory in found}


def snapshot(store: Store, *, without: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Every row of every table but ``without``, as sorted text."""
    rows: dict[str, list[str]] = {}
    with store.read() as connection:
        for table in metadata.sorted_tables:
            if table.name not in without:
                found = connection.execute(sa.select(table)).all()
                rows[table.name] = sorted(str(tuple(row)) for row in found)
    return rows


def rows_of(store: Store, tenant: str) -> dict[str, list[str]]:
    """Every row of the tenant, by table."""
    return {
        name: [row for row in rows if f"'{tenant}'" in row]
        for name, rows in snapshot(store, without=("alembic_version",)).items()
    }


def provenance_connectors(store: Store, tenant: str = "default") -> set[str]:
    with store.read() as connection:
        found = connection.execute(
            sa.select(tables.episodes.c.provenance).where(tables.episodes.c.tenant_id == tenant)
        ).scalars()
        return {provenance["connector"] for provenance in found}


def versions(store: Store) -> dict[tuple[str, str], str]:
    with store.read() as connection:
        rows = connection.execute(sa.select(tables.memory_versions)).all()
    return {(row.tenant_id, row.subject_id): row.version for row in rows}


def test_the_setup_has_what_forgetting_must_undo(services: Services, store: Store) -> None:
    ana, bob, dan = (memories(store, s) for s in ("ana", "bob", "dan"))
    assert ana["Lives in Lisbon"].status is MemoryStatus.SUPERSEDED
    assert ana["Lives in Berlin"].status is MemoryStatus.ACTIVE
    assert len(ana["Works at Acme"].source_episode_ids) == 2
    assert len(MemoryRepository(store).conflicts("default", "ana")) == 1
    assert bob["Lives in Paris"].status is MemoryStatus.SUPERSEDED
    assert dan["Lives in Bergen"].status is MemoryStatus.SUPERSEDED
    assert len(dan["Lives in Oslo"].source_episode_ids) == 2


def test_forgetting_removes_the_connectors_episodes_memories_and_state_and_nothing_else(
    services: Services, store: Store
) -> None:
    globex_before = rows_of(store, "globex")
    carl_before = memories(store, "carl")
    versions_before = versions(store)

    result = services.forget_connector("default", "chat-a")

    assert (result.episodes, result.revisions) == (5, 0)
    assert (result.streams, result.runs, result.backfills) == (1, 1, 0)
    assert provenance_connectors(store) == {"chat-b"}
    ana, bob, dan = (memories(store, s) for s in ("ana", "bob", "dan"))
    # Berlin rested on chat-a alone: gone, and the Lisbon it had superseded is back.
    assert "Lives in Berlin" not in ana
    lisbon = ana["Lives in Lisbon"]
    assert (lisbon.status, lisbon.valid_to, lisbon.status_rule) == (MemoryStatus.ACTIVE, None, None)
    # Acme keeps chat-b's episode as its only source.
    assert ana["Works at Acme"].status is MemoryStatus.ACTIVE
    assert len(ana["Works at Acme"].source_episode_ids) == 1
    # The flagged conflict had chat-a's rate on one side: both went.
    assert MemoryRepository(store).conflicts("default", "ana", status=None) == []
    assert "Stripe charges 3.5% + 35¢ per card payment" not in ana
    assert ana["Stripe charges 2.9% + 30¢ per card payment"].status is MemoryStatus.ACTIVE
    # Paris lost to Rome; Paris and the record of that decision went, Rome stays.
    assert "Lives in Paris" not in bob
    assert bob["Lives in Rome"].status is MemoryStatus.ACTIVE
    assert MemoryRepository(store).supersessions("default", "bob") == []
    # Oslo keeps chat-b's episode and still keeps Bergen out; the record of that stays
    # and no longer names chat-a's episode.
    assert dan["Lives in Oslo"].status is MemoryStatus.ACTIVE
    assert dan["Lives in Bergen"].status is MemoryStatus.SUPERSEDED
    [record] = MemoryRepository(store).supersessions("default", "dan")
    assert record.winner_episode_ids == [str(e) for e in dan["Lives in Oslo"].source_episode_ids]
    assert record.winner_episode_count == 2  # what the winner had when it won
    assert result.memories_reactivated == 1
    assert result.conflicts == 1
    # Subjects whose memories changed have a new version; carl's did not change at all.
    moved = {key for key, version in versions(store).items() if versions_before[key] != version}
    assert moved == {("default", "ana"), ("default", "bob"), ("default", "dan")}
    assert result.subjects_changed == 3
    assert memories(store, "carl") == carl_before
    # Another tenant's connector of the same name is untouched.
    assert rows_of(store, "globex") == globex_before
    # chat-b's state is untouched.
    assert services.runs.cursor("default", "chat-b") is not None
    assert services.runs.cursor("default", "chat-a") is None


def test_a_dry_run_counts_what_a_forget_removes_and_changes_nothing(
    services: Services, store: Store
) -> None:
    before = snapshot(store)

    dry = services.forget_connector("default", "chat-a", dry_run=True)
    unchanged = snapshot(store)
    done = services.forget_connector("default", "chat-a")
    again = services.forget_connector("default", "chat-a")

    assert unchanged == before
    assert dry.dry_run
    assert not done.dry_run
    assert {**vars_of(dry), "dry_run": False} == vars_of(done)
    assert done.memories_deleted >= 4  # Berlin, Paris, a rate, and each episode's summary
    assert again.found_anything is False
    assert (again.episodes, again.memories_deleted, again.memories_kept) == (0, 0, 0)


def vars_of(result: Any) -> dict[str, Any]:
    return {name: getattr(result, name) for name in result.__dataclass_fields__}


def test_a_forgotten_connector_syncs_again_from_start_and_its_memories_come_back(
    services: Services, store: Store
) -> None:
    services.forget_connector("default", "chat-a")

    record = services.sync_runner().sync(fake("chat-a"))
    compiled = services.compile_service.compile("default", "bob")

    assert record.window_start is None
    assert record.created == 5
    assert compiled.memories_created > 0
    # Paris is derived again, and loses to the move to Rome again.
    assert memories(store, "bob")["Lives in Paris"].status is MemoryStatus.SUPERSEDED
    assert memories(store, "bob")["Lives in Rome"].status is MemoryStatus.ACTIVE


def start_a_run(services: Services, connector: str) -> None:
    owner = RunOwner(host="elsewhere", pid=1, lease=timedelta(hours=1), pid_alive=lambda _: True)
    services.runs.start_run(
        tenant_id="default",
        connector=connector,
        connector_type="fake",
        kind=RunKind.INCREMENTAL,
        now=NOW,
        owner=owner,
        plan=lambda connection: RunPlan(Window(start=None, end=NOW)),
    )


def test_forgetting_is_refused_while_the_connector_runs(services: Services, store: Store) -> None:
    start_a_run(services, "chat-a")
    before = snapshot(store)

    with pytest.raises(RunInProgress, match="forget it once the run has ended"):
        services.forget_connector("default", "chat-a")
    refused = TestClient(create_app(services), base_url=LOOPBACK).delete(
        "/v1/connectors/chat-a/data"
    )

    assert refused.status_code == 409
    assert snapshot(store) == before


def test_over_http_forgetting_is_scoped_to_the_callers_tenant(
    services: Services, store: Store
) -> None:
    client = TestClient(create_app(services), base_url=LOOPBACK)

    dry = client.delete("/v1/connectors/chat-a/data", params={"dry_run": "true"})
    done = client.delete("/v1/connectors/chat-a/data")
    unknown = client.delete("/v1/connectors/nope/data")

    assert dry.status_code == done.status_code == 200
    assert (dry.json()["dry_run"], dry.json()["episodes"]) == (True, 5)
    assert (done.json()["dry_run"], done.json()["episodes"]) == (False, 5)
    assert unknown.status_code == 404
    assert provenance_connectors(store, "globex") == {"chat-a"}


def test_the_cli_says_what_would_go_without_yes_and_removes_it_with_yes(
    services: Services, store: Store, store_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "memsync.yaml"
    config.write_text(
        f"store: {store_url}\nconnectors:\n"
        "  - {name: chat-a, type: fake, subject: '{group}', schedule: manual}\n"
    )
    cli = CliRunner()

    def memsync(*args: str) -> Any:
        return cli.invoke(cli_app, ["--config", str(config), *args])

    asked = memsync("forget", "--connector", "chat-a")
    counted = memsync("forget", "--connector", "chat-a", "--json")
    unchanged = provenance_connectors(store)
    done = memsync("forget", "--connector", "chat-a", "--yes")
    renamed = memsync("forget", "--connector", "chat-a", "--tenant", "globex", "--yes")
    gone_elsewhere = memsync("forget", "--connector", "old-name", "--tenant", "globex", "--yes")

    assert asked.exit_code == 2
    assert "would remove" in asked.stdout
    assert "add --yes" in asked.output
    assert json.loads(counted.stdout)["episodes"] == 5
    assert unchanged == {"chat-a", "chat-b"}
    assert done.exit_code == 0, done.output
    assert "removed" in done.stdout
    assert provenance_connectors(store) == {"chat-b"}
    assert renamed.exit_code == 2  # chat-a is configured for the default tenant
    assert "belongs to tenant 'default'" in renamed.output
    assert gone_elsewhere.exit_code == 0, gone_elsewhere.output  # not configured: nothing
    assert provenance_connectors(store, "globex") == {"chat-a"}


def test_a_stream_cut_short_leaves_nothing_behind_once_forgotten(
    services: Services, store: Store
) -> None:
    connector = fake("chat-b")
    connector.records.append(
        FakeRecord(
            id="late", updated_at=NOW - timedelta(minutes=1), body="late", fields={"group": "ana"}
        )
    )
    connector.fail_at("late", RateLimitExhausted("HTTP 429", attempts=1, waited=0, retry_after=1))
    services.sync_runner().sync(connector)

    result = services.forget_connector("default", "chat-b")

    assert result.runs == 2
    assert services.runs.list_runs("default", connector="chat-b") == []
    assert services.runs.state("default", "chat-b", NOW).streams == []
