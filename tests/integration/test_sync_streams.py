"""Checkpoints per stream, against a real store (SQLite or PostgreSQL): a source larger
than its rate-limit budget is stored completely, each record once, by successive
partial runs, each of which makes progress; streams resume on their own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import respx
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors import Connector, Cursor, RateLimitExhausted, RetryableError
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.connectors.fake_http import RecordedRequest
from memsync.connectors.github import GitHubConfig, GitHubConnector
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.slack import SlackConfig, SlackConnector
from memsync.connectors.slack.fake_api import FakeSlack
from memsync.connectors.tickets import ZendeskConfig, ZendeskConnector
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store, tables
from memsync.runtime.sync import RunRecord, RunStatus, SyncRepository, SyncRunner
from memsync.runtime.sync.policy import StreamStatus
from memsync.runtime.sync.repository import ALL_STREAMS
from memsync.stopping import FakeSleeper

T0 = datetime(2024, 3, 1, tzinfo=UTC)
LATER = datetime(2024, 6, 1, tzinfo=UTC)


def runner(store: Store, clock: FakeClock, batch_size: int = 4) -> SyncRunner:
    return SyncRunner(
        SyncRepository(store),
        IngestService(store, clock),
        clock=clock,
        heartbeat_every=None,
        batch_size=batch_size,
    )


def stored_keys(store: Store) -> list[str]:
    with store.read() as connection:
        return list(connection.execute(sa.select(tables.episodes.c.idempotency_key)).scalars())


def never_waits(clock: FakeClock) -> FakeSleeper:
    """A wait past the retry cap must end the run, not wait."""
    return FakeSleeper(clock, max_waits=0)


def sync_until_complete(
    store: Store,
    clock: FakeClock,
    build: Callable[[], Connector[Any, Any]],
    refill: Callable[[], None],
) -> list[RunRecord]:
    """Sync until a run succeeds; between runs the budget comes back an hour later."""
    sync = runner(store, clock)
    runs: list[RunRecord] = []
    while not runs or runs[-1].status is not RunStatus.SUCCEEDED:
        assert len(runs) < 30, "\n".join(f"{r.status.value} {r.created} {r.error}" for r in runs)
        if runs:
            refill()
            clock.advance(timedelta(hours=1))
        connector = build()
        try:
            runs.append(sync.sync(connector))
        finally:
            connector.close()
    return runs


def assert_stored_once_with_progress(
    store: Store, runs: list[RunRecord], expected: set[str]
) -> None:
    """Every partial run stopped on the rate limit after storing something new; the last
    one completed; each record was created exactly once, and every run's counts add up."""
    *partial, last = runs
    assert len(partial) >= 2
    for run in partial:
        assert run.status is RunStatus.PARTIAL, run.error
        assert run.error is not None
        assert run.error.startswith("rate limit exhausted")
        assert run.created > 0
    assert last.status is RunStatus.SUCCEEDED
    for run in runs:
        assert run.fetched == run.created + run.duplicates + run.revised + run.skipped
        assert (run.revised, run.skipped) == (0, 0)
    keys = stored_keys(store)
    assert sorted(keys) == sorted(expected)
    assert sum(run.created for run in runs) == len(expected)


# -- GitHub -----------------------------------------------------------------------------------


#: The streams these tests are about (review comments and timelines: test_sync_github_streams).
ISSUES_COMMENTS_EVENTS = frozenset(
    {"issues", "pull_requests", "reviews", "issue_comments", "issue_events"}
)


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0, rate_limit=5, enforce_rate_limit=True) as fake:
        yield fake


def script_github(fake: FakeGitHub) -> set[str]:
    """A repository of about 25 requests' worth (10 per page); its keys."""
    prefix = "github:acme:api"
    expected: set[str] = set()
    for number in range(1, 46):
        is_pull = number % 5 == 0
        fake.add_issue("acme", "api", number, f"Item {number}", is_pull_request=is_pull)
        expected.add(f"{prefix}:{'pull' if is_pull else 'issue'}:{number}:opened")
        if is_pull:
            review = fake.add_review("acme", "api", number, "APPROVED", "lgtm")
            expected.add(f"{prefix}:pull:{number}:review:{review.id}")
    for number in range(1, 46, 2):
        comment = fake.add_comment("acme", "api", number, f"about {number}")
        expected.add(f"{prefix}:issue:{number}:comment:{comment.id}")
    for number in (1, 2, 3, 4, 6):
        event = fake.add_event("acme", "api", number, "labeled", label="bug")
        expected.add(f"{prefix}:issue:{number}:event:{event.id}")
    return expected


def test_a_github_repository_larger_than_the_rate_limit_budget_is_stored_once_by_successive_runs(
    store: Store, github: FakeGitHub
) -> None:
    expected = script_github(github)
    clock = FakeClock(LATER)

    def build() -> GitHubConnector:
        config = GitHubConfig(
            name="gh",
            repo="acme/api",
            token="t",
            base_url=github.base_url,
            subject="repo:{repository}",
            per_page=10,
            overlap="2m",
            streams=ISSUES_COMMENTS_EVENTS,
        )
        return GitHubConnector(config, sleeper=never_waits(clock), clock=clock)

    runs = sync_until_complete(store, clock, build, github.reset_rate_limit)

    assert_stored_once_with_progress(store, runs, expected)
    state = SyncRepository(store).state(
        "default", "gh", clock.now(), [s.name for s in build().streams()]
    )
    assert [(s.stream, s.last_status) for s in state.streams] == [
        ("acme/api:issues", StreamStatus.SUCCEEDED),
        ("acme/api:comments", StreamStatus.SUCCEEDED),
        ("acme/api:events", StreamStatus.SUCCEEDED),
    ]
    assert state.lag_seconds is not None


def test_the_first_partial_run_checkpoints_the_stream_it_stopped_in(
    store: Store, github: FakeGitHub
) -> None:
    script_github(github)
    clock = FakeClock(LATER)
    config = GitHubConfig(
        name="gh",
        repo="acme/api",
        token="t",
        base_url=github.base_url,
        subject="r",
        per_page=10,
        streams=ISSUES_COMMENTS_EVENTS,
    )
    connector = GitHubConnector(config, sleeper=never_waits(clock), clock=clock)

    record = runner(store, clock).sync(connector)
    state = SyncRepository(store).state(
        "default", "gh", clock.now(), [s.name for s in connector.streams()]
    )
    connector.close()

    assert record.status is RunStatus.PARTIAL
    issues, comments, events = state.streams
    assert issues.last_status is StreamStatus.PARTIAL
    assert issues.cursor is not None
    assert T0 < issues.cursor.position < LATER  # the last committed item, not the window end
    assert issues.last_success_at is None
    assert (comments.cursor, comments.last_status) == (None, None)  # not reached yet
    assert (events.cursor, events.last_status) == (None, None)
    assert state.lag_seconds is None  # never read completely


def issues_connector(fake: FakeGitHub, clock: FakeClock) -> GitHubConnector:
    config = GitHubConfig(
        name="gh",
        repo="acme/api",
        token="t",
        base_url=fake.base_url,
        subject="repo:{repository}",
        streams={"issues"},
        per_page=5,
        overlap="2m",
    )
    return GitHubConnector(config, sleeper=never_waits(clock), clock=clock)


def edit_an_early_issue_after_each_page(fake: FakeGitHub, edited: list[int], up_to: int) -> None:
    """After every list request, a person edits the oldest issue not edited yet (up to
    issue ``up_to``): with page numbers, every later issue moves one place earlier under
    the reader."""

    def edit(request: RecordedRequest) -> None:
        if request.path.endswith("/issues") and len(edited) < up_to:
            number = len(edited) + 1
            when = T0 + timedelta(days=9, minutes=number)
            fake.edit_issue("acme", "api", number, title="edited", updated_at=when)
            edited.append(number)

    fake.after_request(edit)


@pytest.mark.parametrize("budget", [None, 4], ids=["one run", "runs cut short by the budget"])
def test_issues_updated_between_page_requests_shift_none_out_of_the_sync(
    store: Store, budget: int | None
) -> None:
    with FakeGitHub(
        token="t", start=T0, rate_limit=budget or 5000, enforce_rate_limit=budget is not None
    ) as fake:
        for number in range(1, 41):
            when = T0 + timedelta(minutes=number)
            fake.add_issue("acme", "api", number, f"Item {number}", updated_at=when)
        edited: list[int] = []
        edit_an_early_issue_after_each_page(fake, edited, up_to=8)
        clock = FakeClock(LATER)

        runs = sync_until_complete(
            store, clock, lambda: issues_connector(fake, clock), fake.reset_rate_limit
        )
        # The last edits came after the last run read them: the next run has them.
        assert edited == list(range(1, 9))
        fake.reset_rate_limit()
        clock.advance(timedelta(hours=1))
        later = sync_until_complete(
            store, clock, lambda: issues_connector(fake, clock), fake.reset_rate_limit
        )

    assert len(runs) > 1 if budget else len(runs) == 1
    # Each run stored something new: an issue, or an edit made while it was read.
    assert all(run.created + run.revised > 0 for run in runs)
    expected = {f"github:acme:api:issue:{n}:opened" for n in range(1, 41)}
    assert sorted(stored_keys(store)) == sorted(expected)
    assert sum(run.created for run in runs) == 40
    assert sum(run.created for run in later) == 0
    with store.read() as connection:
        titles = dict(
            connection.execute(
                sa.select(tables.episodes.c.idempotency_key, tables.episodes.c.payload["title"])
            ).all()
        )
    # Each edited issue is stored as edited: its newer version was read too.
    assert {titles[f"github:acme:api:issue:{n}:opened"] for n in edited} == {"edited"}


# -- Slack ------------------------------------------------------------------------------------


def test_slack_channels_larger_than_the_budget_are_stored_once_by_successive_runs(
    store: Store,
) -> None:
    expected: set[str] = set()
    with FakeSlack(token="xoxb-test") as fake:
        start = 1_700_000_000
        for channel, count, threads in (("C1", 12, {2, 5, 8}), ("C2", 8, {3})):
            fake.add_channel(channel, channel.lower())
            for i in range(count):
                parent = fake.post_message(
                    channel, f"{channel} {i}", ts=f"{start + i * 600}.000000"
                )
                expected.add(f"slack:T12345678:{channel}:{parent.ts}")
                for minute in (1, 2) if i in threads else ():
                    ts = f"{start + i * 600 + minute * 60}.000000"
                    fake.post_reply(channel, parent.ts, f"re {i}", ts=ts)
                    expected.add(f"slack:T12345678:{channel}:{ts}")
        clock = FakeClock(datetime.fromtimestamp(start + 86_400, UTC))

        def build() -> SlackConnector:
            config = SlackConfig(
                name="sl",
                token="xoxb-test",
                channels=["C1", "C2"],
                base_url=fake.base_url + "/api",
                subject="slack:{channel}",
                page_size=4,
                lookback="15m",
                overlap="1m",
            )
            return SlackConnector(config, sleeper=never_waits(clock), clock=clock)

        fake.limit_budget(5)
        runs = sync_until_complete(store, clock, build, lambda: fake.limit_budget(5))

    assert_stored_once_with_progress(store, runs, expected)


@pytest.mark.parametrize(
    ("spacing", "lookback", "now"),
    [
        (timedelta(minutes=10), "15m", timedelta(days=1)),
        # Catching up a month with the default week of lookback: a run does not read
        # the week before its window again (that is older than a week from now).
        (timedelta(hours=12), "7d", timedelta(days=40)),
    ],
    ids=["a short lookback", "catching up further back than the lookback"],
)
def test_a_slack_channel_larger_than_one_runs_budget_is_stored_once_by_successive_runs(
    store: Store, spacing: timedelta, lookback: str, now: timedelta
) -> None:
    """One channel needs about 20 requests and a run has 5: the history is walked oldest
    first and each batch commits, so every run gets further; the last one completes."""
    expected: set[str] = set()
    with FakeSlack(token="xoxb-test") as fake:
        start = datetime(2023, 11, 14, tzinfo=UTC)
        fake.add_channel("C1", "general", created=int(start.timestamp()))

        def ts(moment: datetime) -> str:
            return f"{int(moment.timestamp())}.000000"

        for i in range(60):
            parent = fake.post_message("C1", f"m{i}", ts=ts(start + i * spacing))
            expected.add(f"slack:T12345678:C1:{parent.ts}")
            if i % 10 == 3:
                for minute in (1, 2):
                    reply = ts(start + i * spacing + timedelta(minutes=minute))
                    fake.post_reply("C1", parent.ts, f"re {i}", ts=reply)
                    expected.add(f"slack:T12345678:C1:{reply}")
        edited_at = ts(start + 55 * spacing)
        fake.edit_message("C1", ts(start + 50 * spacing), "m50, edited", edited_ts=edited_at)
        clock = FakeClock(start + now)

        def build() -> SlackConnector:
            config = SlackConfig(
                name="sl",
                token="xoxb-test",
                channels=["C1"],
                base_url=fake.base_url + "/api",
                subject="slack:{channel}",
                page_size=4,
                lookback=lookback,
                overlap="1m",
                start=start,
            )
            return SlackConnector(config, sleeper=never_waits(clock), clock=clock)

        fake.limit_budget(5)
        runs = sync_until_complete(store, clock, build, lambda: fake.limit_budget(5))

    assert len(runs) >= 4
    assert_stored_once_with_progress(store, runs, expected)


# -- Zendesk ----------------------------------------------------------------------------------

ZENDESK = "https://acme.zendesk.com"


class ZendeskExport:
    """The incremental export over respx: tickets by update time, three a page, each
    with no comments or audits; a budget of calls per hour, then 429s."""

    def __init__(self, tickets: int, budget: int) -> None:
        self.tickets = [
            {"id": n, "updated_at": (T0 + timedelta(hours=n)).isoformat(), "status": "open"}
            for n in range(1, tickets + 1)
        ]
        self.budget = budget
        self.left = budget

    def refill(self) -> None:
        self.left = self.budget

    def spend(self) -> httpx.Response | None:
        if self.left <= 0:
            return httpx.Response(429, headers={"Retry-After": "3600"}, text="slow down")
        self.left -= 1
        return None

    def export(self, request: httpx.Request) -> httpx.Response:
        limited = self.spend()
        if limited is not None:
            return limited
        query = request.url.params
        if "cursor" in query:
            offset = int(query["cursor"])
        else:
            since = datetime.fromtimestamp(int(query["start_time"]), UTC)
            offset = next(
                (
                    i
                    for i, t in enumerate(self.tickets)
                    if datetime.fromisoformat(t["updated_at"]) >= since
                ),
                len(self.tickets),
            )
        page = self.tickets[offset : offset + 3]
        end = offset + 3 >= len(self.tickets)
        return httpx.Response(
            200, json={"tickets": page, "end_of_stream": end, "after_cursor": str(offset + 3)}
        )

    def empty(self, key: str) -> Callable[[httpx.Request], httpx.Response]:
        def answer(request: httpx.Request) -> httpx.Response:
            return self.spend() or httpx.Response(200, json={key: []})

        return answer


def test_a_zendesk_export_larger_than_the_budget_is_stored_once_by_successive_runs(
    store: Store,
) -> None:
    source = ZendeskExport(tickets=9, budget=6)
    clock = FakeClock(LATER)
    with respx.mock(base_url=ZENDESK, assert_all_called=False) as mock:
        mock.get("/api/v2/incremental/tickets/cursor.json").mock(side_effect=source.export)
        mock.get(url__regex=r"/comments\.json").mock(side_effect=source.empty("comments"))
        mock.get(url__regex=r"/audits\.json").mock(side_effect=source.empty("audits"))

        def build() -> ZendeskConnector:
            config = ZendeskConfig(
                name="zd",
                subdomain="acme",
                email="agent@acme.test",
                token="t0ken",
                base_url=ZENDESK,
                subject="zendesk",
                overlap="30m",
            )
            return ZendeskConnector(config, sleeper=never_waits(clock), clock=clock)

        runs = sync_until_complete(store, clock, build, source.refill)

    assert_stored_once_with_progress(
        store, runs, {f"zendesk:acme:ticket:{n}" for n in range(1, 10)}
    )


# -- the runner's rules, with the fake connector ----------------------------------------------


def two_streams(**overrides: object) -> FakeConfig:
    values: dict[str, object] = {
        "name": "src",
        "subject": "thing:{id}",
        "overlap": "1h",
        "streams": ["a", "b"],
    }
    values.update(overrides)
    return FakeConfig.model_validate(values)


def records(stream: str, count: int) -> list[FakeRecord]:
    return [
        FakeRecord(id=f"{stream}{i}", updated_at=T0 + timedelta(minutes=i), stream=stream)
        for i in range(count)
    ]


def test_a_stream_read_to_its_end_is_checkpointed_at_the_run_start_and_the_next_resumes_alone(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(two_streams(), records("a", 5) + records("b", 10))
    connector.fail_at("b6", RateLimitExhausted("HTTP 429", attempts=1, waited=0, retry_after=60))
    sync = runner(store, clock, batch_size=3)

    partial = sync.sync(connector)
    after_partial = sync.repository.state("default", "src", clock.now(), ["a", "b"])
    clock.advance(timedelta(hours=2))
    completed = sync.sync(connector)

    assert partial.status is RunStatus.PARTIAL
    assert partial.created == 5 + 6
    a, b = after_partial.streams
    assert a.cursor == Cursor(position=T0 + timedelta(days=1))
    assert (a.last_status, a.last_success_at) == (StreamStatus.SUCCEEDED, T0 + timedelta(days=1))
    assert b.cursor == Cursor(position=T0 + timedelta(minutes=5))  # b5, the last committed
    assert (b.last_status, b.last_success_at) == (StreamStatus.PARTIAL, None)
    assert completed.status is RunStatus.SUCCEEDED
    # Each stream resumed from its own checkpoint, less the overlap.
    second_a, second_b = connector.fetches[-2:]
    assert second_a[0].start == T0 + timedelta(days=1) - timedelta(hours=1)
    assert second_b[0].start == T0 + timedelta(minutes=5) - timedelta(hours=1)
    assert (completed.created, completed.duplicates) == (4, 6)  # b6..b9; b0..b5 again
    assert completed.window_start == T0 + timedelta(minutes=5) - timedelta(hours=1)


def test_an_unordered_stream_cut_short_keeps_its_checkpoint_while_the_stream_before_moves_on(
    store: Store,
) -> None:
    class UnorderedStreams(FakeConnector):
        ordered_by_cursor = False

    clock = FakeClock(T0 + timedelta(days=1))
    connector = UnorderedStreams(two_streams(), records("a", 3) + records("b", 4))
    connector.fail_at("b2", RetryableError("timeout"))

    record = runner(store, clock, batch_size=1).sync(connector)

    assert record.status is RunStatus.PARTIAL
    assert SyncRepository(store).cursor("default", "src", "a") == Cursor(position=clock.now())
    assert SyncRepository(store).cursor("default", "src", "b") is None


def test_streams_start_from_the_cursor_of_before_streams_and_take_it_over(store: Store) -> None:
    before = T0 + timedelta(hours=6)
    with store.write() as connection:  # what migration 0012 leaves of a connector's cursor
        connection.execute(
            tables.sync_streams.insert().values(
                tenant_id="default",
                connector="src",
                stream=ALL_STREAMS,
                position=before,
                cursor=Cursor(position=before).to_json(),
                complete_through=before,
            )
        )
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(two_streams(), records("a", 2) + records("b", 2))
    shown = SyncRepository(store).state("default", "src", clock.now(), ["a", "b"])

    record = runner(store, clock).sync(connector)
    later = FakeConnector(two_streams(streams=["a", "b", "c"]), records("c", 2))
    runner(store, clock).sync(later)

    # Before the run, each stream shows where it will start: the connector's cursor.
    assert [s.cursor for s in shown.streams] == [Cursor(position=before)] * 2
    assert shown.lag_seconds == (clock.now() - before).total_seconds()
    assert [w.start for w, _ in connector.fetches] == [before - timedelta(hours=1)] * 2
    assert record.created == 0  # nothing was updated after the cursor
    repository = SyncRepository(store)
    assert repository.cursor("default", "src", ALL_STREAMS) is None  # taken over, gone
    # A stream the configuration reads from now on starts from ``start``.
    assert later.fetches[-1][0].start is None
    assert repository.cursor("default", "src", "c") == Cursor(position=clock.now())


def test_a_backfill_reads_every_stream_of_each_slice_and_moves_no_checkpoint(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = FakeConnector(two_streams(), records("a", 3) + records("b", 3))

    record = runner(store, clock).backfill(
        connector, since=T0, until=T0 + timedelta(hours=2), slice_length=timedelta(hours=1)
    )

    assert record.status is RunStatus.SUCCEEDED
    assert record.created == 6
    assert len(connector.fetches) == 2 * 2  # two slices, two streams each
    assert (
        SyncRepository(store).state("default", "src", clock.now(), ["a", "b"]).streams[0].cursor
        is None
    )
