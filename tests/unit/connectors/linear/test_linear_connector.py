"""The Linear connector against FakeLinear (GraphQL on loopback): configuration, keys,
what is read, edits, moves, archives, pagination, rate limits and errors. Time is a
FakeClock; sleeping is recorded, never done."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.connectors import (
    ConnectorConfigError,
    ConnectorInfo,
    ConnectorRegistry,
    RateLimitExhausted,
    RetryableError,
    StopRun,
    Tombstone,
    Window,
    retry_after_from_headers,
)
from memsync.connectors.http import HttpRecord
from memsync.connectors.linear import LINEAR, LinearConfig, LinearConnector
from memsync.connectors.linear.fake_api import FakeLinear
from memsync.connectors.testing import (
    ConnectorConformanceSuite,
    DeletionScenario,
    SimulatedIngest,
)
from memsync.stopping import FakeSleeper
from tests.unit.connectors.sync_helpers import sync

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EVERYTHING = Window(None, NOW)
TOKEN = "lin_api_test"
ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW - timedelta(days=1))


@pytest.fixture
def fake(clock: FakeClock) -> Iterator[FakeLinear]:
    with FakeLinear(token=TOKEN, clock=clock) as server:
        server.add_team("ENG")
        server.add_team("OPS")
        yield server


def config(fake: FakeLinear | None = None, **fields: Any) -> LinearConfig:
    return LinearConfig.model_validate(
        {
            "name": "eng-linear",
            "token": TOKEN,
            "base_url": fake.base_url if fake is not None else None,
            "retry": {"max_attempts": 4, "max_wait": "10m"},
            **fields,
        }
    )


def connector(fake: FakeLinear, clock: FakeClock | None = None, **fields: Any) -> LinearConnector:
    sleeper = FakeSleeper(clock or FakeClock(NOW))
    return LinearConnector(config(fake, **fields), sleeper=sleeper, clock=sleeper.clock)


def read(
    fake: FakeLinear, window: Window = EVERYTHING, **fields: Any
) -> list[HttpRecord | Tombstone]:
    items = list(connector(fake, **fields).fetch(window, None))
    assert all(not isinstance(item, dict) for item in items)
    return items


def keys(items: Sequence[object], reader: LinearConnector) -> list[str]:
    return [
        item.key if isinstance(item, Tombstone) else reader.idempotency_key(item) for item in items
    ]


def updated(record: HttpRecord) -> datetime:
    return datetime.fromisoformat(record.data["updatedAt"])


def registry() -> ConnectorRegistry:
    return ConnectorRegistry([ConnectorInfo("linear", LINEAR, "test")])


# -- configuration ---------------------------------------------------------------------


ISSUE_CONFIGURATION = """
  - name: eng-linear
    type: linear
    tenant: default
    token: lin_api_from_env
    teams: [ENG]                      # team keys; all teams when absent
    subject: "team:{team_key}"        # also: issue_identifier, project_id
    overlap: 2h
    start: 2026-01-01
"""


def test_the_configuration_block_of_the_issue_parses_as_written() -> None:
    [parsed] = registry().parse_configs(yaml.safe_load(ISSUE_CONFIGURATION))
    assert isinstance(parsed, LinearConfig)
    assert isinstance(registry().build(parsed), LinearConnector)
    assert parsed.teams == ["ENG"]
    assert parsed.subject.text == "team:{team_key}"
    assert parsed.overlap == timedelta(hours=2)
    assert parsed.start == datetime(2026, 1, 1, tzinfo=UTC)
    assert parsed.api_base == "https://api.linear.app"
    assert "lin_api_from_env" not in repr(parsed)


def test_defaults_are_every_team_one_subject_per_team_and_the_public_api() -> None:
    parsed = LinearConfig.model_validate({"name": "l", "token": TOKEN})
    assert parsed.teams is None
    assert parsed.subject.text == "team:{team_key}"
    assert parsed.api_base == "https://api.linear.app"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"teams": []}, "teams is empty"),
        ({"teams": ["eng"]}, "teams: 'eng' is not a Linear team key"),
        ({"subject": "team:{team_name}"}, "team_name"),
        ({"page_size": 500}, "page_size"),
        ({"token": None}, "token"),
    ],
)
def test_a_bad_setting_is_refused_naming_the_connector_the_file_and_the_field(
    fields: dict[str, Any], message: str
) -> None:
    raw = {"name": "eng-linear", "type": "linear", "token": TOKEN, **fields}
    with pytest.raises(ConnectorConfigError) as refused:
        registry().parse_configs([raw], source="config/memsync.yaml")
    [problem] = refused.value.problems
    assert problem.startswith("connector 'eng-linear' in config/memsync.yaml:")
    assert message in problem


def test_the_package_declares_the_type_as_an_entry_point_and_the_declaration_loads_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    declared = project["project"]["entry-points"]["memsync.connectors"]
    assert declared["linear"] == "memsync.connectors.linear.declaration:LINEAR"
    assert LINEAR.load() is LinearConnector


# -- conformance -------------------------------------------------------------------------


class TestLinearConformance(ConnectorConformanceSuite[HttpRecord]):
    @pytest.fixture(autouse=True)
    def _source(self, fake: FakeLinear) -> None:
        self.fake = fake
        issue = fake.add_issue("ENG", "Checkout times out", description="on big carts")
        other = fake.add_issue("OPS", "Pager rota")
        fake.add_comment(issue.id, "Reproduced.")
        fake.add_comment(other.id, "Who is on call?")
        self.recorded = [item for item in read(fake) if not isinstance(item, Tombstone)]
        fake.edit_issue(issue.id, title="Checkout times out on large carts")
        [comment] = [c for c in fake.comments.values() if c.issue is issue]
        fake.edit_comment(comment.id, "Reproduced with 250 items.")
        edited = {fake.issues[issue.id].id, comment.id}
        self.edited = [
            item
            for item in read(fake)
            if not isinstance(item, Tombstone) and item.payload()["id"] in edited
        ]

    def make_connector(self) -> LinearConnector:
        return connector(self.fake)

    def recorded_records(self) -> Sequence[HttpRecord]:
        return self.recorded

    def edited_records(self) -> Sequence[HttpRecord]:
        return self.edited

    def deletion_scenario(self) -> DeletionScenario:
        target = next(iter(self.fake.issues.values()))

        def remove() -> str:
            self.fake.archive_issue(target.id)
            return f"linear:{self.fake.workspace_id}:issue:{target.id}"

        return DeletionScenario(lambda: connector(self.fake), remove, EVERYTHING)


# -- keys, subjects, payloads ----------------------------------------------------------------


def test_keys_are_the_workspace_and_record_uuids_and_comments_lie_under_their_issue(
    fake: FakeLinear,
) -> None:
    issue = fake.add_issue("ENG", "Checkout times out")
    comment = fake.add_comment(issue.id, "Reproduced.")
    reader = connector(fake)
    prefix = f"linear:{fake.workspace_id}:issue:{issue.id}"
    assert keys(list(reader.fetch(EVERYTHING, None)), reader) == [
        prefix,
        f"{prefix}:comment:{comment.id}",
    ]


def test_an_issue_moved_to_another_team_keeps_its_key_and_moves_subject(
    fake: FakeLinear, clock: FakeClock
) -> None:
    issue = fake.add_issue("ENG", "Checkout times out")
    fake.add_comment(issue.id, "Reproduced.")
    store = SimulatedIngest()
    first = sync(connector(fake), store, None, NOW)
    clock.advance(timedelta(minutes=5))
    fake.move_issue(issue.id, "OPS")
    moved = list(connector(fake).fetch(EVERYTHING, None))
    outcomes = store.sync(connector(fake), iter(moved))

    assert first == {"created": 2}
    # Both are revisions that move them: the issue's identifier, team and subject
    # changed, and the comment, read again, follows its issue to the new subject.
    assert outcomes == {"revised": 2}
    drafts = [connector(fake).to_episode(item) for item in moved]
    assert {draft.subject_id for draft in drafts} == {"team:OPS"}
    assert drafts[0].payload["identifier"] == "OPS-1"
    assert drafts[0].idempotency_key == f"linear:{fake.workspace_id}:issue:{issue.id}"


def test_the_subject_may_name_the_issue_identifier_or_the_project(fake: FakeLinear) -> None:
    issue = fake.add_issue("ENG", "Checkout", project_id="p-1")
    fake.add_comment(issue.id, "Reproduced.")
    by_issue = connector(fake, subject="issue:{issue_identifier}")
    by_project = connector(fake, subject="project:{project_id}")
    records = list(by_issue.fetch(EVERYTHING, None))
    assert {by_issue.to_episode(r).subject_id for r in records} == {"issue:ENG-1"}
    assert {by_project.to_episode(r).subject_id for r in records} == {"project:p-1"}


def test_payloads_leave_out_what_moves_without_an_edit(fake: FakeLinear) -> None:
    issue = fake.add_issue("ENG", "Checkout")
    fake.add_comment(issue.id, "Reproduced.")
    issue_record, comment_record = read(fake)
    assert not isinstance(issue_record, Tombstone)
    assert not isinstance(comment_record, Tombstone)
    assert "updatedAt" not in issue_record.payload()
    assert issue_record.payload()["labels"] == {"nodes": [{"name": "Bug"}, {"name": "Performance"}]}
    # The comment's issue (identifier, team, archive state) is the issue's, not the
    # comment's: moving the issue does not revise its comments.
    assert set(comment_record.payload()) == {
        "id",
        "issueId",
        "parentId",
        "body",
        "user",
        "createdAt",
        "editedAt",
        "archivedAt",
    }


# -- what is read ------------------------------------------------------------------------


def test_only_the_configured_teams_are_read(fake: FakeLinear) -> None:
    eng = fake.add_issue("ENG", "Checkout")
    ops = fake.add_issue("OPS", "Pager")
    fake.add_comment(eng.id, "eng comment")
    fake.add_comment(ops.id, "ops comment")
    items = read(fake, teams=["ENG"])
    assert {item.subject["team_key"] for item in items if not isinstance(item, Tombstone)} == {
        "ENG"
    }
    assert len(items) == 2


def test_the_window_is_sent_as_an_archived_at_filter_then_an_updated_at_filter(
    fake: FakeLinear, clock: FakeClock
) -> None:
    fake.add_issue("ENG", "old")
    clock.advance(timedelta(hours=3))
    new = fake.add_issue("ENG", "new")
    window = Window(clock.now() - timedelta(hours=1), clock.now())
    items = read(fake, window)

    assert [item.data["id"] for item in items if not isinstance(item, Tombstone)] == [new.id]
    span = {"gte": "2026-02-28T14:00:00Z", "lte": "2026-02-28T15:00:00Z"}
    issues = [json.loads(r.body) for r in fake.requests if b"MemsyncIssues" in r.body]
    assert [body["variables"]["filter"] for body in issues] == [
        {"archivedAt": span},
        {"updatedAt": span},
    ]
    assert all("includeArchived: true" in body["query"] for body in issues)
    assert fake.requests[-1].headers["authorization"] == TOKEN


def test_a_window_that_fits_one_page_costs_one_request_per_stream(fake: FakeLinear) -> None:
    issue = fake.add_issue("ENG", "Checkout")
    fake.add_comment(issue.id, "Reproduced.")
    read(fake, page_size=3)
    # For each stream, the archived ones, then the window in one page.
    assert fake.list_requests() == 4


def test_a_window_larger_than_a_page_is_walked_oldest_first_reading_each_issue_once(
    fake: FakeLinear, clock: FakeClock
) -> None:
    for number in range(20):
        clock.advance(timedelta(minutes=7 * number))
        fake.add_issue("ENG", f"issue {number}")
    reader = connector(fake, page_size=3, start="2026-02-20")
    items = list(reader.fetch(EVERYTHING, None))
    issues = [item for item in items if not isinstance(item, Tombstone)]

    assert len(issues) == 20
    assert len({item.data["id"] for item in issues}) == 20
    positions = [item.position for item in issues]
    assert positions == sorted(positions)
    # Nothing was handed out before a position it lies before: a read from any record's
    # position finds every record not handed out yet.
    for index, item in enumerate(issues):
        assert all(updated(later) >= item.position for later in issues[index:])


def test_an_issue_edited_while_pages_are_read_shifts_no_other_issue_out_and_comes_next_run(
    fake: FakeLinear, clock: FakeClock
) -> None:
    issues = []
    for number in range(9):
        clock.advance(timedelta(seconds=1))
        issues.append(fake.add_issue("ENG", f"issue {number}"))
    end = clock.now()
    # After the archived issues (none) and the walk's first page (the newest: issues 8,
    # 7, 6), issue 5 is edited after the run's start: it leaves its place for the head
    # of the list, past the window's end.
    fake.between_pages(
        2, lambda: fake.edit_issue(issues[5].id, title="edited", at=end + timedelta(seconds=5))
    )
    first = read(fake, Window(None, end), page_size=3)
    assert fake.issues[issues[5].id].title == "edited"
    second = read(fake, Window(end - timedelta(hours=2), end + timedelta(minutes=1)), page_size=3)

    read_first = {item.data["id"] for item in first if not isinstance(item, Tombstone)}
    assert read_first == {issue.id for issue in issues} - {issues[5].id}
    edited = [
        item
        for item in second
        if not isinstance(item, Tombstone) and item.data["id"] == issues[5].id
    ]
    assert [item.payload()["title"] for item in edited] == ["edited"]


@settings(max_examples=20, deadline=None)
@given(
    updates=st.lists(st.integers(min_value=0, max_value=5), min_size=0, max_size=25),
    page_size=st.integers(min_value=1, max_value=6),
)
def test_one_read_yields_every_issue_once_whatever_the_pages_and_ties(
    updates: list[int], page_size: int
) -> None:
    # Many issues share an updatedAt (ties): the cursor still hands each out once.
    with FakeLinear(token=TOKEN) as server:
        server.add_team("ENG")
        made = [
            server.add_issue("ENG", f"i{n}", at=NOW - timedelta(seconds=second))
            for n, second in enumerate(updates)
        ]
        items = read(server, page_size=page_size)
    ids = [item.data["id"] for item in items if not isinstance(item, Tombstone)]
    assert sorted(ids) == sorted(issue.id for issue in made)


# -- edits and deletions ---------------------------------------------------------------


def test_an_edited_comment_is_a_revision_and_an_unchanged_re_read_stores_nothing(
    fake: FakeLinear, clock: FakeClock
) -> None:
    issue = fake.add_issue("ENG", "Checkout")
    comment = fake.add_comment(issue.id, "Reproduced.")
    store = SimulatedIngest()
    first = sync(connector(fake), store, None, NOW)
    again = sync(connector(fake), store, None, NOW)
    clock.advance(timedelta(minutes=1))
    fake.edit_comment(comment.id, "Reproduced with 250 items.")
    edited = sync(connector(fake), store, None, NOW)
    assert (first, again, edited) == (
        {"created": 2},
        {"duplicate": 2},
        {"duplicate": 1, "revised": 1},
    )


@pytest.mark.parametrize(
    ("archive", "touch"),
    [("archive", True), ("archive", False), ("trash", True)],
    ids=["archived", "archived-without-update", "trashed"],
)
def test_an_archived_or_trashed_issue_is_a_tombstone_covering_its_comments(
    fake: FakeLinear, clock: FakeClock, archive: str, touch: bool
) -> None:
    issue = fake.add_issue("ENG", "Checkout")
    kept = fake.add_issue("ENG", "Pager")
    fake.add_comment(issue.id, "Reproduced.")
    fake.add_comment(kept.id, "Fine.")
    store = SimulatedIngest()
    sync(connector(fake), store, None, NOW)
    clock.advance(timedelta(minutes=1))
    window_start = clock.now()
    fake.archive_issue(issue.id, trash=archive == "trash", touch=touch)
    items = read(fake, Window(window_start, NOW))
    outcomes = store.sync(connector(fake), iter(items))

    prefix = f"linear:{fake.workspace_id}:issue:{issue.id}"
    assert Tombstone(prefix, with_children=True) in items
    assert outcomes == {"tombstoned": 2}
    assert {key for key in store.deleted} == {k for k in store.stored if k.startswith(prefix)}


def test_a_comment_of_an_archived_issue_read_later_stays_deleted(
    fake: FakeLinear, clock: FakeClock
) -> None:
    issue = fake.add_issue("ENG", "Checkout")
    comment = fake.add_comment(issue.id, "Reproduced.")
    store = SimulatedIngest()
    sync(connector(fake), store, None, NOW)
    fake.archive_issue(issue.id)
    clock.advance(timedelta(minutes=1))
    fake.edit_comment(comment.id, "edited after the archive")
    sync(connector(fake), store, None, NOW)
    assert store.deleted == set(store.stored)


def test_an_archived_comment_is_a_tombstone_and_a_deleted_one_is_not_seen(
    fake: FakeLinear,
) -> None:
    issue = fake.add_issue("ENG", "Checkout")
    archived = fake.add_comment(issue.id, "archived later")
    deleted = fake.add_comment(issue.id, "deleted later")
    store = SimulatedIngest()
    sync(connector(fake), store, None, NOW)
    fake.archive_comment(archived.id)
    fake.delete_comment(deleted.id)
    outcomes = sync(connector(fake), store, None, NOW)
    prefix = f"linear:{fake.workspace_id}:issue:{issue.id}"
    assert outcomes == {"duplicate": 1, "tombstoned": 1}
    assert store.deleted == {f"{prefix}:comment:{archived.id}"}


# -- rate limits and errors ------------------------------------------------------------------


def test_a_ratelimited_error_with_http_400_waits_until_the_reset_of_the_exhausted_budget(
    fake: FakeLinear, clock: FakeClock
) -> None:
    fake.add_issue("ENG", "Checkout")
    fake.script_rate_limit(2)
    reader = connector(fake, clock)
    items = list(reader.fetch(EVERYTHING, None))
    assert len(items) == 1
    # The fake resets 60 s after the refusal, in epoch milliseconds.
    assert reader.retrier.waits == [pytest.approx(60, abs=1), pytest.approx(60, abs=1)]


def test_an_http_429_waits_retry_after(fake: FakeLinear) -> None:
    fake.add_issue("ENG", "Checkout")
    fake.script_rate_limit(1, status=429, retry_after=7)
    reader = connector(fake)
    assert len(list(reader.fetch(EVERYTHING, None))) == 1
    assert reader.retrier.waits == [7]


def test_a_rate_limit_storm_ends_the_read_after_the_caps_keeping_what_was_yielded(
    fake: FakeLinear, clock: FakeClock
) -> None:
    for number in range(5):
        clock.advance(timedelta(seconds=1))
        fake.add_issue("ENG", f"issue {number}")
    # The archived issues and one page of two issues; then every request is refused.
    fake.limit_budget(2)
    yielded: list[object] = []
    with pytest.raises(RateLimitExhausted, match="RATELIMITED"):
        yielded.extend(connector(fake, page_size=2).fetch(EVERYTHING, None))
    assert len(yielded) == 2


def test_refused_credentials_stop_the_run_without_showing_the_key(fake: FakeLinear) -> None:
    reader = connector(fake, token="lin_api_wrong")
    with pytest.raises(StopRun, match="Authentication required") as stopped:
        list(reader.fetch(EVERYTHING, None))
    assert "lin_api_wrong" not in str(stopped.value)
    with pytest.raises(StopRun):  # the same path answers `memsync check`
        reader.check(NOW)


def test_check_reaches_the_source(fake: FakeLinear) -> None:
    assert connector(fake).check(NOW).startswith("reached")


def _through(handler: Any) -> LinearConnector:
    sleeper = FakeSleeper(FakeClock(NOW))
    return LinearConnector(
        config(base_url="https://linear.test", retry={"max_attempts": 2, "max_wait": "1m"}),
        transport=httpx.MockTransport(handler),
        sleeper=sleeper,
        clock=sleeper.clock,
    )


def _answering(answer: dict[str, Any]) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer)

    return handler


def test_a_page_that_says_there_is_more_without_a_new_cursor_stops_the_run() -> None:
    page = {"data": {"issues": {"nodes": [], "pageInfo": {"hasNextPage": True, "endCursor": None}}}}
    with pytest.raises(StopRun, match="hasNextPage without a new endCursor"):
        list(_through(_answering(page)).fetch(EVERYTHING, None))


def test_a_body_that_is_not_a_graphql_answer_stops_the_run_naming_base_url() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>sign in</html>")

    with pytest.raises(StopRun, match="Is base_url pointing at a Linear API"):
        list(_through(handler).fetch(EVERYTHING, None))


def test_another_graphql_error_stops_the_run_quoting_it() -> None:
    error = {
        "errors": [
            {
                "message": "Field 'x' is not defined",
                "extensions": {"code": "GRAPHQL_VALIDATION_FAILED"},
            }
        ]
    }
    with pytest.raises(StopRun, match="is not defined"):
        list(_through(_answering(error)).fetch(EVERYTHING, None))


def test_server_errors_are_retried_then_reported_as_retryable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, text="unavailable")

    with pytest.raises(RetryableError, match="HTTP 503"):
        list(_through(handler).fetch(EVERYTHING, None))


def test_the_wait_is_the_reset_of_the_exhausted_budget_in_epoch_milliseconds() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    reset = str(int((now.timestamp() + 90) * 1000))
    exhausted = {
        "X-RateLimit-Requests-Remaining": "0",
        "X-RateLimit-Requests-Reset": reset,
        "X-RateLimit-Complexity-Remaining": "1200",
        "X-RateLimit-Complexity-Reset": str(int((now.timestamp() + 3000) * 1000)),
    }
    assert retry_after_from_headers(exhausted, now) == pytest.approx(90)
    # A budget with some left says nothing about the wait; Retry-After comes first.
    assert (
        retry_after_from_headers({**exhausted, "x-ratelimit-requests-remaining": "3"}, now) is None
    )
    assert retry_after_from_headers({**exhausted, "Retry-After": "7"}, now) == 7
