"""PyGithub (requests) against the fake GitHub server.

These tests pin down both what the fake serves and how the real library reacts to
it, in particular to rate-limit responses (see the docstring of
memsync.connectors.github.fake_api).
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import requests
from github import Auth, Github, GithubException, GithubRetry
from github.GithubException import (
    BadCredentialsException,
    RateLimitExceededException,
    UnknownObjectException,
)

from memsync.connectors.fake_http import load_fixture
from memsync.connectors.github.fake_api import FakeGitHub

T0 = datetime(2024, 3, 1, tzinfo=UTC)
AUTH = {"Authorization": "token t"}


def client(fake: FakeGitHub, *, per_page: int = 30, retry: Any = None) -> Github:
    """How a connector should build PyGithub: no library retries, no throttling sleeps."""
    return Github(
        base_url=fake.base_url,
        auth=Auth.Token("t"),
        per_page=per_page,
        retry=retry,
        seconds_between_requests=None,
        seconds_between_writes=None,
    )


def add_issues(fake: FakeGitHub, count: int, *, owner: str = "acme", repo: str = "api") -> None:
    for n in range(1, count + 1):
        fake.add_issue(owner, repo, n, f"issue {n}", f"body {n}", T0 + timedelta(minutes=n))


# -- listing and pagination ------------------------------------------------------------


def test_issues_since_are_listed_across_pages_following_the_link_header(
    fake_github: FakeGitHub,
) -> None:
    add_issues(fake_github, 250)
    repo = client(fake_github, per_page=100).get_repo("acme/api")
    since = T0 + timedelta(minutes=20)

    issues = list(repo.get_issues(state="all", sort="updated", direction="asc", since=since))

    assert [i.number for i in issues] == list(range(20, 251))  # since is inclusive
    repo_id = fake_github.repo_id("acme", "api")
    pages = [r for r in fake_github.requests if r.path.endswith("/issues")]
    assert [(r.path, r.param("page")) for r in pages] == [
        ("/repos/acme/api/issues", None),
        (f"/repositories/{repo_id}/issues", "2"),
        (f"/repositories/{repo_id}/issues", "3"),
    ]
    assert all(r.param("since") == "2024-03-01T00:20:00Z" for r in pages)


def test_link_headers_are_formatted_exactly_like_the_recorded_github_sequence() -> None:
    recorded = load_fixture("github", "headers.json")["link"]["recorded_sequence_per_page_3"]
    with FakeGitHub() as fake:
        fake.add_repo("octokit-fixture-org", "paginate-issues", id=1000)
        add_issues(fake, 15, owner="octokit-fixture-org", repo="paginate-issues")
        url: str | None = f"{fake.base_url}/repos/octokit-fixture-org/paginate-issues/issues"
        params: dict[str, str] | None = {"per_page": "3"}
        seen = []
        while url is not None:
            response = requests.get(url, params=params, timeout=5)
            seen.append(response.headers["Link"])
            url, params = response.links.get("next", {}).get("url"), None

    expected = [page["link"].replace("https://api.github.com", fake.base_url) for page in recorded]
    assert seen == expected


def test_per_page_is_capped_at_100(fake_github: FakeGitHub) -> None:
    add_issues(fake_github, 150)
    response = requests.get(
        f"{fake_github.base_url}/repos/acme/api/issues",
        params={"per_page": "500"},
        headers={"Authorization": "token t"},
        timeout=5,
    )
    assert len(response.json()) == 100
    assert 'page=2>; rel="next"' in response.headers["Link"]


def test_default_listing_is_open_issues_newest_first(fake_github: FakeGitHub) -> None:
    add_issues(fake_github, 3)
    fake_github.edit_issue("acme", "api", 2, state="closed")

    numbers = [i.number for i in client(fake_github).get_repo("acme/api").get_issues()]

    assert numbers == [3, 1]


def test_an_edited_issue_reappears_in_a_later_since_listing(fake_github: FakeGitHub) -> None:
    add_issues(fake_github, 5)
    repo = client(fake_github).get_repo("acme/api")
    first = list(repo.get_issues(state="all", sort="updated", direction="asc", since=T0))
    cursor = max(i.updated_at for i in first)

    edited_at = cursor + timedelta(hours=1)
    fake_github.edit_issue("acme", "api", 2, title="renamed", updated_at=edited_at)
    later = list(repo.get_issues(state="all", sort="updated", direction="asc", since=cursor))

    assert [(i.number, i.title) for i in later] == [(5, "issue 5"), (2, "renamed")]
    assert later[1].updated_at == edited_at


def test_pull_requests_are_listed_as_issues_with_a_pull_request_key(
    fake_github: FakeGitHub,
) -> None:
    fake_github.add_issue("acme", "api", 1, "a bug", updated_at=T0)
    fake_github.add_issue("acme", "api", 2, "a fix", updated_at=T0, is_pull_request=True)

    raw = requests.get(
        f"{fake_github.base_url}/repos/acme/api/issues",
        params={"state": "all"},
        headers={"Authorization": "token t"},
        timeout=5,
    ).json()
    by_number = {item["number"]: item for item in raw}

    assert "pull_request" not in by_number[1]
    assert by_number[2]["pull_request"]["url"] == f"{fake_github.base_url}/repos/acme/api/pulls/2"
    assert by_number[1]["url"] == f"{fake_github.base_url}/repos/acme/api/issues/1"
    pulls = client(fake_github).get_repo("acme/api").get_pulls(state="all")
    assert [p.number for p in pulls] == [2]


def test_comments_events_and_reviews_through_pygithub(fake_github: FakeGitHub) -> None:
    fake_github.add_issue("acme", "api", 7, "flaky test", updated_at=T0)
    fake_github.add_issue("acme", "api", 8, "fix flake", updated_at=T0, is_pull_request=True)
    first = fake_github.add_comment("acme", "api", 7, "me too", created_at=T0 + timedelta(1))
    fake_github.add_comment("acme", "api", 8, "see #7", created_at=T0 + timedelta(2))
    fake_github.add_event("acme", "api", 7, "labeled", T0 + timedelta(3), label="bug")
    fake_github.add_event("acme", "api", 7, "closed", T0 + timedelta(4), actor="hubot")
    fake_github.add_review("acme", "api", 8, "APPROVED", "ship it", submitted_at=T0 + timedelta(5))
    fake_github.edit_comment(
        "acme", "api", first.id, "me too (edited)", updated_at=T0 + timedelta(6)
    )
    repo = client(fake_github).get_repo("acme/api")

    comments = repo.get_issues_comments(sort="updated", direction="asc", since=T0)
    assert [(c.body, c.issue_url.rsplit("/", 1)[1]) for c in comments] == [
        ("see #7", "8"),
        ("me too (edited)", "7"),
    ]
    issue = repo.get_issue(7)
    assert (issue.state, issue.closed_by.login, issue.comments) == ("closed", "hubot", 1)
    assert [label.name for label in issue.labels] == ["bug"]
    assert issue.updated_at == T0 + timedelta(4)
    assert [(e.event, e.actor.login) for e in issue.get_events()] == [
        ("labeled", "octocat"),
        ("closed", "hubot"),
    ]
    assert [(e.event, e.issue.number) for e in repo.get_issues_events()] == [
        ("closed", 7),
        ("labeled", 7),
    ]
    assert [c.body for c in repo.get_issue(8).get_comments()] == ["see #7"]
    reviews = repo.get_pull(8).get_reviews()
    assert [(r.state, r.body, r.submitted_at) for r in reviews] == [
        ("APPROVED", "ship it", T0 + timedelta(5))
    ]
    assert repo.get_issue(8).updated_at == T0 + timedelta(5)  # a review bumps the PR


def test_review_comments_through_pygithub_in_the_documented_shape(
    fake_github: FakeGitHub,
) -> None:
    fake_github.add_issue("acme", "api", 8, "fix flake", updated_at=T0, is_pull_request=True)
    first = fake_github.add_review_comment(
        "acme", "api", 8, "rename this", created_at=T0 + timedelta(1)
    )
    second = fake_github.add_review_comment(
        "acme", "api", 8, "and this", created_at=T0 + timedelta(2), in_reply_to=first.id
    )
    fake_github.edit_review_comment(
        "acme", "api", first.id, "rename this, please", updated_at=T0 + timedelta(3)
    )
    repo = client(fake_github).get_repo("acme/api")

    by_update = repo.get_pulls_comments(sort="updated", direction="asc", since=T0)
    assert [(c.body, c.pull_request_url.rsplit("/", 1)[1]) for c in by_update] == [
        ("and this", "8"),
        ("rename this, please", "8"),
    ]
    assert [c.id for c in repo.get_pulls_comments()] == [first.id, second.id]  # by id
    assert repo.get_issue(8).updated_at == T0 + timedelta(2)  # a review comment bumps it
    fixture = load_fixture("github", "pull_review_comments_list.json")[0]
    raw = requests.get(
        f"{fake_github.base_url}/repos/acme/api/pulls/comments", headers=AUTH, timeout=5
    )
    assert set(raw.json()[0]) == set(fixture) - {"in_reply_to_id"}  # optional, absent
    assert set(raw.json()[1]) == set(fixture)

    fake_github.delete_review_comment("acme", "api", first.id)
    assert [c.id for c in repo.get_pulls_comments()] == [second.id]
    gone = requests.get(
        f"{fake_github.base_url}/repos/acme/api/pulls/comments/{first.id}", headers=AUTH, timeout=5
    )
    assert gone.status_code == 404


def test_a_timeline_through_pygithub_in_the_documented_shape(fake_github: FakeGitHub) -> None:
    fake_github.add_issue("acme", "api", 7, "flaky test", updated_at=T0)
    fake_github.add_issue("acme", "api", 8, "fix flake", updated_at=T0, is_pull_request=True)
    fake_github.add_comment("acme", "api", 7, "me too", created_at=T0 + timedelta(1))
    fake_github.add_cross_reference(
        "acme", "api", 7, "acme", "api", 8, created_at=T0 + timedelta(2)
    )
    fake_github.add_event("acme", "api", 7, "connected", T0 + timedelta(3))
    fake_github.add_commit("acme", "api", 8, "Fix #7", sha="b" * 40, committed_at=T0 + timedelta(4))
    repo = client(fake_github).get_repo("acme/api")

    timeline = list(repo.get_issue(7).get_timeline())
    commits = list(repo.get_issue(8).get_timeline())

    assert [item.event for item in timeline] == ["commented", "cross-referenced", "connected"]
    assert timeline[1].source.issue.number == 8
    assert [(item.event, item.raw_data["sha"]) for item in commits] == [("committed", "b" * 40)]
    assert repo.get_issue(7).updated_at == T0 + timedelta(2)  # the reference bumped it
    fixtures = {
        item["event"]: item
        for name in ("issue_timeline.json", "issue_timeline_references.variant.json")
        for item in load_fixture("github", name)
    }
    for item in [*timeline, *commits]:
        assert set(item.raw_data) == set(fixtures[item.event]), item.event


def test_pull_request_deliveries_have_the_shape_of_githubs_documented_examples(
    fake_github: FakeGitHub,
) -> None:
    fake_github.add_issue("acme", "api", 7, "Fix", is_pull_request=True)
    review = fake_github.add_review("acme", "api", 7, "APPROVED", "lgtm")
    comment = fake_github.add_review_comment("acme", "api", 7, "nit")
    fake_github.merge_pull("acme", "api", 7)
    rendered = {
        "pull_request_closed": fake_github.webhook_body("pull_request", "closed", "acme", "api", 7),
        "pull_request_review_submitted": fake_github.webhook_body(
            "pull_request_review", "submitted", "acme", "api", 7, review_id=review.id
        ),
        "pull_request_review_comment_created": fake_github.webhook_body(
            "pull_request_review_comment", "created", "acme", "api", 7, comment_id=comment.id
        ),
    }
    # What the documented deliveries have beyond the fake's: a GitHub App's installation,
    # a pull request's statistics and merge state, a comment's reactions.
    extras = {
        "installation",
        "additions",
        "changed_files",
        "comments",
        "commits",
        "deletions",
        "maintainer_can_modify",
        "mergeable",
        "mergeable_state",
        "merged",
        "merged_by",
        "rebaseable",
        "review_comments",
        "reactions",
    }

    for name, body in rendered.items():
        delivery, documented = json.loads(body), load_fixture("github", f"webhook_{name}.json")
        assert set(documented) - extras == set(delivery), name
        for part in ("pull_request", "review", "comment"):
            if part in documented:
                # Every field of GitHub's example (older ones lack a newer draft, auto_merge).
                assert set(documented[part]) - extras <= set(delivery[part]), (name, part)
    pull = json.loads(rendered["pull_request_closed"])["pull_request"]
    assert "state_reason" not in pull
    assert pull["merged_at"] is not None
    assert json.loads(rendered["pull_request_review_submitted"])["review"]["state"] == "approved"


def test_an_unknown_issue_is_a_404(fake_github: FakeGitHub) -> None:
    fake_github.add_repo("acme", "api")
    repo = client(fake_github).get_repo("acme/api")
    with pytest.raises(UnknownObjectException):
        repo.get_issue(404)


def test_normal_responses_carry_rate_limit_headers_that_count_down(
    fake_github: FakeGitHub,
) -> None:
    add_issues(fake_github, 1)
    g = client(fake_github)
    g.get_repo("acme/api")
    g.get_repo("acme/api")
    assert g.rate_limiting == (4998, 5000)
    assert g.rate_limiting_resettime == fake_github.rate_limit_reset
    assert g.get_rate_limit().resources.core.remaining == 4998  # /rate_limit is free


# -- ETag --------------------------------------------------------------------------------


def test_a_matching_if_none_match_gets_a_304_until_the_issue_changes(
    fake_github: FakeGitHub,
) -> None:
    add_issues(fake_github, 1)
    issue = client(fake_github).get_repo("acme/api").get_issue(1)
    assert issue.etag is not None

    assert issue.update() is False  # PyGithub sends If-None-Match: <etag>
    assert fake_github.not_modified_count == 1
    fake_github.edit_issue("acme", "api", 1, body="more detail")
    assert issue.update() is True
    assert issue.body == "more detail"
    assert fake_github.not_modified_count == 1


def test_list_pages_have_etags_and_304s_are_not_charged(fake_github: FakeGitHub) -> None:
    add_issues(fake_github, 2)
    url = f"{fake_github.base_url}/repos/acme/api/issues"
    auth = {"Authorization": "token t"}
    first = requests.get(url, headers=auth, timeout=5)
    again = requests.get(url, headers={**auth, "If-None-Match": first.headers["ETag"]}, timeout=5)

    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["x-ratelimit-remaining"] == first.headers["x-ratelimit-remaining"]
    assert fake_github.not_modified_count == 1


# -- rate limits and errors, with the connector's configuration (retry=None) ---------------


def test_primary_rate_limit_403_raises_with_remaining_zero_and_the_reset_time(
    fake_github: FakeGitHub,
) -> None:
    add_issues(fake_github, 1)
    fake_github.script_rate_limit("primary", path="/issues$", reset_at=1_900_000_000)
    repo = client(fake_github).get_repo("acme/api")

    with pytest.raises(RateLimitExceededException) as caught:
        list(repo.get_issues())

    assert caught.value.status == 403
    assert caught.value.headers is not None
    assert caught.value.headers["x-ratelimit-remaining"] == "0"
    assert caught.value.headers["x-ratelimit-reset"] == "1900000000"
    assert "rate limit" in caught.value.data["message"]
    assert list(repo.get_issues())  # times=1: the next request succeeds


def test_primary_rate_limit_429_is_a_plain_github_exception_in_pygithub(
    fake_github: FakeGitHub,
) -> None:
    add_issues(fake_github, 1)
    fake_github.script_rate_limit("primary", status=429, reset_at=1_900_000_000)

    with pytest.raises(GithubException) as caught:
        client(fake_github).get_repo("acme/api")

    # PyGithub maps only 403 + rate-limit message to RateLimitExceededException:
    # a connector must classify by status and headers, not by exception type.
    assert type(caught.value) is GithubException
    assert caught.value.status == 429
    assert caught.value.headers is not None
    assert caught.value.headers["x-ratelimit-remaining"] == "0"


def test_secondary_rate_limit_carries_retry_after(fake_github: FakeGitHub) -> None:
    add_issues(fake_github, 1)
    fake_github.script_rate_limit("secondary", retry_after=30)

    with pytest.raises(RateLimitExceededException) as caught:
        client(fake_github).get_repo("acme/api")

    assert caught.value.headers is not None
    assert caught.value.headers["retry-after"] == "30"
    assert "secondary rate limit" in caught.value.data["message"]


def test_a_rate_limit_can_hit_mid_pagination_by_request_number(fake_github: FakeGitHub) -> None:
    add_issues(fake_github, 10)
    repo = client(fake_github, per_page=3).get_repo("acme/api")  # request 1
    rule = fake_github.script_rate_limit("secondary", on_request_number=3, retry_after=5)

    seen: list[int] = []

    def read_all() -> None:
        for issue in repo.get_issues(state="all", sort="updated", direction="asc"):
            seen.append(issue.number)

    with pytest.raises(RateLimitExceededException):
        read_all()

    assert seen == [1, 2, 3]  # page 1 arrived, page 2 was refused
    assert rule.served == 1
    assert fake_github.request_count() == 3


@pytest.mark.parametrize(
    ("status", "exception"),
    [(401, BadCredentialsException), (403, GithubException), (500, GithubException)],
)
def test_scripted_errors_that_are_not_rate_limits(
    fake_github: FakeGitHub, status: int, exception: type[GithubException]
) -> None:
    add_issues(fake_github, 1)
    fake_github.script_error(status)

    with pytest.raises(exception) as caught:
        client(fake_github).get_repo("acme/api")

    assert caught.value.status == status
    assert not isinstance(caught.value, RateLimitExceededException)


def test_a_wrong_token_is_bad_credentials(fake_github: FakeGitHub) -> None:
    add_issues(fake_github, 1)
    g = Github(base_url=fake_github.base_url, auth=Auth.Token("wrong"), retry=None)
    with pytest.raises(BadCredentialsException):
        g.get_repo("acme/api")


# -- PyGithub's own retry logic (what the connector must switch off) ------------------------


def test_pygithub_default_retry_silently_retries_a_secondary_limit(
    fake_github: FakeGitHub,
) -> None:
    add_issues(fake_github, 1)
    fake_github.script_rate_limit("secondary", retry_after=0)

    repo = client(fake_github, retry=GithubRetry()).get_repo("acme/api")

    assert repo.full_name == "acme/api"  # the 403 never reached the caller
    assert fake_github.request_count("/repos/acme/api") == 2


def test_pygithub_default_retry_also_retries_429_with_retry_after(
    fake_github: FakeGitHub,
) -> None:
    add_issues(fake_github, 1)
    fake_github.script_rate_limit("secondary", status=429, retry_after=0)

    client(fake_github, retry=GithubRetry()).get_repo("acme/api")

    assert fake_github.request_count("/repos/acme/api") == 2


def test_pygithub_max_rate_limit_wait_raises_instead_of_waiting_for_the_reset(
    fake_github: FakeGitHub,
) -> None:
    add_issues(fake_github, 1)
    fake_github.script_rate_limit("primary", reset_at=int(time.time()) + 3600)
    g = client(fake_github, retry=GithubRetry(max_rate_limit_wait=5))

    with pytest.raises(GithubException) as caught:
        g.get_repo("acme/api")

    assert type(caught.value).__name__ == "RateLimitExceededExceedsMaxWait"
    assert fake_github.request_count() == 1


def test_exhausted_urllib3_retries_surface_as_requests_retry_error(
    fake_github: FakeGitHub,
) -> None:
    add_issues(fake_github, 1)
    fake_github.script_error(502, times=10)

    with pytest.raises(requests.exceptions.RetryError):
        client(fake_github, retry=GithubRetry(total=2)).get_repo("acme/api")

    assert fake_github.request_count() == 3


# -- robustness -------------------------------------------------------------------------------


def test_concurrent_clients_get_consistent_pages(fake_github: FakeGitHub) -> None:
    add_issues(fake_github, 120)
    results: list[list[int]] = []
    lock = threading.Lock()

    def read() -> None:
        repo = client(fake_github, per_page=50).get_repo("acme/api")
        numbers = [i.number for i in repo.get_issues(state="all", sort="updated", direction="asc")]
        with lock:
            results.append(numbers)

    threads = [threading.Thread(target=read) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert results == [list(range(1, 121))] * 6


def test_serves_ten_thousand_issues(fake_github: FakeGitHub) -> None:
    add_issues(fake_github, 10_000)
    repo = client(fake_github, per_page=100).get_repo("acme/api")

    issues = repo.get_issues(state="all", sort="updated", direction="asc", since=T0)

    assert sum(1 for _ in issues) == 10_000
    assert fake_github.request_count() == 101


def test_pygithub_completes_list_items_lazily_with_one_get_each(fake_github: FakeGitHub) -> None:
    fake_github.add_issue("acme", "api", 1, "a bug", updated_at=T0)
    fake_github.add_issue("acme", "api", 2, "a fix", updated_at=T0, is_pull_request=True)
    issues = list(client(fake_github).get_repo("acme/api").get_issues(state="all"))
    before = fake_github.request_count()

    assert [i.pull_request is not None for i in issues] == [True, False]  # newest first

    assert fake_github.request_count() - before == 1  # the plain issue was re-fetched
    assert fake_github.requests[-1].path == "/repos/acme/api/issues/1"
