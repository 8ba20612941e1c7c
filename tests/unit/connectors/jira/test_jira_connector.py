"""The Jira connector against the fake Jira (``memsync.connectors.jira.fake_api``), which
answers in the shapes Atlassian documents (``memsync/connectors/fixtures/jira``)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.connectors import (
    ConnectorConfigError,
    Deletion,
    Listing,
    RateLimitExhausted,
    StopRun,
    Tombstone,
    Window,
)
from memsync.connectors.fake_http import RecordedRequest, load_fixture
from memsync.connectors.jira import JiraComment, JiraConfig, JiraConnector, JiraIssue, JiraRecord
from memsync.connectors.jira.connector import adf_text, jql_time
from memsync.connectors.jira.fake_api import DEFAULT_START, FakeJira
from memsync.connectors.registry import ConnectorRegistry
from memsync.connectors.testing import ConnectorConformanceSuite, DeletionScenario, SimulatedIngest
from memsync.episode import IngestStatus
from memsync.stopping import FakeSleeper

NOW = datetime(2026, 3, 1, tzinfo=UTC)
EVERYTHING = Window(start=None, end=NOW)


def config(fake: FakeJira, **fields: object) -> JiraConfig:
    return JiraConfig.model_validate(
        {
            "name": "eng-jira",
            "site": "acme",
            "base_url": fake.base_url,
            "email": "bot@acme.example",
            "token": "jira-token",
            "projects": ["ENG", "OPS"],
            "retry": {"max_attempts": 3, "max_wait": "5m"},
            **fields,
        }
    )


def connector(fake: FakeJira, *, max_waits: int | None = None, **fields: object) -> JiraConnector:
    sleeper = FakeSleeper(FakeClock(NOW), max_waits=max_waits)
    return JiraConnector(config(fake, **fields), sleeper=sleeper, clock=sleeper.clock)


def read(jira: JiraConnector, window: Window = EVERYTHING) -> list[JiraRecord | Deletion]:
    try:
        return list(jira.fetch(window, None))
    finally:
        jira.close()


def keys(items: Sequence[object]) -> list[str]:
    return [item.key() for item in items if isinstance(item, JiraIssue | JiraComment)]


@pytest.fixture
def fake() -> Iterator[FakeJira]:
    with FakeJira(time_zone="Australia/Sydney") as fake:
        yield fake


# -- conformance ------------------------------------------------------------------------------


class TestJiraConformance(ConnectorConformanceSuite[JiraRecord]):
    @pytest.fixture(autouse=True)
    def _site(self, fake: FakeJira) -> None:
        self.fake = fake
        issue = fake.add_issue("ENG", "Checkout fails", "Safari only")
        self.comment = fake.add_comment(issue.id, "Reproduced")
        fake.add_comment(issue.id, "Fixed in 4.2")
        other = fake.add_issue("OPS", "Rotate the keys")
        fake.add_comment(other.id, "Done")
        self.issue = issue

    def make_connector(self) -> JiraConnector:
        return connector(self.fake)

    def recorded_records(self) -> list[JiraRecord]:
        return [r for r in read(self.make_connector()) if isinstance(r, JiraIssue | JiraComment)]

    def edited_records(self) -> list[JiraRecord]:
        before = {key for key in keys(self.recorded_records())}
        self.fake.edit_issue(self.issue.id, summary="Checkout fails on Safari 17")
        self.fake.edit_comment(self.issue.id, self.comment.id, "Reproduced on 17.2")
        edited = [r for r in self.recorded_records() if r.key().endswith(("10000", "20000"))]
        assert {r.key() for r in edited} <= before
        return edited

    def deletion_scenario(self) -> DeletionScenario:
        def remove() -> str:
            self.fake.delete_issue(self.issue.id)
            return f"jira:acme:issue:{self.issue.id}"

        return DeletionScenario(read=self.make_connector, remove=remove, window=EVERYTHING)


# -- configuration ----------------------------------------------------------------------------


def registry() -> ConnectorRegistry:
    jira = EntryPoint(
        name="jira", value="memsync.connectors.jira.declaration:JIRA", group="memsync.connectors"
    )
    return ConnectorRegistry.from_entry_points([jira])


def test_the_configuration_of_the_issue_parses_with_its_defaults() -> None:
    (parsed,) = registry().parse_configs(
        [
            {
                "name": "eng-jira",
                "type": "jira",
                "tenant": "default",
                "site": "acme",
                "email": "bot@acme.example",
                "token": "s3cret-jira",
                "projects": ["ENG", "OPS"],
                "subject": "project:{project_key}",
                "overlap": "2h",
                "start": "2026-01-01",
            }
        ],
        source="memsync.yaml",
    )
    assert isinstance(parsed, JiraConfig)
    assert parsed.api_base == "https://acme.atlassian.net"
    assert parsed.start == datetime(2026, 1, 1, tzinfo=UTC)
    assert parsed.overlap == timedelta(hours=2)
    assert "s3cret-jira" not in repr(parsed)
    unset = JiraConfig(name="j", site="acme", email="bot@acme.example", token="t")
    assert str(unset.subject) == "project:{project_key}"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"projects": ["ENG"], "jql": "labels = memory"},
            "projects and jql: give one of them",
        ),
        ({"jql": "project = ENG ORDER BY created"}, "jql must not contain ORDER BY"),
        ({"projects": ["eng"]}, "projects: 'eng' is not a Jira project key"),
        ({"subject": "team:{team_key}"}, "team_key"),
        ({"site": "Acme Corp"}, "site"),
    ],
)
def test_a_bad_configuration_is_refused_naming_the_connector_file_and_field(
    fields: dict[str, object], message: str
) -> None:
    entry = {"name": "eng-jira", "type": "jira", "site": "acme", "email": "b@a.c", "token": "t"}
    with pytest.raises(ConnectorConfigError) as raised:
        registry().parse_configs([{**entry, **fields}], source="config/memsync.yaml")
    problems = "\n".join(raised.value.problems)
    assert "connector 'eng-jira' in config/memsync.yaml" in problems
    assert message in problems


# -- reading ----------------------------------------------------------------------------------


def test_issues_are_read_in_update_order_with_their_comments_and_keyed_by_ids(
    fake: FakeJira,
) -> None:
    first = fake.add_issue("ENG", "One")
    second = fake.add_issue("OPS", "Two")
    comment = fake.add_comment(first.id, "a comment")  # bumps ENG-1 after OPS-1
    fake.add_issue("WEB", "not configured")

    items = read(connector(fake))

    assert keys(items) == [
        f"jira:acme:issue:{second.id}",
        f"jira:acme:issue:{first.id}",
        f"jira:acme:issue:{first.id}:comment:{comment.id}",
    ]
    jql = fake.requests[1].param("jql")
    assert jql == (
        'project in (ENG, OPS) AND updated >= "1970-01-01 10:00" ORDER BY updated ASC, key ASC'
    )
    assert fake.requests[1].param("fields", "").startswith("summary,")


def test_the_search_time_is_written_in_the_accounts_time_zone_to_the_minute(
    fake: FakeJira,
) -> None:
    start = datetime(2026, 1, 5, 9, 30, 59, tzinfo=UTC)  # 20:30 in Sydney (summer time)

    read(connector(fake), Window(start=start, end=NOW))

    (search,) = [r for r in fake.requests if r.path.endswith("/search/jql")]
    assert '"2026-01-05 20:30"' in (search.param("jql") or "")


@pytest.mark.parametrize(
    ("start", "written"),
    [
        # Sydney leaves summer time on 2026-04-05 at 03:00, back to 02:00: 02:30 occurs
        # twice. Jira may read "02:30" as either; the first is written an hour earlier.
        (datetime(2026, 4, 4, 15, 30, tzinfo=UTC), "2026-04-05 01:30"),
        (datetime(2026, 4, 4, 16, 30, tzinfo=UTC), "2026-04-05 02:30"),
    ],
    ids=["first 02:30", "second 02:30"],
)
def test_an_hour_that_occurs_twice_is_never_read_after_the_start(
    fake: FakeJira, start: datetime, written: str
) -> None:
    read(connector(fake), Window(start=start, end=NOW + timedelta(days=60)))

    (search,) = [r for r in fake.requests if r.path.endswith("/search/jql")]
    assert f'"{written}"' in (search.param("jql") or "")


def test_a_configured_jql_scopes_the_search(fake: FakeJira) -> None:
    fake.add_issue("ENG", "kept", labels=("memory",))
    fake.add_issue("ENG", "not labelled")

    items = read(connector(fake, projects=[], jql="project = ENG AND labels = memory"))

    assert [i.payload()["title"] for i in items if isinstance(i, JiraIssue)] == ["kept"]


def test_issues_updated_after_the_window_are_left_for_the_next_run(fake: FakeJira) -> None:
    fake.add_issue("ENG", "in", updated=NOW - timedelta(minutes=1))
    fake.add_issue("ENG", "out", updated=NOW + timedelta(minutes=1))

    items = read(connector(fake), Window(start=NOW - timedelta(hours=1), end=NOW))

    assert [i.payload()["title"] for i in items if isinstance(i, JiraIssue)] == ["in"]


def test_pages_start_after_the_last_issue_read_so_an_edit_shifts_nothing_out() -> None:
    with FakeJira(offset_tokens=True) as shifting:
        issues = [shifting.add_issue("ENG", f"Issue {n}") for n in range(12)]
        edited: list[int] = []

        def edit_the_oldest_unedited(request: object) -> None:
            if len(edited) < 3:
                shifting.edit_issue(issues[len(edited)].id, summary="edited")
                edited.append(issues[len(edited)].id)

        shifting.after_request(edit_the_oldest_unedited)
        items = read(connector(shifting, page_size=4, include_comments=False))

    read_ids = {i.issue.id for i in items if isinstance(i, JiraIssue)}
    assert read_ids == {str(issue.id) for issue in issues}


def test_one_minute_holding_more_than_a_page_is_paged_by_its_token(fake: FakeJira) -> None:
    minute = datetime(2026, 1, 6, 8, 0, tzinfo=UTC)
    for n in range(7):
        fake.add_issue("ENG", f"bulk {n}", updated=minute + timedelta(seconds=n))

    items = read(connector(fake, page_size=3, include_comments=False))

    assert len({i.issue.id for i in items if isinstance(i, JiraIssue)}) == 7
    tokens = [r.param("nextPageToken") for r in fake.requests if r.path.endswith("/jql")]
    # The first page ends in another minute than it started: the next asks from there;
    # from then on the minute holds whole pages, which only the token gets past.
    assert tokens[:2] == [None, None]
    assert all(tokens[2:])


def test_comments_are_paged_and_listed_per_issue(fake: FakeJira) -> None:
    issue = fake.add_issue("ENG", "chatty")
    comments = [fake.add_comment(issue.id, f"c{n}") for n in range(5)]

    items = read(connector(fake, page_size=2))

    listings = [i for i in items if isinstance(i, Listing)]
    comment_listing = next(i for i in listings if i.scope.prefix.endswith(":comment:"))
    assert comment_listing.present == {
        f"jira:acme:issue:{issue.id}:comment:{c.id}" for c in comments
    }
    starts = [r.param("startAt") for r in fake.requests if r.path.endswith("/comment")]
    assert starts == ["0", "2", "4"]


def test_a_deleted_comment_and_a_deleted_issue_are_tombstoned(fake: FakeJira) -> None:
    kept = fake.add_issue("ENG", "kept")
    gone = fake.add_issue("ENG", "gone")
    deleted_comment = fake.add_comment(kept.id, "spam")
    fake.add_comment(gone.id, "about to go")
    store = SimulatedIngest()
    jira = connector(fake)
    store.sync(jira, jira.fetch(EVERYTHING, None))

    fake.delete_comment(kept.id, deleted_comment.id)
    fake.delete_issue(gone.id)
    outcome = store.sync(jira, jira.fetch(EVERYTHING, None))

    assert outcome[IngestStatus.TOMBSTONED] == 3
    assert store.deleted == {
        f"jira:acme:issue:{kept.id}:comment:{deleted_comment.id}",
        f"jira:acme:issue:{gone.id}",
        f"jira:acme:issue:{gone.id}:comment:{deleted_comment.id + 1}",
    }


def test_an_incremental_read_lists_no_issues(fake: FakeJira) -> None:
    fake.add_issue("ENG", "one")

    items = read(connector(fake), Window(start=DEFAULT_START, end=NOW))

    assert not [i for i in items if isinstance(i, Listing) and i.scope.prefix.endswith("issue:")]


def test_an_issue_gone_while_it_is_read_is_a_tombstone_with_its_comments(fake: FakeJira) -> None:
    issue = fake.add_issue("ENG", "short-lived")

    deleted: list[int] = []

    def delete_after_the_search(request: RecordedRequest) -> None:
        if request.path.endswith("/search/jql") and not deleted:
            fake.delete_issue(issue.id)
            deleted.append(issue.id)

    fake.after_request(delete_after_the_search)
    items = read(connector(fake))

    assert Tombstone(f"jira:acme:issue:{issue.id}", with_children=True) in items


def test_a_moved_issue_keeps_its_keys_and_moves_subject(fake: FakeJira) -> None:
    issue = fake.add_issue("ENG", "wandering")
    fake.add_comment(issue.id, "hi")
    jira = connector(fake)
    store = SimulatedIngest()
    store.sync(jira, jira.fetch(EVERYTHING, None))

    new_key = fake.move_issue(issue.id, "OPS")
    outcome = store.sync(jira, jira.fetch(EVERYTHING, None))

    assert new_key == "OPS-1"
    assert outcome == {IngestStatus.REVISED: 2}
    assert {record.subject_id for record in store.stored.values()} == {"project:OPS"}


# -- rate limits and errors -------------------------------------------------------------------


def test_a_rate_limit_is_waited_out_per_retry_after(fake: FakeJira) -> None:
    fake.add_issue("ENG", "one")
    fake.script_rate_limit(times=2, retry_after=7, path="/rest/api/3/search/jql")
    jira = connector(fake)

    items = read(jira)

    assert len(keys(items)) == 1
    assert isinstance(jira.sleeper, FakeSleeper)
    assert jira.sleeper.waits == [7.0, 7.0]


def test_a_rate_limit_storm_ends_the_fetch_with_what_was_read_kept(fake: FakeJira) -> None:
    for n in range(3):
        fake.add_issue("ENG", f"Issue {n}")
    fake.limit_budget(3)  # myself, the search, the first issue's comments

    items: list[object] = []
    with pytest.raises(RateLimitExhausted):
        items.extend(connector(fake).fetch(EVERYTHING, None))

    # The second issue went out before its comments were asked for: its position is read
    # again by the next run (windows are inclusive), comments included.
    assert len(keys(items)) == 2


@pytest.mark.parametrize(
    ("token", "expected"),
    [("wrong", "HTTP 401: Jira refused the credentials of bot@acme.example")],
)
def test_refused_credentials_stop_the_run(fake: FakeJira, token: str, expected: str) -> None:
    with pytest.raises(StopRun, match=expected):
        read(connector(fake, token=token))


def test_a_jql_jira_refuses_stops_the_run_quoting_jira(fake: FakeJira) -> None:
    with pytest.raises(StopRun, match=r"HTTP 400 .*Error in the JQL Query"):
        read(connector(fake, projects=[], jql="assignee was currentUser()"))


def test_check_names_the_account_and_its_time_zone(fake: FakeJira) -> None:
    assert connector(fake).check(NOW) == "reached as Mia Krystof (time zone Australia/Sydney)"


def test_the_token_is_scrubbed_in_every_form_it_is_sent(fake: FakeJira) -> None:
    secrets = connector(fake).secret_values()
    assert "jira-token" in secrets
    assert "bot@acme.example:jira-token" in secrets


# -- properties -------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(
    updates=st.lists(st.integers(min_value=0, max_value=240), min_size=1, max_size=25),
    page_size=st.integers(min_value=1, max_value=6),
)
def test_any_pages_read_every_issue_once_and_a_resync_stores_nothing(
    updates: list[int], page_size: int
) -> None:
    with FakeJira(time_zone="America/New_York", offset_tokens=True) as fake:
        for n, seconds in enumerate(updates):
            fake.add_issue("ENG", f"Issue {n}", updated=DEFAULT_START + timedelta(seconds=seconds))
        jira = connector(fake, page_size=page_size, include_comments=False)
        store = SimulatedIngest()
        first = store.sync(jira, jira.fetch(EVERYTHING, None))
        again = store.sync(jira, jira.fetch(EVERYTHING, None))

    assert first == {IngestStatus.CREATED: len(updates)}
    assert again == {IngestStatus.DUPLICATE: len(updates)}


def test_adf_bodies_become_the_plain_text_compilers_read() -> None:
    document = load_fixture("jira", "issue_get.json")["fields"]["description"]
    document["content"].append(
        {
            "type": "paragraph",
            "content": [
                {"type": "mention", "attrs": {"id": "5b10", "text": "@Mia Krystof"}},
                {"type": "text", "text": " please look"},
                {"type": "hardBreak"},
                {"type": "text", "text": "thanks"},
            ],
        }
    )

    assert adf_text(document) == "Main order flow broken\n@Mia Krystof please look\nthanks"
    assert adf_text("plain") == "plain"
    assert adf_text(None) is None


def test_the_declaration_builds_the_connector_without_importing_it_before() -> None:
    jira = registry()
    (parsed,) = jira.parse_configs(
        [{"name": "j", "type": "jira", "site": "acme", "email": "b@a.c", "token": "t"}],
        source="memsync.yaml",
    )

    built = jira.build(parsed)

    assert isinstance(built, JiraConnector)
    assert built.example_key == "jira:acme:issue:10002:comment:10000"
    assert [stream.name for stream in built.streams()] == ["issues"]


ISSUE_29_CONFIGURATION = """\
connectors:
  - name: eng-jira
    type: jira
    tenant: default
    site: acme                        # https://acme.atlassian.net
    # base_url: http://127.0.0.1:8098 # a fake server or gateway; overrides site
    email: bot@acme.example
    token: ${JIRA_API_TOKEN}
    projects: [ENG, OPS]              # or jql: "project = ENG AND labels = memory"
    subject: "project:{project_key}"  # also: issue_key, reporter_id, assignee_id
    overlap: 2h
    start: 2026-01-01
"""


def test_the_configuration_block_of_issue_29_loads_as_written(tmp_path: Path) -> None:
    from memsync.runtime.app.config import load_settings

    path = tmp_path / "memsync.yaml"
    path.write_text(ISSUE_29_CONFIGURATION, encoding="utf-8")

    def check(raw: list[Any], label: str, unknown: Mapping[int, Collection[str]]) -> list[str]:
        try:
            registry().parse_configs(raw, source=label, unknown=unknown)
        except ConnectorConfigError as error:
            return error.problems
        return []

    settings = load_settings(path, environ={"JIRA_API_TOKEN": "from-env"}, check_connectors=check)
    (parsed,) = registry().parse_configs(settings.connectors, source=str(path))

    assert isinstance(parsed, JiraConfig)
    assert (parsed.site, parsed.email, parsed.projects) == (
        "acme",
        "bot@acme.example",
        ("ENG", "OPS"),
    )
    assert parsed.token.get_secret_value() == "from-env"
    assert str(parsed.subject) == "project:{project_key}"
    assert parsed.api_base == "https://acme.atlassian.net"


def test_a_token_written_in_the_file_is_refused(tmp_path: Path) -> None:
    from memsync.runtime.app.config import ConfigError, load_settings

    path = tmp_path / "memsync.yaml"
    literal = ISSUE_29_CONFIGURATION.replace("${JIRA_API_TOKEN}", "ATATT3xFfGF0-literal")
    path.write_text(literal, encoding="utf-8")

    with pytest.raises(ConfigError, match=r"connectors\[0\]\.token"):
        load_settings(path, environ={})


ZONES = [
    "UTC",
    "Australia/Sydney",
    "America/New_York",
    "Europe/Lisbon",
    "Asia/Kolkata",  # +05:30
    "Pacific/Chatham",  # +12:45, summer time too
    "Australia/Lord_Howe",  # summer time of half an hour
]


@settings(max_examples=300, deadline=None)
# The hours that occur twice, which random moments seldom hit: Sydney's 02:00-03:00 and
# Lord Howe's 01:30-02:00 on 2026-04-05 (first and second time), New York's 01:00-02:00.
@example(moment=datetime(2026, 4, 4, 15, 30, tzinfo=UTC), zone="Australia/Sydney")
@example(moment=datetime(2026, 4, 4, 16, 30, tzinfo=UTC), zone="Australia/Sydney")
@example(moment=datetime(2026, 4, 4, 14, 45, tzinfo=UTC), zone="Australia/Lord_Howe")
@example(moment=datetime(2026, 4, 4, 15, 15, tzinfo=UTC), zone="Australia/Lord_Howe")
@example(moment=datetime(2026, 11, 1, 5, 30, tzinfo=UTC), zone="America/New_York")
@example(moment=datetime(2026, 11, 1, 6, 30, tzinfo=UTC), zone="America/New_York")
@given(
    moment=st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
    ),
    zone=st.sampled_from(ZONES),
)
def test_the_jql_time_never_reads_later_than_the_moment_nor_more_than_an_hour_earlier(
    moment: datetime, zone: str
) -> None:
    written = datetime.strptime(jql_time(moment, ZoneInfo(zone)), "%Y-%m-%d %H:%M")
    # However Jira resolves a local time that occurs twice (or not at all), every reading
    # of it is at or before the moment, so the window loses nothing.
    readings = [written.replace(tzinfo=ZoneInfo(zone), fold=fold) for fold in (0, 1)]
    assert all(reading <= moment for reading in readings)
    assert moment - min(readings) < timedelta(hours=1, minutes=1)
