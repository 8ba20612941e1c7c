"""The Linear connector against FakeLinear and a real store, through the sync runner:
a first sync, a re-sync that stores nothing, an edited comment, an archived issue, a
rate-limit storm (partial, then completed, nothing twice) and a full backfill."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors import Cursor
from memsync.connectors.linear import LinearConfig, LinearConnector
from memsync.connectors.linear.fake_api import FakeComment, FakeLinear
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import ContextReader, EpisodeRepository, MemoryRepository
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import episodes
from memsync.runtime.sync import RunRecord, RunStatus, SyncRepository, SyncRunner
from memsync.stopping import FakeSleeper

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TOKEN = "lin_api_test"
ISSUES = 12
COMMENTS_PER_ISSUE = 2
EVERY_RECORD = ISSUES * (1 + COMMENTS_PER_ISSUE)
DECISION = "We decided to keep the checkout service on Postgres."


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def fake(clock: FakeClock) -> Iterator[FakeLinear]:
    """Twelve ENG issues with two comments each, over January and February, and an OPS
    issue the configuration leaves out."""
    with FakeLinear(token=TOKEN, clock=clock) as server:
        server.add_team("ENG")
        server.add_team("OPS")
        for number in range(ISSUES):
            at = datetime(2026, 1, 2, tzinfo=UTC) + timedelta(days=4 * number)
            issue = server.add_issue("ENG", f"Issue {number}", description="Steps.", at=at)
            for reply in range(COMMENTS_PER_ISSUE):
                body = DECISION if (number, reply) == (0, 0) else f"Comment {reply} on {number}"
                server.add_comment(issue.id, body, at=at + timedelta(hours=reply + 1))
        server.add_issue("OPS", "Pager rota", at=datetime(2026, 1, 3, tzinfo=UTC))
        yield server


def runner(store: Store, clock: FakeClock) -> SyncRunner:
    return SyncRunner(
        SyncRepository(store),
        IngestService(store, clock),
        clock=clock,
        heartbeat_every=None,
        batch_size=5,
    )


def linear(fake: FakeLinear, clock: FakeClock) -> LinearConnector:
    """The connector as the issue's configuration block declares it (on the fake)."""
    config = LinearConfig.model_validate(
        {
            "name": "eng-linear",
            "type": "linear",
            "tenant": "default",
            "token": TOKEN,
            "base_url": fake.base_url,
            "teams": ["ENG"],
            "subject": "team:{team_key}",
            "overlap": "2h",
            "start": "2026-01-01",
            "page_size": 4,
        }
    )
    # A rate limit that resets in an hour is past the default 10 minutes of waiting:
    # the run ends at once, and a wait taken anyway fails the test.
    return LinearConnector(config, sleeper=FakeSleeper(clock, max_waits=0), clock=clock)


def sync(store: Store, fake: FakeLinear, clock: FakeClock) -> RunRecord:
    connector = linear(fake, clock)
    try:
        return runner(store, clock).sync(connector)
    finally:
        connector.close()


def counts(record: RunRecord) -> tuple[int, int, int, int]:
    return record.created, record.duplicates, record.revised, record.tombstoned


def live_keys(store: Store) -> list[str]:
    with store.read() as connection:
        query = sa.select(episodes.c.idempotency_key).where(episodes.c.deleted_at.is_(None))
        return list(connection.execute(query).scalars())


def checkpoints(store: Store) -> dict[str, Cursor | None]:
    repository = SyncRepository(store)
    return {
        name: repository.cursor("default", "eng-linear", name) for name in ("issues", "comments")
    }


def comment_with(fake: FakeLinear, body: str) -> FakeComment:
    [comment] = [c for c in fake.comments.values() if c.body == body]
    return comment


def test_a_first_sync_stores_every_issue_and_comment_and_a_re_sync_stores_nothing(
    store: Store, fake: FakeLinear, clock: FakeClock
) -> None:
    first = sync(store, fake, clock)
    clock.advance(timedelta(minutes=15))
    again = sync(store, fake, clock)

    assert first.status is RunStatus.SUCCEEDED, first.error
    assert counts(first) == (EVERY_RECORD, 0, 0, 0)
    assert again.status is RunStatus.SUCCEEDED
    assert counts(again) == (0, 0, 0, 0)
    assert len(live_keys(store)) == EVERY_RECORD
    assert all(key.startswith(f"linear:{fake.workspace_id}:issue:") for key in live_keys(store))
    assert checkpoints(store) == {
        "issues": Cursor(position=clock.now()),
        "comments": Cursor(position=clock.now()),
    }


def test_an_edited_comment_is_a_revision_of_its_episode(
    store: Store, fake: FakeLinear, clock: FakeClock
) -> None:
    sync(store, fake, clock)
    clock.advance(timedelta(minutes=15))
    edited = comment_with(fake, "Comment 1 on 5")
    fake.edit_comment(edited.id, "Comment 1 on 5, with the stack trace")
    clock.advance(timedelta(minutes=15))
    record = sync(store, fake, clock)

    assert counts(record) == (0, 0, 1, 0)
    with store.read() as connection:
        revision = connection.execute(
            sa.select(episodes.c.revision).where(
                episodes.c.idempotency_key.like(f"%:comment:{edited.id}")
            )
        ).scalar_one()
    assert revision == 2


def test_an_archived_issue_is_tombstoned_with_its_comments_and_leaves_the_bundle(
    store: Store, fake: FakeLinear, clock: FakeClock
) -> None:
    compiler = CompileService(store, clock=clock)
    reader = ContextReader(EpisodeRepository(store), MemoryRepository(store))
    sync(store, fake, clock)
    compiler.compile("default", "team:ENG")
    assert DECISION in reader.bundle("default", "team:ENG", "database?", 4000).assembled_context

    clock.advance(timedelta(minutes=15))
    archived = comment_with(fake, DECISION).issue
    fake.archive_issue(archived.id)
    clock.advance(timedelta(minutes=15))
    record = sync(store, fake, clock)
    compiler.compile("default", "team:ENG")

    # The issue and both its comments: the comments by the issue's tombstone, and again
    # (a repeat changes nothing) as comments of an archived issue.
    assert counts(record) == (0, 0, 0, 1 + COMMENTS_PER_ISSUE)
    assert not [key for key in live_keys(store) if archived.id in key]
    assert DECISION not in reader.bundle("default", "team:ENG", "database?", 4000).assembled_context


def unstored_updates(store: Store, fake: FakeLinear) -> list[datetime]:
    """When each ENG issue not stored yet was last updated."""
    stored = set(live_keys(store))
    prefix = f"linear:{fake.workspace_id}:issue:"
    return [
        issue.updated_at
        for issue in fake.issues.values()
        if issue.team.key == "ENG" and f"{prefix}{issue.id}" not in stored
    ]


@pytest.mark.parametrize("status", [400, 429], ids=["RATELIMITED-400", "HTTP-429"])
def test_a_rate_limit_storm_ends_the_run_partial_and_the_next_run_completes_it_once(
    store: Store, fake: FakeLinear, clock: FakeClock, status: int
) -> None:
    # The archived issues and two pages of issues; then every request is refused.
    fake.limit_budget(3, status=status)
    cut_short = sync(store, fake, clock)
    stored_by_the_first = set(live_keys(store))
    checkpoint = checkpoints(store)["issues"]
    unstored = unstored_updates(store, fake)
    fake.limit_budget(None)
    clock.advance(timedelta(hours=1))
    completed = sync(store, fake, clock)

    assert cut_short.status is RunStatus.PARTIAL
    assert cut_short.error is not None
    assert cut_short.error.startswith("rate limit exhausted")
    assert cut_short.created == 8  # two pages of four issues, committed batch by batch
    # The checkpoint is not past anything the run did not store.
    assert checkpoint is not None
    assert unstored
    assert checkpoint.position <= min(unstored)
    assert completed.status is RunStatus.SUCCEEDED, completed.error
    assert (completed.created, completed.revised) == (EVERY_RECORD - 8, 0)
    assert stored_by_the_first <= set(live_keys(store))
    assert len(live_keys(store)) == EVERY_RECORD


def test_a_workspace_larger_than_one_runs_budget_is_stored_once_by_successive_runs(
    store: Store, fake: FakeLinear, clock: FakeClock
) -> None:
    runs: list[RunRecord] = []
    positions: list[datetime] = []
    while not runs or runs[-1].status is not RunStatus.SUCCEEDED:
        assert len(runs) < 20, [(r.status.value, r.created, r.error) for r in runs]
        fake.limit_budget(9)  # an hour's budget: nine requests
        runs.append(sync(store, fake, clock))
        issues = checkpoints(store)["issues"]
        if issues is not None and runs[-1].status is RunStatus.PARTIAL:
            positions.append(issues.position)
            if unstored_updates(store, fake):
                assert issues.position <= min(unstored_updates(store, fake))
        clock.advance(timedelta(hours=1))

    *partial, _completed = runs
    assert len(partial) >= 2
    assert all(run.status is RunStatus.PARTIAL and run.created > 0 for run in partial)
    assert positions == sorted(positions)
    assert sum(run.created for run in runs) == EVERY_RECORD
    assert all(run.revised == 0 for run in runs)
    assert len(live_keys(store)) == EVERY_RECORD


def test_a_storm_after_a_complete_run_leaves_the_checkpoints_where_they_were(
    store: Store, fake: FakeLinear, clock: FakeClock
) -> None:
    sync(store, fake, clock)
    before = checkpoints(store)
    clock.advance(timedelta(minutes=15))
    for number in range(6):
        fake.add_issue("ENG", f"New {number}", at=clock.now() - timedelta(minutes=number))
    # The archived issues and one page of the new ones, then nothing.
    fake.limit_budget(2)
    clock.advance(timedelta(minutes=15))
    cut_short = sync(store, fake, clock)

    assert cut_short.status is RunStatus.PARTIAL
    assert cut_short.created == 4
    assert checkpoints(store) == before


def test_a_full_backfill_creates_nothing(store: Store, fake: FakeLinear, clock: FakeClock) -> None:
    sync(store, fake, clock)
    clock.advance(timedelta(minutes=15))
    connector = linear(fake, clock)
    try:
        backfill = runner(store, clock).backfill(connector, since=datetime(2026, 1, 1, tzinfo=UTC))
    finally:
        connector.close()

    assert backfill.status is RunStatus.SUCCEEDED, backfill.error
    # Every record read again (some twice: slices overlap), none stored.
    created, duplicates, revised, tombstoned = counts(backfill)
    assert (created, revised, tombstoned) == (0, 0, 0)
    assert duplicates >= EVERY_RECORD
    assert len(live_keys(store)) == EVERY_RECORD
