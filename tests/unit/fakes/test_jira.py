"""The fake Jira answers as Atlassian documents (fixtures in memsync/connectors/fixtures/jira)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest

from memsync.connectors.fake_http import load_fixture
from memsync.connectors.jira.fake_api import FakeJira

SEARCH = "/rest/api/3/search/jql"
JQL = 'project in (ENG) AND updated >= "{since}" ORDER BY updated ASC, key ASC'


@pytest.fixture
def fake() -> Iterator[FakeJira]:
    with FakeJira(email="bot@acme.example", token="t", time_zone="Asia/Tokyo") as fake:
        yield fake


@pytest.fixture
def client(fake: FakeJira) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=fake.base_url, auth=("bot@acme.example", "t")) as client:
        yield client


def search(client: httpx.Client, since: str, **params: str) -> httpx.Response:
    return client.get(SEARCH, params={"jql": JQL.format(since=since), **params})


def test_search_pages_carry_a_token_except_the_last_and_render_only_the_asked_fields(
    fake: FakeJira, client: httpx.Client
) -> None:
    for n in range(3):
        fake.add_issue("ENG", f"Issue {n}")
    fake.add_issue("OPS", "elsewhere")

    first = search(client, "1970-01-01 09:00", maxResults="2", fields="summary,updated").json()
    token = first["nextPageToken"]
    last = search(client, "1970-01-01 09:00", maxResults="2", nextPageToken=token).json()

    assert first["isLast"] is False
    assert [i["key"] for i in first["issues"]] == ["ENG-1", "ENG-2"]
    assert set(first["issues"][0]["fields"]) == {"summary", "updated"}
    assert set(first["issues"][0]) == set(load_fixture("jira", "search_jql.json")["issues"][0])
    assert last["isLast"] is True
    assert "nextPageToken" not in last  # as documented: absent on the last page
    assert [i["key"] for i in last["issues"]] == ["ENG-3"]
    assert last["issues"][0]["fields"] == {}  # the default is id only


def test_jql_times_are_read_in_the_accounts_time_zone(fake: FakeJira, client: httpx.Client) -> None:
    fake.add_issue("ENG", "at 09:30 UTC", updated=datetime(2026, 1, 5, 9, 30, tzinfo=UTC))

    # 09:30 UTC is 18:30 in Tokyo.
    assert search(client, "2026-01-05 18:30").json()["issues"]
    assert not search(client, "2026-01-05 18:31").json()["issues"]


def test_comments_page_with_totals_and_a_deleted_issue_answers_404(
    fake: FakeJira, client: httpx.Client
) -> None:
    issue = fake.add_issue("ENG", "chatty")
    for n in range(3):
        fake.add_comment(issue.id, f"c{n}")

    page = client.get(f"/rest/api/3/issue/{issue.id}/comment", params={"maxResults": 2}).json()
    fake.delete_issue(issue.id)
    gone = client.get(f"/rest/api/3/issue/{issue.id}/comment")

    assert (page["startAt"], page["maxResults"], page["total"]) == (0, 2, 3)
    assert set(page["comments"][0]) == set(
        load_fixture("jira", "issue_comments.json")["comments"][0]
    )
    assert page["comments"][0]["body"]["type"] == "doc"
    assert gone.status_code == 404
    assert gone.json()["errorMessages"]


def test_wrong_credentials_unknown_jql_and_rate_limits_answer_as_jira_does(
    fake: FakeJira, client: httpx.Client
) -> None:
    fake.script_rate_limit(times=1, retry_after=12)

    limited = search(client, "2026-01-01 00:00")
    refused = httpx.get(f"{fake.base_url}{SEARCH}", auth=("bot@acme.example", "wrong"))
    bad_jql = client.get(SEARCH, params={"jql": "order by key"})

    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "12"
    assert limited.headers["ratelimit-reason"] == "jira-quota-based"
    assert refused.status_code == 401
    assert bad_jql.status_code == 400
    assert bad_jql.json()["errorMessages"][0].startswith("Error in the JQL Query")


def test_offset_tokens_shift_an_issue_out_when_one_before_it_is_edited() -> None:
    with FakeJira(email="b@a.c", token="t", offset_tokens=True) as fake:
        issues = [fake.add_issue("ENG", f"Issue {n}") for n in range(4)]
        with httpx.Client(base_url=fake.base_url, auth=("b@a.c", "t")) as client:
            first = search(client, "1970-01-01 00:00", maxResults="2").json()
            fake.edit_issue(issues[0].id, summary="edited")  # moves to the end
            token = first["nextPageToken"]
            second = search(client, "1970-01-01 00:00", maxResults="2", nextPageToken=token)

    keys = [i["key"] for i in first["issues"] + second.json()["issues"]]
    assert keys == ["ENG-1", "ENG-2", "ENG-4", "ENG-1"]  # ENG-3 slid onto page one: missed
