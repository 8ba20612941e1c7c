"""The GitHub connector's ``review_comments`` and ``timeline`` streams against FakeGitHub:
keys, payloads, order, what a listing covers, and the conformance kit."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.connectors.base import Deletion, Listing, Window
from memsync.connectors.fake_http import RecordedRequest
from memsync.connectors.github import (
    GitHubCommit,
    GitHubConfig,
    GitHubConnector,
    GitHubCrossReference,
    GitHubRecord,
    GitHubReviewComment,
)
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.testing import ConnectorConformanceSuite, DeletionScenario
from memsync.episode import KeyScope, Tombstone
from memsync.stopping import FakeSleeper

T0 = datetime(2024, 3, 1, tzinfo=UTC)
END = datetime(2025, 1, 1, tzinfo=UTC)
PREFIX = "github:acme:api"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0) as server:
        yield server


def connector(fake: FakeGitHub, **overrides: object) -> GitHubConnector:
    config = GitHubConfig.model_validate(
        {
            "name": "gh",
            "repo": "acme/api",
            "token": "t",
            "base_url": fake.base_url,
            "subject": "repo:{repository}",
            "streams": ["review_comments", "timeline"],
            **overrides,
        }
    )
    return GitHubConnector(config, sleeper=FakeSleeper(max_waits=0))


def records(items: Iterable[GitHubRecord | Deletion]) -> list[GitHubRecord]:
    return [item for item in items if not isinstance(item, Tombstone | Listing)]


def script_pull_request(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 1, "Webhooks ignore Retry-After")
    fake.add_issue("acme", "api", 2, "Honour Retry-After", is_pull_request=True)
    fake.add_issue("Acme", "Web", 9, "Login page times out")
    first = fake.add_review_comment("acme", "api", 2, "Cap the wait at ten minutes.")
    fake.add_review_comment("acme", "api", 2, "Done.", in_reply_to=first.id)
    fake.add_commit("acme", "api", 2, "Read Retry-After", sha="a" * 40)
    fake.add_cross_reference("acme", "api", 1, "acme", "api", 2)
    fake.add_cross_reference("acme", "api", 1, "Acme", "Web", 9)
    fake.add_event("acme", "api", 1, "connected")
    fake.edit_issue("acme", "api", 1, body="bumped")


def test_review_comments_and_timeline_items_get_keys_from_ids_and_what_they_link(
    fake: FakeGitHub,
) -> None:
    script_pull_request(fake)
    conn = connector(fake)

    read = records(conn.fetch(Window(None, END), None))

    assert [conn.idempotency_key(r) for r in read] == [
        f"{PREFIX}:pull:2:review_comment:1",
        f"{PREFIX}:pull:2:review_comment:2",
        f"{PREFIX}:issue:2:commit:{'a' * 40}",
        f"{PREFIX}:issue:1:cross_reference:acme:api:2",
        f"{PREFIX}:issue:1:cross_reference:acme:web:9",  # lower-cased, like every repository
        f"{PREFIX}:issue:1:event:1",
    ]
    assert [conn.to_episode(r).type for r in read] == [
        "github.review_comment",
        "github.review_comment",
        "github.commit",
        "github.cross_reference",
        "github.cross_reference",
        "github.issue_event",
    ]
    by_stream = [records(conn.fetch_stream(s, Window(None, END), None)) for s in conn.streams()]
    assert [s.name for s in conn.streams()] == ["acme/api:review_comments", "acme/api:timeline"]
    for stream in by_stream:
        positions = [conn.record_cursor(r) for r in stream]
        assert positions == sorted(positions)


def test_a_connected_event_from_the_timeline_is_the_event_the_events_list_gives(
    fake: FakeGitHub,
) -> None:
    script_pull_request(fake)
    timeline = connector(fake)
    events = connector(fake, streams=["issue_events"], event_types=["connected"])

    from_timeline = records(timeline.fetch(Window(None, END), None))[-1]
    (from_events,) = records(events.fetch(Window(None, END), None))

    assert timeline.to_episode(from_timeline) == events.to_episode(from_events)


def test_a_review_comment_payload_leaves_out_where_the_diff_moved_it(fake: FakeGitHub) -> None:
    script_pull_request(fake)
    conn = connector(fake, streams=["review_comments"])

    comment, reply = records(conn.fetch(Window(None, END), None))

    assert isinstance(reply, GitHubReviewComment)
    assert conn.payload(reply) == {
        "id": 2,
        "pull_number": 2,
        "review_id": 42,
        "in_reply_to_id": 1,
        "body": "Done.",
        "author": "octocat",
        "path": "file1.txt",
        "diff_hunk": "@@ -16,33 +16,40 @@ public class Connection : IConnection...",
        "original_line": 2,
        "original_start_line": None,
        "original_commit_id": "9c48853fa3dc5c1c3d6f1f1cd1f2743e72652840",
        "created_at": "2024-03-01T00:05:00Z",
        "html_url": f"https://github.com/acme/api/pull/2#discussion_r{reply.comment_id}",
    }
    assert conn.to_episode(comment).subject_id == "repo:acme/api"


def test_a_timeline_payload_says_what_links_to_what(fake: FakeGitHub) -> None:
    script_pull_request(fake)
    conn = connector(fake, streams=["timeline"])

    commit, reference, _, _ = records(conn.fetch(Window(None, END), None))

    assert isinstance(commit, GitHubCommit)
    assert conn.payload(commit)["message"] == "Read Retry-After"
    assert isinstance(reference, GitHubCrossReference)
    assert conn.payload(reference) == {
        "issue_number": 1,
        "source_repository": "acme/api",
        "source_number": 2,
        "source_title": "Honour Retry-After",
        "source_is_pull_request": True,
        "source_html_url": "https://github.com/acme/api/pull/2",
        "actor": "octocat",
        "created_at": "2024-03-01T00:07:00Z",
    }


def test_one_issue_mentioning_another_twice_is_one_cross_reference_the_first(
    fake: FakeGitHub,
) -> None:
    script_pull_request(fake)
    fake.add_cross_reference("acme", "api", 1, "acme", "api", 2)
    conn = connector(fake, streams=["timeline"])

    references = [
        r
        for r in records(conn.fetch(Window(None, END), None))
        if isinstance(r, GitHubCrossReference)
    ]

    assert [(r.source_number, conn.payload(r)["created_at"]) for r in references] == [
        (2, "2024-03-01T00:07:00Z"),
        (9, "2024-03-01T00:08:00Z"),
    ]


def test_only_issues_updated_in_the_window_have_their_timeline_read(fake: FakeGitHub) -> None:
    script_pull_request(fake)
    conn = connector(fake, streams=["timeline"])

    # Issue 1 was last updated at minute 10, pull request 2 at minute 6 (its commit).
    list(conn.fetch(Window(T0 + timedelta(minutes=7), END), None))

    assert fake.request_count("/repos/acme/api/issues/1/timeline") == 1
    assert fake.request_count("/repos/acme/api/issues/2/timeline") == 0


def test_an_issue_gone_before_its_timeline_is_read_has_no_timeline(fake: FakeGitHub) -> None:
    script_pull_request(fake)
    fake.script_error(404, path="/issues/2/timeline")
    conn = connector(fake, streams=["timeline"])

    read = records(conn.fetch(Window(None, END), None))

    assert [r.issue_number for r in read] == [1, 1, 1]


def test_the_review_comment_listing_covers_what_was_created_since_the_window_start(
    fake: FakeGitHub,
) -> None:
    script_pull_request(fake)
    conn = connector(fake, streams=["review_comments"])
    start = T0 + timedelta(minutes=5)

    *_, listing = conn.fetch(Window(start, END), None)

    assert listing == Listing(
        KeyScope(
            f"{PREFIX}:pull:",
            occurred_from=start,
            episode_types=frozenset({"github.review_comment"}),
        ),
        frozenset({f"{PREFIX}:pull:2:review_comment:2"}),
    )


def test_a_read_stopped_at_the_window_end_with_pages_left_lists_nothing(fake: FakeGitHub) -> None:
    fake.add_issue("acme", "api", 2, "Honour Retry-After", is_pull_request=True)
    for n in range(6):
        fake.add_review_comment("acme", "api", 2, f"note {n}")
    conn = connector(fake, streams=["review_comments"], per_page=2)

    read = list(conn.fetch(Window(None, T0 + timedelta(minutes=3)), None))

    assert not any(isinstance(item, Listing) for item in read)
    assert len(read) == 2


# -- conformance -------------------------------------------------------------------------------


def _recorded(edit: bool) -> list[GitHubRecord]:
    with FakeGitHub(start=T0) as server:
        script_pull_request(server)
        if edit:
            server.edit_review_comment("acme", "api", 1, "Cap the wait at five minutes.")
        read = records(connector(server).fetch(Window(None, END), None))
    if not edit:
        return read
    return [r for r in read if isinstance(r, GitHubReviewComment) and r.comment_id == 1]


class TestReviewCommentsAndTimelineConformance(ConnectorConformanceSuite[GitHubRecord]):
    def make_connector(self) -> GitHubConnector:
        config = GitHubConfig(name="gh", repo="acme/api", subject="repo:{repository}")
        return GitHubConnector(config)

    def recorded_records(self) -> Sequence[GitHubRecord]:
        return _recorded(edit=False)

    def edited_records(self) -> Sequence[GitHubRecord]:
        return _recorded(edit=True)

    def test_deletions_are_reported_and_nothing_else(self, fake: FakeGitHub) -> None:
        self.source = fake
        script_pull_request(fake)
        super().test_deletions_are_reported_and_nothing_else()

    def deletion_scenario(self) -> DeletionScenario:
        fake = self.source

        def remove() -> str:
            fake.delete_review_comment("acme", "api", 2)
            return f"{PREFIX}:pull:2:review_comment:2"

        return DeletionScenario(
            read=lambda: connector(fake), remove=remove, window=Window(None, END)
        )


# -- timelines paged while comments leave them, as a property ----------------------------------


class DeletionsBetweenTimelinePages:
    """The comments of the repository being read to delete after the n-th timeline page
    request answered (next pages are asked for under ``/repositories/{id}/``)."""

    def __init__(self, fake: FakeGitHub) -> None:
        self.fake = fake
        self.repo = ""
        self.plan: dict[int, list[int]] = {}
        self.answered = 0
        fake.after_request(self.after)

    def read(self, repo: str, plan: dict[int, list[int]]) -> None:
        self.repo, self.plan, self.answered = repo, plan, 0

    def after(self, request: RecordedRequest) -> None:
        if not request.path.endswith("/issues/1/timeline"):
            return
        self.answered += 1
        for comment_id in self.plan.get(self.answered, []):
            self.fake.delete_comment("acme", self.repo, comment_id)


@pytest.fixture(scope="module")
def deleting() -> Iterator[DeletionsBetweenTimelinePages]:
    with FakeGitHub(token="t", start=T0) as server:
        yield DeletionsBetweenTimelinePages(server)


_repos_made = itertools.count()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    items=st.lists(st.booleans(), min_size=1, max_size=16),  # True: a commit, else a comment
    per_page=st.integers(1, 4),
    deletions=st.lists(st.tuples(st.integers(1, 8), st.integers(0, 15)), max_size=5),
)
def test_no_commit_is_shifted_out_of_a_timeline_by_comments_deleted_between_pages(
    deleting: DeletionsBetweenTimelinePages,
    items: list[bool],
    per_page: int,
    deletions: list[tuple[int, int]],
) -> None:
    """A pull request's timeline of comments and commits, comments deleted after some
    page requests: every commit is read, each once."""
    repo = f"t{next(_repos_made)}"
    fake = deleting.fake
    fake.add_issue("acme", repo, 1, "Busy", is_pull_request=True)
    comments: list[int] = []
    shas: set[str] = set()
    for index, is_commit in enumerate(items):
        if is_commit:
            shas.add(fake.add_commit("acme", repo, 1, f"step {index}").sha)
        else:
            comments.append(fake.add_comment("acme", repo, 1, f"comment {index}").id)
    plan: dict[int, list[int]] = {}
    planned: set[int] = set()  # a comment is deleted once
    for after_request, index in deletions:
        if comments and (comment := comments[index % len(comments)]) not in planned:
            planned.add(comment)
            plan.setdefault(after_request, []).append(comment)
    deleting.read(repo, plan)
    conn = connector(fake, repo=f"acme/{repo}", streams=["timeline"], per_page=per_page)

    read = records(conn.fetch(Window(None, END), None))

    assert sorted(r.sha for r in read if isinstance(r, GitHubCommit)) == sorted(shas)
    assert len(read) == len(shas)
