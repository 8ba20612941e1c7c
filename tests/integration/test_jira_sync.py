"""The Jira connector synced by the real runner into the store, against the fake Jira:
first sync, an unchanged re-sync, edits, deletions, a 429 storm, a full backfill."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors.jira import JiraConfig, JiraConnector
from memsync.connectors.jira.fake_api import DEFAULT_START, FakeJira, FakeJiraIssue
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import ContextReader, EpisodeRepository, MemoryRepository
from memsync.runtime.storage import Store, tables
from memsync.runtime.sync import RunRecord, RunStatus, SyncRepository, SyncRunner
from memsync.stopping import FakeSleeper

NOW = datetime(2026, 2, 1, tzinfo=UTC)
SUBJECT = "project:ENG"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def fake() -> Iterator[FakeJira]:
    with FakeJira(time_zone="Europe/Lisbon") as fake:
        yield fake


class Site:
    """A Jira site of a few issues and comments, and a runner that syncs it."""

    def __init__(self, store: Store, clock: FakeClock, fake: FakeJira) -> None:
        self.store, self.clock, self.fake = store, clock, fake
        self.runner = SyncRunner(
            SyncRepository(store),
            IngestService(store, clock),
            clock=clock,
            heartbeat_every=None,
            batch_size=3,
        )
        self.issues: list[FakeJiraIssue] = []
        for n in range(6):
            issue = fake.add_issue("ENG", f"Issue {n}", f"Details of issue {n}")
            fake.add_comment(issue.id, f"First comment on {n}")
            self.issues.append(issue)
        self.records = 12

    def connector(self, **fields: object) -> JiraConnector:
        config = JiraConfig.model_validate(
            {
                "name": "eng-jira",
                "site": "acme",
                "base_url": self.fake.base_url,
                "email": "bot@acme.example",
                "token": "jira-token",
                "projects": ["ENG"],
                "start": "2026-01-01",
                "page_size": 4,
                "retry": {"max_attempts": 2, "max_wait": "1m"},
                **fields,
            }
        )
        sleeper = FakeSleeper(self.clock, max_waits=1)
        return JiraConnector(config, sleeper=sleeper, clock=self.clock)

    def sync(self, *, full_refresh: bool = False, **fields: object) -> RunRecord:
        connector = self.connector(**fields)
        try:
            return self.runner.sync(connector, full_refresh=full_refresh)
        finally:
            connector.close()

    def later(self) -> None:
        self.clock.advance(timedelta(hours=1))

    def episodes(self) -> dict[str, tuple[int, bool]]:
        """key -> (revision, deleted)."""
        episodes = tables.episodes
        with self.store.read() as connection:
            rows = connection.execute(
                sa.select(episodes.c.idempotency_key, episodes.c.revision, episodes.c.deleted_at)
            ).all()
        return {key: (revision, deleted is not None) for key, revision, deleted in rows}

    def checkpoint(self) -> datetime | None:
        state = SyncRepository(self.store).state("default", "eng-jira", NOW, ["issues"])
        (issues,) = state.streams
        return None if issues.cursor is None else issues.cursor.position


@pytest.fixture
def site(store: Store, clock: FakeClock, fake: FakeJira) -> Site:
    return Site(store, clock, fake)


def test_a_first_sync_stores_every_issue_and_comment_and_a_resync_stores_nothing(
    site: Site,
) -> None:
    first = site.sync()
    site.later()
    again = site.sync()

    assert (first.status, first.created, first.fetched) == (RunStatus.SUCCEEDED, 12, 12)
    assert (again.status, again.created, again.revised, again.tombstoned) == (
        RunStatus.SUCCEEDED,
        0,
        0,
        0,
    )
    assert len(site.episodes()) == 12
    assert site.checkpoint() == NOW + timedelta(hours=1)


def test_an_edited_comment_and_an_edited_issue_are_revisions(site: Site) -> None:
    site.sync()
    issue = site.issues[2]
    comment = issue.comments[0]
    site.later()
    edited_at = site.clock.now() - timedelta(minutes=5)
    site.fake.edit_comment(issue.id, comment.id, "First comment, corrected", at=edited_at)
    site.fake.edit_issue(site.issues[4].id, summary="Issue 4, renamed", status="Done", at=edited_at)

    run = site.sync()

    assert (run.created, run.revised, run.tombstoned) == (0, 2, 0)
    episodes = site.episodes()
    assert episodes[f"jira:acme:issue:{issue.id}:comment:{comment.id}"] == (2, False)
    assert episodes[f"jira:acme:issue:{site.issues[4].id}"] == (2, False)
    assert episodes[f"jira:acme:issue:{issue.id}"] == (1, False)


def test_a_deleted_issue_is_seen_by_a_full_read_and_leaves_the_bundle(
    site: Site, store: Store, clock: FakeClock
) -> None:
    doomed = site.issues[1]
    site.fake.edit_issue(doomed.id, summary="Acme uses Postgres 16 for billing")
    site.sync()
    compiler = CompileService(store, clock=clock)
    compiler.compile("default", SUBJECT)
    reader = ContextReader(EpisodeRepository(store), MemoryRepository(store))
    assert "Postgres 16" in reader.bundle("default", SUBJECT, "database?", 2000).assembled_context

    site.fake.delete_issue(doomed.id)
    site.later()
    incremental = site.sync()
    full = site.sync(full_refresh=True)
    compiler.compile("default", SUBJECT)

    assert incremental.tombstoned == 0  # an incremental search cannot see a deletion
    assert (full.status, full.created, full.revised, full.tombstoned) == (
        RunStatus.SUCCEEDED,
        0,
        0,
        2,
    )
    deleted = {key for key, (_, gone) in site.episodes().items() if gone}
    assert deleted == {
        f"jira:acme:issue:{doomed.id}",
        f"jira:acme:issue:{doomed.id}:comment:{doomed.comments[0].id}",
    }
    bundle = reader.bundle("default", SUBJECT, "database?", 2000).assembled_context
    assert "Postgres 16" not in bundle


def test_a_429_storm_ends_the_run_partial_and_the_next_run_completes_with_nothing_twice(
    site: Site,
) -> None:
    # myself, the first search page, then comments of the first issues: the storm
    # breaks in after the first batches are committed.
    site.fake.limit_budget(5)
    cut_short = site.sync()
    stored_then = site.episodes()
    checkpoint_then = site.checkpoint()
    site.fake.limit_budget(None)
    site.later()
    completed = site.sync()

    assert cut_short.status is RunStatus.PARTIAL
    assert cut_short.error is not None
    assert cut_short.error.startswith("rate limit exhausted")
    assert 0 < cut_short.created < 12
    assert checkpoint_then is not None
    # The checkpoint stands at the last committed issue, not past what was stored.
    stored_issue_times = [
        issue.updated for issue in site.issues if f"jira:acme:issue:{issue.id}" in stored_then
    ]
    assert checkpoint_then == max(stored_issue_times)
    unstored = [i for i in site.issues if f"jira:acme:issue:{i.id}" not in stored_then]
    assert all(issue.updated > checkpoint_then for issue in unstored)
    assert completed.status is RunStatus.SUCCEEDED
    assert cut_short.created + completed.created == 12
    assert completed.revised == 0
    assert len(site.episodes()) == 12


def test_a_full_backfill_creates_nothing(site: Site) -> None:
    site.sync()
    site.later()
    connector = site.connector()
    try:
        backfill = site.runner.backfill(
            connector, since=DEFAULT_START - timedelta(days=10), slice_length=timedelta(days=7)
        )
    finally:
        connector.close()

    assert backfill.status is RunStatus.SUCCEEDED
    assert (backfill.created, backfill.revised, backfill.tombstoned) == (0, 0, 0)
    assert backfill.duplicates >= 12


@pytest.mark.parametrize(
    ("overlap", "found"), [("2h", True), ("30s", False)], ids=["overlap covers", "too short"]
)
def test_an_edit_the_search_does_not_show_yet_is_found_by_the_next_runs_overlap(
    store: Store, clock: FakeClock, overlap: str, found: bool
) -> None:
    # Atlassian: "recent updates might not be immediately visible in the search".
    with FakeJira(search_lag=timedelta(minutes=5), clock=clock.now) as fake:
        site = Site(store, clock, fake)
        site.sync()
        site.later()
        issue = site.issues[3]
        fake.edit_issue(issue.id, summary="edited", at=clock.now() - timedelta(minutes=3))

        not_yet = site.sync(overlap=overlap)
        site.later()
        next_run = site.sync(overlap=overlap)

    assert (not_yet.status, not_yet.revised) == (RunStatus.SUCCEEDED, 0)
    assert next_run.revised == (1 if found else 0)
    assert site.episodes()[f"jira:acme:issue:{issue.id}"][0] == (2 if found else 1)
