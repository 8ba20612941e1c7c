"""GitHub's pull request review comments and issue timelines (streams ``review_comments``
and ``timeline``) synced against FakeGitHub into a real store (SQLite or PostgreSQL):
first sync, an unchanged re-sync, edits, deletions, a rate limit mid-sync, pages that
shift while they are read, and a full re-read."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors.fake_http import RecordedRequest
from memsync.connectors.github import GitHubConfig, GitHubConnector
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import ContextReader, EpisodeRepository, MemoryRepository
from memsync.runtime.storage import Store, tables
from memsync.runtime.sync import RunRecord, RunStatus, SyncRepository, SyncRunner
from memsync.stopping import FakeSleeper
from tests.integration.test_sync_streams import (
    assert_stored_once_with_progress,
    sync_until_complete,
)

T0 = datetime(2024, 3, 1, tzinfo=UTC)
LATER = datetime(2024, 6, 1, tzinfo=UTC)
PREFIX = "github:acme:api"
SUBJECT = "repo:acme/api"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0) as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(LATER)


def connector(fake: FakeGitHub, clock: FakeClock, *, per_page: int = 100) -> GitHubConnector:
    config = GitHubConfig(
        name="gh",
        repo="acme/api",
        token="t",
        base_url=fake.base_url,
        subject="repo:{repository}",
        streams={"review_comments", "timeline"},
        per_page=per_page,
        overlap="2m",
        start=T0,
        retry={"max_attempts": 1},  # a rate limit ends the run at once
    )
    return GitHubConnector(config, sleeper=FakeSleeper(clock, max_waits=0), clock=clock)


def sync(
    store: Store,
    fake: FakeGitHub,
    clock: FakeClock,
    *,
    per_page: int = 100,
    full_refresh: bool = False,
) -> RunRecord:
    """One run, an hour after the previous one."""
    clock.advance(timedelta(hours=1))
    runner = SyncRunner(
        SyncRepository(store),
        IngestService(store, clock),
        clock=clock,
        heartbeat_every=None,
        batch_size=2,  # commits between pages, so a run cut short keeps what it read
    )
    conn = connector(fake, clock, per_page=per_page)
    try:
        return runner.sync(conn, full_refresh=full_refresh)
    finally:
        conn.close()


def counts(run: RunRecord) -> tuple[int, int, int, int]:
    return run.created, run.duplicates, run.revised, run.tombstoned


def live_keys(store: Store) -> set[str]:
    with store.read() as connection:
        query = sa.select(tables.episodes.c.idempotency_key).where(
            tables.episodes.c.deleted_at.is_(None)
        )
        return set(connection.execute(query).scalars())


def payloads(store: Store) -> dict[str, dict[str, object]]:
    """Each stored episode's current payload, by key."""
    with store.read() as connection:
        query = sa.select(tables.episodes.c.idempotency_key, tables.episodes.c.payload)
        return {key: payload for key, payload in connection.execute(query).all()}


def episode_count(store: Store) -> int:
    with store.read() as connection:
        return connection.execute(sa.select(sa.func.count()).select_from(tables.episodes)).one()[0]


def script_repository(fake: FakeGitHub) -> set[str]:
    """An issue, a pull request fixing it (review comments, a reply, two commits, a
    cross-reference and a connected event) and a reference from another repository;
    the keys they make."""
    fake.add_issue("acme", "web", 9, "Login page times out")
    fake.add_issue("acme", "api", 1, "Webhooks ignore Retry-After", "steps")
    fake.add_issue("acme", "api", 2, "Honour Retry-After", "fix", is_pull_request=True)
    first = fake.add_review_comment("acme", "api", 2, "The retry budget is five attempts.")
    reply = fake.add_review_comment("acme", "api", 2, "Agreed.", in_reply_to=first.id)
    commits = [fake.add_commit("acme", "api", 2, f"Retry step {n}") for n in (1, 2)]
    fake.add_cross_reference("acme", "api", 1, "acme", "api", 2)
    fake.add_cross_reference("acme", "api", 1, "acme", "web", 9)
    connected = fake.add_event("acme", "api", 1, "connected")
    fake.edit_issue("acme", "api", 1, body="steps, again")  # the connection bumps it
    return {
        f"{PREFIX}:pull:2:review_comment:{first.id}",
        f"{PREFIX}:pull:2:review_comment:{reply.id}",
        *(f"{PREFIX}:issue:2:commit:{commit.sha}" for commit in commits),
        f"{PREFIX}:issue:1:cross_reference:acme:api:2",
        f"{PREFIX}:issue:1:cross_reference:acme:web:9",
        f"{PREFIX}:issue:1:event:{connected.id}",
    }


# -- first sync, re-sync, edits, full re-read -------------------------------------------------


def test_first_sync_stores_each_item_once_and_an_unchanged_resync_stores_nothing(
    store: Store, fake: FakeGitHub, clock: FakeClock
) -> None:
    expected = script_repository(fake)

    first = sync(store, fake, clock)
    again = sync(store, fake, clock)

    assert first.status is RunStatus.SUCCEEDED
    assert counts(first) == (len(expected), 0, 0, 0)
    assert live_keys(store) == expected
    assert again.status is RunStatus.SUCCEEDED
    assert (again.created, again.revised, again.tombstoned) == (0, 0, 0)


def test_an_edited_review_comment_is_a_revision_and_nothing_else_changes(
    store: Store, fake: FakeGitHub, clock: FakeClock
) -> None:
    script_repository(fake)
    sync(store, fake, clock)
    comment_key = f"{PREFIX}:pull:2:review_comment:1"

    now = clock.now()
    fake.edit_review_comment("acme", "api", 1, "The retry budget is six attempts.", updated_at=now)
    fake.add_cross_reference("acme", "api", 1, "acme", "web", 9, created_at=now)  # mentioned again
    edited = sync(store, fake, clock)

    assert (edited.created, edited.revised, edited.tombstoned) == (0, 1, 0)
    assert payloads(store)[comment_key]["body"] == "The retry budget is six attempts."


def test_a_full_refresh_and_a_backfill_create_nothing(
    store: Store, fake: FakeGitHub, clock: FakeClock
) -> None:
    expected = script_repository(fake)
    sync(store, fake, clock)

    full = sync(store, fake, clock, full_refresh=True)
    conn = connector(fake, clock, per_page=2)
    runner = SyncRunner(SyncRepository(store), IngestService(store, clock), clock=clock)
    # Slices of three minutes over the twenty in which the repository was scripted.
    backfill = runner.backfill(
        conn, since=T0, until=T0 + timedelta(minutes=20), slice_length=timedelta(minutes=3)
    )
    conn.close()

    assert full.status is RunStatus.SUCCEEDED
    assert counts(full) == (0, len(expected), 0, 0)
    assert backfill.status is RunStatus.SUCCEEDED
    assert (backfill.created, backfill.revised, backfill.tombstoned) == (0, 0, 0)
    assert episode_count(store) == len(expected)


# -- deletions --------------------------------------------------------------------------------


def test_a_deleted_review_comment_is_a_tombstone_and_leaves_the_bundle(
    store: Store, fake: FakeGitHub, clock: FakeClock
) -> None:
    script_repository(fake)
    sync(store, fake, clock)
    compiler = CompileService(store, clock=clock)
    reader = ContextReader(EpisodeRepository(store), MemoryRepository(store))
    compiler.compile("default", SUBJECT)
    fact = "retry budget is five attempts"
    assert fact in reader.bundle("default", SUBJECT, "retries?", 2000).assembled_context

    fake.delete_review_comment("acme", "api", 1)
    unchanged_window = sync(store, fake, clock)  # created before this window: not listed
    full = sync(store, fake, clock, full_refresh=True)
    compiler.compile("default", SUBJECT)

    assert unchanged_window.tombstoned == 0
    assert (full.status, full.created, full.tombstoned) == (RunStatus.SUCCEEDED, 0, 1)
    assert f"{PREFIX}:pull:2:review_comment:1" not in live_keys(store)
    assert fact not in reader.bundle("default", SUBJECT, "retries?", 2000).assembled_context


def test_a_review_comment_deleted_within_the_window_is_tombstoned_by_the_next_run(
    store: Store, fake: FakeGitHub, clock: FakeClock
) -> None:
    script_repository(fake)
    sync(store, fake, clock)
    # Created a minute before the next run: within the overlap the run after it reads.
    next_run = clock.now() + timedelta(hours=1)
    recent = fake.add_review_comment(
        "acme", "api", 2, "typo", created_at=next_run - timedelta(minutes=1)
    )
    sync(store, fake, clock)

    fake.delete_review_comment("acme", "api", recent.id)
    run = sync(store, fake, clock)

    assert (run.created, run.tombstoned) == (0, 1)
    assert f"{PREFIX}:pull:2:review_comment:{recent.id}" not in live_keys(store)


# -- rate limits ------------------------------------------------------------------------------


def limit_after_two_requests_of(fake: FakeGitHub, route: str) -> None:
    """Once two requests to ``route`` were answered, the next one gets a secondary rate
    limit (429 with ``retry-after``), as GitHub sends one mid-sync."""
    answered: list[str] = []

    def count(request: RecordedRequest) -> None:
        if route in request.path:
            answered.append(request.path)
            if len(answered) == 2:
                fake.script_rate_limit("secondary", status=429, retry_after=60, path=route)

    fake.after_request(count)


@pytest.mark.parametrize("route", ["/pulls/comments", "/timeline"])
def test_a_429_mid_sync_ends_the_run_partial_and_the_next_completes_storing_nothing_twice(
    store: Store, fake: FakeGitHub, clock: FakeClock, route: str
) -> None:
    expected = script_repository(fake)
    for n in range(3, 13):  # enough review comments and timelines for several pages
        fake.add_issue("acme", "api", n, f"Item {n}", is_pull_request=True)
        note = fake.add_review_comment("acme", "api", n, f"note {n}")
        commit = fake.add_commit("acme", "api", n, f"step {n}")
        expected |= {f"{PREFIX}:pull:{n}:review_comment:{note.id}"}
        expected |= {f"{PREFIX}:issue:{n}:commit:{commit.sha}"}
    limit_after_two_requests_of(fake, route)

    cut = sync(store, fake, clock, per_page=2)
    completed = sync(store, fake, clock, per_page=2)

    assert cut.status is RunStatus.PARTIAL, cut.error
    assert cut.error is not None
    assert "rate limit" in cut.error
    assert completed.status is RunStatus.SUCCEEDED
    assert cut.created + completed.created == len(expected)
    assert episode_count(store) == len(expected)
    assert live_keys(store) == expected


# -- pages that shift while they are read -----------------------------------------------------


def test_review_comments_edited_between_page_requests_are_neither_missed_nor_stored_twice(
    store: Store, fake: FakeGitHub, clock: FakeClock
) -> None:
    fake.add_issue("acme", "api", 1, "Big change", is_pull_request=True)
    comments = [
        fake.add_review_comment("acme", "api", 1, f"note {n}", created_at=T0 + timedelta(minutes=n))
        for n in range(1, 13)
    ]
    edited: list[int] = []

    def edit_the_oldest_unedited(request: RecordedRequest) -> None:
        # With page numbers, every later comment would move one place earlier.
        if request.path.endswith("/pulls/comments") and len(edited) < 4:
            comment = comments[len(edited)]
            fake.edit_review_comment(
                "acme", "api", comment.id, "edited", updated_at=T0 + timedelta(days=2)
            )
            edited.append(comment.id)

    fake.after_request(edit_the_oldest_unedited)
    run = sync(store, fake, clock, per_page=3)

    assert run.status is RunStatus.SUCCEEDED
    assert live_keys(store) == {f"{PREFIX}:pull:1:review_comment:{c.id}" for c in comments}
    assert run.created == len(comments)
    # Each comment edited while the list was read is stored as edited.
    bodies = {key: payload["body"] for key, payload in payloads(store).items()}
    assert {bodies[f"{PREFIX}:pull:1:review_comment:{i}"] for i in edited} == {"edited"}


def test_a_comment_deleted_while_a_long_timeline_is_read_shifts_no_item_out(
    store: Store, fake: FakeGitHub, clock: FakeClock
) -> None:
    fake.add_issue("acme", "api", 1, "Busy pull request", is_pull_request=True)
    # Pages of 3: two comments and a commit, then commits only.
    chatter = [fake.add_comment("acme", "api", 1, f"comment {n}") for n in range(2)]
    commits = [fake.add_commit("acme", "api", 1, f"step {n}") for n in range(6)]
    deleted: list[int] = []

    def delete_a_comment_after_the_first_timeline_page(request: RecordedRequest) -> None:
        if request.path.endswith("/timeline") and not deleted:
            fake.delete_comment("acme", "api", chatter[0].id)
            deleted.append(chatter[0].id)

    fake.after_request(delete_a_comment_after_the_first_timeline_page)
    run = sync(store, fake, clock, per_page=3)

    assert run.status is RunStatus.SUCCEEDED
    assert live_keys(store) == {f"{PREFIX}:issue:1:commit:{c.sha}" for c in commits}
    assert run.created == len(commits)


def test_review_comments_and_timelines_larger_than_the_budget_are_stored_once_by_successive_runs(
    store: Store, clock: FakeClock
) -> None:
    with FakeGitHub(token="t", start=T0, rate_limit=6, enforce_rate_limit=True) as fake:
        expected: set[str] = set()
        for number in range(1, 21):
            fake.add_issue("acme", "api", number, f"Change {number}", is_pull_request=True)
            note = fake.add_review_comment("acme", "api", number, f"note {number}")
            commit = fake.add_commit("acme", "api", number, f"step {number}")
            expected |= {
                f"{PREFIX}:pull:{number}:review_comment:{note.id}",
                f"{PREFIX}:issue:{number}:commit:{commit.sha}",
            }

        def build() -> GitHubConnector:
            return connector(fake, clock, per_page=5)

        runs = sync_until_complete(store, clock, build, fake.reset_rate_limit)

    assert_stored_once_with_progress(store, runs, expected)
