"""The GitHub connector through PyGithub against FakeGitHub: what is read, the keys,
repeats and edits, pagination, rate limits and errors. Time is a FakeClock; sleeping
is recorded, never done."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.connectors.base import Deletion, Listing, Window
from memsync.connectors.errors import RateLimitExhausted, StopRun
from memsync.connectors.fake_http import RecordedRequest
from memsync.connectors.github import GitHubConfig, GitHubConnector, GitHubIssue, GitHubRecord
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.testing import (
    ConnectorConformanceSuite,
    DeletionScenario,
    SimulatedIngest,
)
from memsync.episode import Tombstone
from memsync.stopping import FakeSleeper
from tests.unit.connectors.sync_helpers import sync

T0 = datetime(2024, 3, 1, tzinfo=UTC)
END = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0) as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 1, 1, tzinfo=UTC))


@pytest.fixture
def sleeper(clock: FakeClock) -> FakeSleeper:
    return FakeSleeper(clock)


def connector(
    fake: FakeGitHub,
    sleeper: FakeSleeper | None = None,
    *,
    token: str = "t",
    **overrides: Any,
) -> GitHubConnector:
    config = GitHubConfig(
        name="gh",
        repo=overrides.pop("repo", "acme/api"),
        token=token,
        base_url=fake.base_url,
        subject="repo:{repository}",
        **overrides,
    )
    sleeper = sleeper or FakeSleeper(max_waits=0)
    return GitHubConnector(config, sleeper=sleeper, clock=sleeper.clock)


def keys(conn: GitHubConnector, records: Sequence[GitHubRecord | Deletion]) -> list[str]:
    """The keys of the records among ``records`` (deletions left out)."""
    return [conn.idempotency_key(r) for r in records if not isinstance(r, Tombstone | Listing)]


def only_records(items: Iterable[GitHubRecord | Deletion]) -> list[GitHubRecord]:
    return [item for item in items if not isinstance(item, Tombstone | Listing)]


def script_repository(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "Webhooks ignore Retry-After", "steps…")
    fake.add_issue("acme", "api", 2, "Honour Retry-After", "fix", is_pull_request=True)
    fake.add_comment("acme", "api", 1, "seen it too")
    fake.add_event("acme", "api", 1, "labeled", label="bug")
    fake.add_review("acme", "api", 2, "APPROVED", "lgtm")


# -- what is read, and the keys --------------------------------------------------------------


def test_reads_issues_pulls_comments_reviews_and_events_each_stream_oldest_first(
    fake: FakeGitHub,
) -> None:
    script_repository(fake)
    conn = connector(fake)

    by_stream = {
        stream.name: list(conn.fetch_stream(stream, Window(None, END), None))
        for stream in conn.streams()
    }
    records = list(conn.fetch(Window(None, END), None))

    assert sorted(keys(conn, records)) == [
        "github:acme:api:issue:1:comment:1",
        "github:acme:api:issue:1:event:1",
        "github:acme:api:issue:1:opened",
        "github:acme:api:pull:2:opened",
        "github:acme:api:pull:2:review:1",
    ]
    assert [(s.name, s.ordered) for s in conn.streams()] == [
        ("acme/api:issues", True),
        ("acme/api:comments", True),
        ("acme/api:events", True),
        ("acme/api:review_comments", True),
        ("acme/api:timeline", True),
    ]
    assert [r for stream in by_stream.values() for r in stream] == records
    for stream in by_stream.values():
        positions = [conn.record_cursor(record) for record in only_records(stream)]
        assert positions == sorted(positions)
    assert {conn.to_episode(r).type for r in by_stream["acme/api:issues"]} == {
        "github.issue",
        "github.pull_request",
        "github.review",
    }
    types = {conn.to_episode(r).type for r in only_records(records)}
    assert types == {
        "github.issue",
        "github.pull_request",
        "github.issue_comment",
        "github.issue_event",
        "github.review",
    }


def test_pull_requests_in_the_issues_list_cost_no_extra_request(fake: FakeGitHub) -> None:
    for n in range(1, 11):
        fake.add_issue("acme", "api", n, f"item {n}", is_pull_request=n % 2 == 0)
    conn = connector(fake, streams={"issues", "pull_requests"})

    records = list(conn.fetch(Window(None, END), None))

    assert keys(conn, records)[:2] == [
        "github:acme:api:issue:1:opened",
        "github:acme:api:pull:2:opened",
    ]
    assert fake.request_count() == 1  # one page of issues, no per-item GET


def test_owner_and_repository_case_do_not_change_keys(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 7, "case")
    lower = connector(fake, repo="acme/api")
    upper = connector(fake, repo="Acme/API")
    (record,) = only_records(lower.fetch(Window(None, END), None))
    assert upper.idempotency_key(record) == "github:acme:api:issue:7:opened"


def test_the_window_end_leaves_later_updates_for_the_next_run(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "early", updated_at=T0)
    fake.add_issue("acme", "api", 2, "late", updated_at=T0 + timedelta(days=2))
    conn = connector(fake, streams={"issues"})

    records = list(conn.fetch(Window(None, T0 + timedelta(days=1)), None))

    assert keys(conn, records) == ["github:acme:api:issue:1:opened"]


def test_only_configured_event_types_become_records(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "x")
    fake.add_event("acme", "api", 1, "subscribed")
    fake.add_event("acme", "api", 1, "closed")
    conn = connector(fake, streams={"issue_events"})

    records = list(conn.fetch(Window(None, END), None))

    assert [conn.to_episode(r).payload["event"] for r in records] == ["closed"]


# -- repeats and edits ------------------------------------------------------------------------


def test_two_overlapping_windows_store_every_item_once(fake: FakeGitHub) -> None:
    script_repository(fake)
    store = SimulatedIngest()
    first_end = T0 + timedelta(hours=1)
    first = sync(connector(fake), store, None, first_end)
    fake.add_comment("acme", "api", 2, "merged soon")
    fake.add_event("acme", "api", 1, "closed", T0 + timedelta(hours=2))

    second = sync(connector(fake), store, first_end - timedelta(hours=2), T0 + timedelta(hours=3))

    assert first == {"created": 5}
    # issue 1 is re-read because it was closed (a revision: its state changed); pull 2 and
    # its review because of the new comment (duplicates); the old comment and the
    # labeled event fall in the overlap (duplicates).
    assert second == {"created": 2, "duplicate": 4, "revised": 1}
    assert len(store.stored) == 7


def test_an_edited_title_is_a_revision_a_comment_new_and_a_close_event_recorded_once(
    fake: FakeGitHub,
) -> None:
    fake.add_issue("acme", "api", 1, "Retry-After ignored", "body")
    store = SimulatedIngest()
    start = T0
    end = T0 + timedelta(hours=1)
    assert sync(connector(fake), store, None, end) == {"created": 1}

    fake.edit_issue("acme", "api", 1, title="Retry-After ignored on 429")
    assert sync(connector(fake), store, start, end) == {"revised": 1}

    fake.add_comment("acme", "api", 1, "here is a trace")
    assert sync(connector(fake), store, start, end) == {"created": 1, "duplicate": 1}

    fake.add_event("acme", "api", 1, "closed")
    closing = sync(connector(fake), store, start, end)
    again = sync(connector(fake), store, start, end)

    assert closing == {"created": 1, "revised": 1, "duplicate": 1}  # event, issue state
    assert again == {"duplicate": 3}
    assert sum(":event:" in key for key in store.stored) == 1


# -- pagination ------------------------------------------------------------------------------


def since_asked(fake: FakeGitHub, path: str) -> list[tuple[str | None, str | None]]:
    """``(since, page)`` of each request for ``path``, in order."""
    return [
        (r.param("since"), r.param("page"))
        for r in fake.requests
        if r.path == path or r.path.endswith(path.removeprefix("/repos/acme/api"))
    ]


def test_each_next_page_is_page_one_from_the_latest_update_seen(fake: FakeGitHub) -> None:
    for n in range(1, 251):
        fake.add_issue("acme", "api", n, f"issue {n}", updated_at=T0 + timedelta(minutes=n))
    conn = connector(fake, streams={"issues"})

    records = list(conn.fetch(Window(T0, END), None))

    assert keys(conn, records) == [f"github:acme:api:issue:{n}:opened" for n in range(1, 251)]
    # Issue 100 ends page one and starts page two (since is inclusive): handed out once.
    assert since_asked(fake, "/repos/acme/api/issues") == [
        ("2024-03-01T00:00:00Z", None),
        ("2024-03-01T01:40:00Z", None),
        ("2024-03-01T03:19:00Z", None),
    ]


def test_comments_are_read_by_keyset_pages_too(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "x", updated_at=T0)
    for n in range(1, 131):
        fake.add_comment("acme", "api", 1, f"comment {n}", created_at=T0 + timedelta(minutes=n))
    conn = connector(fake, streams={"issue_comments"})

    records = list(conn.fetch(Window(None, END), None))

    assert len(set(keys(conn, records))) == len(records) == 130
    assert since_asked(fake, "/repos/acme/api/issues/comments") == [
        (None, None),
        ("2024-03-01T01:40:00Z", None),
    ]


def test_an_item_updated_between_two_pages_shifts_nothing_past_the_reader(
    fake: FakeGitHub,
) -> None:
    """GitHub pages by offset: with page numbers, issue 1 updated after page one moves to
    the end, and issue 4 (first of page two) would slide onto page one, never returned."""
    for n in range(1, 10):
        fake.add_issue("acme", "api", n, f"issue {n}", updated_at=T0 + timedelta(minutes=n))
    conn = connector(fake, streams={"issues"}, per_page=3)
    window_end = T0 + timedelta(hours=1)
    records = conn.fetch(Window(T0, window_end), None)

    first_page = [next(records) for _ in range(3)]
    fake.edit_issue("acme", "api", 1, title="moved", updated_at=T0 + timedelta(minutes=30))
    rest = list(records)

    numbers = [record.data["number"] for record in [*first_page, *rest]]
    assert numbers == [1, 2, 3, 4, 5, 6, 7, 8, 9, 1]  # issue 1 again: its newer version
    assert [record.data["title"] for record in rest][-1] == "moved"


def test_a_second_holding_more_than_a_page_is_read_by_page_number_until_two_reads_agree(
    fake: FakeGitHub,
) -> None:
    same_second = T0 + timedelta(minutes=5)
    for n in range(1, 8):
        fake.add_issue("acme", "api", n, f"issue {n}", updated_at=same_second)
    fake.add_issue("acme", "api", 8, "later", updated_at=T0 + timedelta(minutes=6))
    conn = connector(fake, streams={"issues"}, per_page=3)

    records = list(conn.fetch(Window(T0, END), None))

    assert sorted(record.data["number"] for record in records) == list(range(1, 9))
    assert len(records) == 8
    assert since_asked(fake, "/repos/acme/api/issues") == [
        ("2024-03-01T00:00:00Z", None),
        # the tie: pages of that second, twice (the reads agree), then the next second
        ("2024-03-01T00:05:00Z", None),
        ("2024-03-01T00:05:00Z", "2"),
        ("2024-03-01T00:05:00Z", "3"),
        ("2024-03-01T00:05:00Z", None),
        ("2024-03-01T00:05:00Z", "2"),
        ("2024-03-01T00:05:00Z", "3"),
        ("2024-03-01T00:05:01Z", None),
    ]


def test_an_item_leaving_a_crowded_second_between_pages_loses_no_other(
    fake: FakeGitHub,
) -> None:
    same_second = T0 + timedelta(minutes=5)
    for n in range(1, 8):
        fake.add_issue("acme", "api", n, f"issue {n}", updated_at=same_second)
    conn = connector(fake, streams={"issues"}, per_page=3)
    moved: list[int] = []

    def move_issue_one_after_page_two(request: RecordedRequest) -> None:
        if not moved and request.param("page") == "2":
            fake.edit_issue("acme", "api", 1, title="moved", updated_at=T0 + timedelta(hours=1))
            moved.append(request.number)

    fake.after_request(move_issue_one_after_page_two)

    records = list(conn.fetch(Window(T0, END), None))

    assert moved
    numbers = [record.data["number"] for record in records]
    assert sorted(set(numbers)) == list(range(1, 8))
    assert numbers.count(1) == 1  # only its newer version: it left the second before
    assert records[-1].data["title"] == "moved"


def test_events_stop_paging_at_the_first_event_older_than_the_window(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "x", updated_at=T0)
    for minute in range(250):
        fake.add_event("acme", "api", 1, "labeled", T0 + timedelta(minutes=minute), label="a")
    conn = connector(fake, streams={"issue_events"})

    records = list(conn.fetch(Window(T0 + timedelta(minutes=200), END), None))

    assert len(records) == 50
    assert fake.request_count() == 1  # the newest 100 already reach past the window start


# -- rate limits and errors ------------------------------------------------------------------


def test_a_secondary_limit_with_retry_after_mid_run_is_waited_out(
    fake: FakeGitHub, sleeper: FakeSleeper
) -> None:
    for n in range(1, 251):
        fake.add_issue("acme", "api", n, f"issue {n}")
    fake.script_rate_limit("secondary", on_request_number=2, retry_after=30)
    conn = connector(fake, sleeper, streams={"issues"})

    records = list(conn.fetch(Window(None, END), None))

    assert len(records) == 250
    assert sleeper.waits == [30.0]
    assert fake.request_count() == 4  # page 2 was asked twice


def test_a_page_that_failed_is_asked_for_again_with_the_same_query(
    fake: FakeGitHub, sleeper: FakeSleeper
) -> None:
    for n in range(1, 251):
        fake.add_issue("acme", "api", n, f"issue {n}", updated_at=T0 + timedelta(minutes=n))
    fake.script_error(502, on_request_number=3)
    conn = connector(fake, sleeper, streams={"issues"})

    records = list(conn.fetch(Window(None, END), None))

    assert len(records) == 250
    assert since_asked(fake, "/repos/acme/api/issues") == [
        (None, None),
        ("2024-03-01T01:40:00Z", None),
        ("2024-03-01T03:19:00Z", None),
        ("2024-03-01T03:19:00Z", None),
    ]


def test_a_secondary_limit_without_retry_after_waits_a_minute(
    fake: FakeGitHub, sleeper: FakeSleeper
) -> None:
    fake.add_issue("acme", "api", 1, "x")
    fake.script_rate_limit("secondary")
    records = list(connector(fake, sleeper, streams={"issues"}).fetch(Window(None, END), None))
    assert len(records) == 1
    assert sleeper.waits == [60.0]


def test_a_limit_past_the_cap_ends_the_fetch_with_rate_limit_exhausted(
    fake: FakeGitHub, sleeper: FakeSleeper
) -> None:
    fake.add_issue("acme", "api", 1, "x")
    fake.script_rate_limit("secondary", retry_after=30, times=10)
    conn = connector(fake, sleeper, streams={"issues"}, retry={"max_attempts": 5, "max_wait": "1m"})

    with pytest.raises(RateLimitExhausted, match="secondary rate limit") as caught:
        list(conn.fetch(Window(None, END), None))

    assert sleeper.waits == [30.0, 30.0]
    assert caught.value.attempts == 3
    assert caught.value.retry_after == 30.0


@pytest.mark.parametrize("status", [403, 429])
def test_a_primary_limit_waits_until_the_reset_header(
    fake: FakeGitHub, sleeper: FakeSleeper, status: int
) -> None:
    fake.add_issue("acme", "api", 1, "x")
    reset = int(sleeper.clock.now().timestamp()) + 45
    fake.script_rate_limit("primary", reset_at=reset, status=status)

    records = list(connector(fake, sleeper, streams={"issues"}).fetch(Window(None, END), None))

    assert len(records) == 1
    assert sleeper.waits == [45.0]


def test_a_primary_limit_resetting_after_the_cap_is_exhausted_at_once(
    fake: FakeGitHub, sleeper: FakeSleeper
) -> None:
    fake.add_issue("acme", "api", 1, "x")
    fake.script_rate_limit("primary", reset_at=int(sleeper.clock.now().timestamp()) + 3600)

    with pytest.raises(RateLimitExhausted, match="primary rate limit"):
        list(connector(fake, sleeper, streams={"issues"}).fetch(Window(None, END), None))
    assert sleeper.waits == []


def test_bad_credentials_stop_the_run_without_retrying(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "x")
    with pytest.raises(StopRun, match="HTTP 401") as caught:
        list(connector(fake, token="wrong").fetch(Window(None, END), None))
    assert "wrong" not in str(caught.value)
    assert fake.request_count() == 1


def test_a_403_that_is_not_a_rate_limit_stops_the_run(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "x")
    fake.script_error(403)
    with pytest.raises(StopRun, match="no access"):
        list(connector(fake, streams={"issues"}).fetch(Window(None, END), None))


def test_an_unknown_repository_stops_the_run(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "x")
    with pytest.raises(StopRun, match="HTTP 404"):
        list(connector(fake, repo="acme/nope").fetch(Window(None, END), None))


@pytest.mark.parametrize("status", [301, 302, 303, 304, 307, 308])
def test_a_redirect_is_an_error_never_an_empty_page(fake: FakeGitHub, status: int) -> None:
    fake.add_issue("acme", "api", 1, "x")
    # An empty JSON list with the redirect: read as a page, it would end the list.
    fake.script_error(status, body=[], headers={"Location": "https://sso.example.com/login"})

    with pytest.raises(StopRun, match="redirect") as caught:
        list(connector(fake, streams={"issues"}).fetch(Window(None, END), None))
    if status != 301:  # a 301 off the API host is refused by PyGithub in its own words
        assert "sso.example.com" in str(caught.value)
    assert fake.request_count() == 1


def test_a_301_within_the_api_host_is_followed_as_pygithub_does(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "x")
    moved = f"{fake.base_url}/repositories/{fake.repo_id('acme', 'api')}/issues"
    fake.script_error(301, headers={"Location": moved})

    records = list(connector(fake, streams={"issues"}).fetch(Window(None, END), None))

    assert keys(connector(fake), records) == ["github:acme:api:issue:1:opened"]
    assert fake.request_count() == 2


def test_a_server_error_is_retried_with_backoff(fake: FakeGitHub, sleeper: FakeSleeper) -> None:
    fake.add_issue("acme", "api", 1, "x")
    fake.script_error(502, times=2)
    records = list(connector(fake, sleeper, streams={"issues"}).fetch(Window(None, END), None))
    assert len(records) == 1
    assert sleeper.waits == [1.0, 2.0]


def test_the_token_never_appears_in_the_config_repr() -> None:
    config = GitHubConfig(name="gh", repo="acme/api", token="ghp_secret", subject="x")
    assert "ghp_secret" not in repr(config)


# -- conformance -----------------------------------------------------------------------------


def _recorded(edit: bool) -> list[GitHubRecord]:
    with FakeGitHub(start=T0) as server:
        script_repository(server)
        if edit:
            server.edit_issue("acme", "api", 1, title="renamed")
            server.edit_comment("acme", "api", 1, "seen it too, twice")
        records = only_records(connector(server).fetch(Window(None, END), None))
    if not edit:
        return records
    conn = connector(server)
    edited = {"github:acme:api:issue:1:opened", "github:acme:api:issue:1:comment:1"}
    return [record for record in records if conn.idempotency_key(record) in edited]


class TestGitHubConformance(ConnectorConformanceSuite[GitHubRecord]):
    def make_connector(self) -> GitHubConnector:
        config = GitHubConfig(name="gh", repo="acme/api", subject="repo:{repository}")
        return GitHubConnector(config)

    def recorded_records(self) -> Sequence[GitHubRecord]:
        return _recorded(edit=False)

    def edited_records(self) -> Sequence[GitHubRecord]:
        return _recorded(edit=True)

    def test_deletions_are_reported_and_nothing_else(self, fake: FakeGitHub) -> None:
        self.source = fake
        script_repository(fake)
        super().test_deletions_are_reported_and_nothing_else()

    def deletion_scenario(self) -> DeletionScenario:
        fake = self.source

        def remove() -> str:
            fake.transfer_issue("acme", "api", 1, "acme", "elsewhere")
            return "github:acme:api:issue:1:opened"

        return DeletionScenario(
            read=lambda: connector(fake), remove=remove, window=Window(None, END)
        )


# -- transfers and deletions -------------------------------------------------------------------


def test_a_transferred_issue_is_a_tombstone_for_it_and_everything_below_it(
    fake: FakeGitHub,
) -> None:
    script_repository(fake)
    fake.transfer_issue("acme", "api", 1, "acme", "elsewhere")
    conn = connector(fake)

    items = list(conn.fetch(Window(None, END), None))
    items = items[: items.index(Tombstone("github:acme:api:issue:1", with_children=True)) + 1]

    assert items[-1] == Tombstone("github:acme:api:issue:1", with_children=True)
    assert not any(":issue:1:" in conn.idempotency_key(i) for i in items[:-1])
    assert fake.request_count("/repos/acme/api/issues/1") == 1


def test_an_issue_that_answers_410_after_a_deleted_event_is_a_tombstone(fake: FakeGitHub) -> None:
    script_repository(fake)
    store = SimulatedIngest()
    sync(connector(fake), store, None, END)
    fake.add_event("acme", "api", 1, "deleted")
    fake.delete_issue("acme", "api", 1)

    outcome = sync(connector(fake), store, None, END)

    assert outcome["tombstoned"] == 3  # the issue, its comment and its labeled event
    assert store.deleted == {k for k in store.stored if k.startswith("github:acme:api:issue:1:")}


def test_an_issue_still_there_after_a_transferred_event_is_not_a_deletion(
    fake: FakeGitHub,
) -> None:
    script_repository(fake)
    fake.add_event("acme", "api", 1, "transferred")  # e.g. transferred back since
    store = SimulatedIngest()

    outcome = sync(connector(fake), store, None, END)

    assert "tombstoned" not in outcome
    assert "github:acme:api:issue:1:opened" in store.stored


def test_config_parses_through_the_registry_with_one_repo_or_many() -> None:
    from memsync.connectors import load_registry

    one, many = load_registry().parse_configs(
        [
            {"name": "a", "type": "github", "repo": "acme/api", "subject": "repo:{repository}"},
            {
                "name": "b",
                "type": "github",
                "repo": ["acme/api", "acme/web"],
                "subject": "gh:{owner}",
                "streams": ["issues", "issue_comments"],
            },
        ]
    )
    assert isinstance(one, GitHubConfig)
    assert one.repo == ["acme/api"]
    assert isinstance(many, GitHubConfig)
    assert many.streams == {"issues", "issue_comments"}


def test_a_repo_that_is_not_owner_slash_name_is_refused() -> None:
    with pytest.raises(ValueError, match="must be 'owner/name'"):
        GitHubConfig(name="gh", repo="acme", subject="x")


def test_public_surface_is_what_we_meant() -> None:
    import memsync.connectors.github as package

    assert sorted(package.__all__) == [
        "DEFAULT_EVENT_TYPES",
        "GITHUB",
        "GitHubComment",
        "GitHubCommit",
        "GitHubConfig",
        "GitHubConnector",
        "GitHubCrossReference",
        "GitHubIssue",
        "GitHubIssueEvent",
        "GitHubRecord",
        "GitHubReview",
        "GitHubReviewComment",
        "GitHubStream",
        "RepoRef",
    ]
    assert all(hasattr(package, name) for name in package.__all__)


def test_a_public_repository_is_read_without_a_token() -> None:
    with FakeGitHub(start=T0) as server:
        server.add_issue("acme", "api", 1, "public")
        config = GitHubConfig(
            name="gh", repo="acme/api", base_url=server.base_url, subject="repo:{repository}"
        )
        records = only_records(GitHubConnector(config).fetch(Window(None, END), None))
        assert len(records) == 1
        assert all("authorization" not in r.headers for r in server.requests)


# -- keyset pagination, as a property ----------------------------------------------------------


class EditsBetweenPages:
    """Per repository, the issues to edit after the n-th list request answered for it."""

    def __init__(self, fake: FakeGitHub) -> None:
        self.fake = fake
        self.plans: dict[str, dict[int, list[tuple[int, datetime]]]] = {}
        self.answered: dict[str, int] = {}
        fake.after_request(self.after)

    def after(self, request: RecordedRequest) -> None:
        repo = next((name for name in self.plans if f"/{name}/issues" in request.path), None)
        if repo is None:
            return
        self.answered[repo] = self.answered.get(repo, 0) + 1
        for number, when in self.plans[repo].get(self.answered[repo], []):
            self.fake.edit_issue("acme", repo, number, title="edited", updated_at=when)


@pytest.fixture(scope="module")
def shifting() -> Iterator[EditsBetweenPages]:
    with FakeGitHub(token="t", start=T0) as server:
        yield EditsBetweenPages(server)


_repos_made = itertools.count()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    seconds=st.lists(st.integers(0, 6), min_size=1, max_size=25),
    per_page=st.integers(1, 4),
    edits=st.lists(
        st.tuples(st.integers(1, 12), st.integers(0, 24), st.integers(7, 40)), max_size=6
    ),
)
def test_no_issue_is_shifted_out_by_edits_between_page_requests(
    shifting: EditsBetweenPages,
    seconds: list[int],
    per_page: int,
    edits: list[tuple[int, int, int]],
) -> None:
    """Issues crowded into a few seconds, edited (moved later) between page requests:
    every issue not edited is read exactly once, an edited one at least once unless it
    moved past the window end before it was read, nothing is read twice in one version,
    and the list comes out oldest first."""
    repo = f"r{next(_repos_made)}"
    until = T0 + timedelta(seconds=30)
    for number, second in enumerate(seconds, start=1):
        shifting.fake.add_issue(
            "acme", repo, number, "x", updated_at=T0 + timedelta(seconds=second)
        )
    plan: dict[int, list[tuple[int, datetime]]] = {}
    for after_request, index, second in edits:
        number = index % len(seconds) + 1
        plan.setdefault(after_request, []).append((number, T0 + timedelta(seconds=second)))
    shifting.plans[repo] = plan
    conn = connector(shifting.fake, repo=f"acme/{repo}", streams={"issues"}, per_page=per_page)

    read = [r for r in conn.fetch(Window(T0, until), None) if isinstance(r, GitHubIssue)]

    edited = {number for moves in plan.values() for number, _ in moves}
    versions = [(r.number, r.updated_at) for r in read]
    assert len(versions) == len(set(versions))
    assert [r.updated_at for r in read] == sorted(r.updated_at for r in read)
    numbers = [r.number for r in read]
    for number in range(1, len(seconds) + 1):
        if number not in edited:
            assert numbers.count(number) == 1, number
        elif shifting.fake.issue("acme", repo, number).updated_at <= until:
            assert number in numbers, number
