"""A record's life in the store: moved between subjects, deleted, re-created, compiled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft, IngestStatus
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService, delete_subject_episodes
from memsync.runtime.reading import EpisodeRepository, MemoryRepository
from memsync.runtime.storage import Store

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def ticket(key: str, text: str, org: str, day: int = 0) -> EpisodeDraft:
    return EpisodeDraft(
        subject_id=org,
        source="zendesk",
        type="zendesk.ticket",
        payload={"subject": text},
        idempotency_key=key,
        occurred_at=START + timedelta(days=day),
    )


def active(store: Store, subject: str) -> set[str]:
    return {memory.content for memory in MemoryRepository(store).memories("t1", subject)}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + timedelta(days=30))


@pytest.fixture
def ingest(store: Store, clock: FakeClock) -> IngestService:
    return IngestService(store, clock)


@pytest.fixture
def compiler(store: Store, clock: FakeClock) -> CompileService:
    return CompileService(store, clock=clock)


def test_a_moved_record_is_compiled_under_its_new_subject(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    ingest.ingest("t1", [ticket("z:1", "Invoice 1234 is charged twice", "org:100")])
    compiler.compile("t1", "org:100")

    [moved] = ingest.ingest("t1", [ticket("z:1", "Invoice 1234 is charged twice", "org:200")])
    result = compiler.compile("t1", "org:200")

    assert moved.status is IngestStatus.REVISED
    assert result.episodes_compiled == 1
    assert any("Invoice 1234" in content for content in active(store, "org:200"))
    assert compiler.compile("t1", "org:100").episodes_compiled == 0


def test_deleting_a_subject_also_forgets_revisions_filed_under_it_by_records_that_moved(
    store: Store, ingest: IngestService
) -> None:
    [filed] = ingest.ingest("t1", [ticket("z:1", "Invoice 1234 is charged twice", "org:100")])
    ingest.ingest("t1", [ticket("z:1", "Invoice 1234 is charged twice", "org:200")])

    with store.write() as connection:
        deleted = delete_subject_episodes(connection, "t1", "org:100")

    assert deleted == 0
    assert EpisodeRepository(store).revisions("t1", filed.episode_id) == []
