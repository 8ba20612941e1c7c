"""A scriptable fake of the GitHub REST API (the parts the GitHub connector reads).

State lives in Python objects the test scripts (``add_issue``, ``edit_issue``,
``add_comment``, ``add_event``, ``add_review``); responses are rendered from the
fixture shapes in ``memsync/connectors/fixtures/github`` with ids, numbers, urls
(pointing at ``base_url``), timestamps and texts overridden. The server itself is a
:class:`~memsync.connectors.fake_http.FakeHTTPServer`::

    with FakeGitHub(token="t") as fake:  # token=None accepts any Authorization
        fake.add_issue("acme", "api", 1, "Found a bug", "body", updated_at="2024-03-01T10:00:00Z")
        fake.add_issue("acme", "api", 2, "Fix", updated_at=t, is_pull_request=True)
        fake.edit_issue("acme", "api", 1, title="renamed")  # bumps updated_at
        c = fake.add_comment("acme", "api", 1, "me too")  # bumps issue updated_at, comments
        fake.edit_comment("acme", "api", c.id, "me too!")  # bumps comment updated_at
        fake.add_event("acme", "api", 1, "closed", actor="hubot")  # closes the issue, bumps it
        fake.add_event("acme", "api", 1, "labeled", label="bug")  # adds the label
        fake.add_review("acme", "api", 2, "APPROVED", "lgtm")  # bumps the PR
        g = Github(
            base_url=fake.base_url,
            auth=Auth.Token("t"),
            retry=None,
            seconds_between_requests=None,
            seconds_between_writes=None,
            per_page=100,
        )

Scripting (each returns the stored object; timestamps are aware ``datetime`` or ISO
strings; omitted ones come from the fake's clock, one minute per call after
``start``):

- ``add_repo(owner, repo, *, id=None) -> int``: register a repository (implicit in
  ``add_issue``); ``id`` shows in ``Link`` urls.
- ``add_issue(owner, repo, number, title, body="", updated_at=None, state="open",
  is_pull_request=False, *, created_at=None, closed_at=None, merged_at=None,
  user="octocat", labels=(), id=None) -> FakeIssue``: a pull request is listed by
  ``/issues`` with a ``pull_request`` key and by ``/pulls``.
- ``edit_issue(owner, repo, number, *, title=None, body=None, state=None,
  labels=None, updated_at=None)``: changes it and bumps ``updated_at``.
- ``add_comment(owner, repo, number, body, *, created_at=None, updated_at=None,
  user="octocat", id=None) -> FakeComment``: bumps the issue's ``comments`` and
  ``updated_at``; ``edit_comment(owner, repo, comment_id, body, *, updated_at=None)``.
- ``add_event(owner, repo, number, event, created_at=None, *, actor="octocat",
  label=None, commit_id=None, id=None) -> FakeEvent``: ``closed`` / ``reopened`` /
  ``labeled`` / ``unlabeled`` also change the issue and bump it.
- ``add_review(owner, repo, number, state="APPROVED", body="", *, submitted_at=None,
  user="octocat", commit_id=..., id=None) -> FakeReview``: pull requests only; bumps
  the pull request. ``edit_review(owner, repo, review_id, *, body=None, state=None,
  updated_at=None)`` changes it (``state="DISMISSED"``) and bumps the pull request.
- ``merge_pull(owner, repo, number, *, merged_at=None) -> FakeIssue``: closes the pull
  request as merged (``merged_at`` and ``closed_at``) and bumps it.
- ``delete_issue(owner, repo, number)``: the issue and its comments leave every list
  and ``/issues/{n}`` answers 410 "This issue was deleted", as GitHub does; its events
  stay listed (GitHub lists no event for a deletion: to exercise a connector's 410
  path, ``add_event(..., "deleted")`` before deleting).
- ``transfer_issue(owner, repo, number, to_owner, to_repo, *, to_number=None) ->
  FakeIssue``: the issue and its comments move to the other repository under a new
  number (the next free one), the old repository lists a ``transferred`` event, and
  its ``/issues/{n}`` answers 301 to the new location, as GitHub does.
- ``add_review_comment(owner, repo, number, body, *, path="file1.txt", line=2,
  created_at=None, updated_at=None, user="octocat", in_reply_to=None, id=None) ->
  FakeReviewComment`` (pull requests only; bumps the pull request),
  ``edit_review_comment(owner, repo, comment_id, body, *, updated_at=None)`` (bumps the
  comment) and ``delete_review_comment(owner, repo, comment_id)`` (it leaves the lists;
  ``/pulls/comments/{id}`` answers 404).
- ``add_cross_reference(owner, repo, number, source_owner, source_repo, source_number,
  *, actor="octocat", created_at=None)`` (the source issue must exist) and
  ``add_commit(owner, repo, number, message, *, sha=None, author_name=...,
  committed_at=None)``: ``cross-referenced`` and ``committed`` items on ``number``'s
  timeline; both bump ``number``'s ``updated_at``. ``add_event(..., "connected")`` is a
  ``connected`` item there (and in the events lists). ``delete_comment(owner, repo,
  comment_id)`` removes a comment from the lists and its issue's timeline.
- ``webhook_body(event, action, owner, repo, number, *, comment_id=None,
  review_id=None)``: the unsigned body GitHub would deliver for ``issues``,
  ``issue_comment``, ``pull_request``, ``pull_request_review`` or
  ``pull_request_review_comment`` about the state the fake holds now.
- ``after_request(action)``: ``action(request)`` runs after each request is answered
  and before the next one is (edit an issue between two page requests).
- ``script_rate_limit(kind="primary" | "secondary", *, on_request_number=None,
  path=None, times=1, retry_after=None, reset_at=None, status=403 | 429)`` and
  ``script_error(status, *, message=None, body=None, headers=None,
  on_request_number=None, path=None, times=1)`` return a :class:`ScriptedRule`.
  Errors: 401 "Bad credentials", 403 "Resource not accessible by integration", 404,
  422, 500, 502, 503; a ``str`` body is sent as text/html.
- Inspection: ``issue(owner, repo, n)``, ``repo_id(owner, repo)``, ``rules``,
  ``not_modified_count``, ``rate_limit_used``.

Scripted rules: a request matches when its number (1-based over all requests the
fake received) is ``>= on_request_number`` and ``path`` (a regex searched in the
path, without query) matches; ``None`` means any. The first unspent rule that
matches answers, ``times`` times; ``rule.served`` counts. Rules beat auth, the budget
and routing. A primary rate limit sends the fixture body (``"API rate limit exceeded for
..."``), status 403 or 429, ``x-ratelimit-remaining: 0``, ``x-ratelimit-reset:
reset_at`` (default the fake's), ``x-ratelimit-limit/used``, ``x-ratelimit-resource:
core`` (and ``retry-after`` only if given). A secondary one sends the fixture body
(``"You have exceeded a secondary rate limit ..."``) and headers (``content-type``,
``connection: close``), plus ``retry-after`` when given.

Served (GET/HEAD), under ``/repos/{owner}/{repo}`` and ``/repositories/{id}``:

- ``""`` (the repository: the fixture pull request's ``base.repo`` shape);
- ``/issues`` (``state`` default ``open``, ``sort`` created | updated | comments
  default created, ``direction`` default desc, ``since`` inclusive on
  ``updated_at``) and ``/issues/{n}``;
- ``/issues/comments`` (``since``, ``sort``, ``direction``; without ``sort``
  ascending: GitHub ignores ``direction`` without ``sort``) and
  ``/issues/{n}/comments`` (ascending, ``since``);
- ``/issues/events`` (newest first, with the embedded ``issue``) and
  ``/issues/{n}/events`` (oldest first);
- ``/issues/{n}/timeline`` (oldest first: the issue's comments as ``commented``, its
  events, ``cross-referenced`` and ``committed`` items; shapes from
  https://docs.github.com/en/rest/issues/timeline and the fixtures
  ``issue_timeline.json``, ``issue_timeline_references.variant.json``);
- ``/pulls`` (``state``, ``sort``, ``direction``), ``/pulls/{n}`` (the list-item
  shape) and ``/pulls/{n}/reviews``;
- ``/pulls/comments`` (``sort`` created | updated | created_at, ``direction`` ignored
  without ``sort``, ``since`` on ``updated_at``; without ``sort`` ascending by id, as
  https://docs.github.com/en/rest/pulls/comments documents) and ``/pulls/comments/{id}``
  (shape: ``pull_review_comments_list.json``); and ``/rate_limit`` (free).

Lists paginate with ``per_page`` (default 30, max 100) and ``page`` and carry a
``Link`` header with ``prev``, ``next``, ``last``, ``first`` in GitHub's order; like
GitHub, the ``Link`` urls use the ``/repositories/{id}/...`` form (a test asserts
byte equality with the recorded 5-page sequence in ``fixtures/github/headers.json``).
Every 200 has ``ETag: W/"<sha256>"`` and ``x-ratelimit-*`` headers; a matching
``If-None-Match`` gets a 304 (counted in ``not_modified_count``, not charged to the
rate limit).

Budget: ``FakeGitHub(rate_limit=N, enforce_rate_limit=True)`` answers every request
after the first ``N`` charged ones with the primary-limit 403, as GitHub does when a
token's hourly budget is spent, until ``reset_rate_limit()``.

Not done: timeline items other than comments, events, cross-references and commits
(reviews, line comments), the timeline's ``exclude``, ``/pulls/{n}/comments``; labels,
milestones, assignees and ``labels=`` filters;
``/pulls/{n}`` serves the list-item shape, not the full pull request; write endpoints;
error bodies for 401, 403 (no access) and 5xx, and 404's ``documentation_url``, are
written by hand (no fixture). No rate-limit accounting beyond the ``x-ratelimit-*``
countdown and the budget above (no secondary limits unless scripted).

What PyGithub 2.10 (requests 2.34, urllib3 2.8) does by itself, read from its sources
(``github/MainClass.py``, ``GithubRetry.py``, ``Requester.py``, ``Consts.py``,
``PaginatedList.py``, ``GithubObject.py``; ``urllib3/util/retry.py``), and why the
connector configures it as it does:

- Default retry is on and sleeps inside the library: ``Github(retry=...)`` defaults
  to ``GithubRetry()``, a urllib3 ``Retry`` with ``total=10`` and 500 to 599 plus 403
  retried for GET/POST. On a 403 it reads the body: a primary-limit message backs off
  until ``x-ratelimit-reset`` + 1 s, a secondary-limit message ``secondary_rate_wait``
  (60 s); a 403 with ``Retry-After`` is retried after urllib3 sleeps it (capped only
  by urllib3's ``retry_after_max``, 21600 s). urllib3 also retries 429 with
  ``Retry-After``. The sleeps are ``time.sleep`` in urllib3, not injectable (tests:
  ``test_pygithub_default_retry_silently_retries_a_secondary_limit``,
  ``..._also_retries_429_with_retry_after``).
- ``GithubRetry(max_rate_limit_wait=S)`` raises ``RateLimitExceededExceedsMaxWait``
  when the computed backoff exceeds ``S``, but only on the 403 body-inspection path:
  a 403 or 429 with ``Retry-After`` bypasses the cap. When urllib3's retries run out
  on 5xx, the caller gets ``requests.exceptions.RetryError``, not a
  ``GithubException``.
- Throttling sleeps too: ``seconds_between_requests`` defaults to 0.25 s and
  ``seconds_between_writes`` to 1.0 s; ``Requester.__deferRequest`` sleeps to keep
  that spacing. With ``retry=None`` (or ``0``) the adapter gets requests'
  ``DEFAULT_RETRIES`` = 0: every error reaches the caller at once.
- Exception mapping (``Requester.createException``): 401 "bad credentials" ->
  ``BadCredentialsException``; 403 + rate-limit message ->
  ``RateLimitExceededException``; 404 "not found" -> ``UnknownObjectException``;
  anything else, including 429 primary limits, -> plain ``GithubException``.
  ``exc.status``, ``exc.headers`` (lower-case names) and ``exc.data`` carry what the
  connector needs.
- ``PaginatedList`` follows ``Link`` ``rel="next"`` by splitting the header on
  ``", "`` and ``"; "``, so the exact format matters; it sends ``per_page`` only when
  it differs from 30. ``issue.update()`` sends ``If-None-Match: <etag>`` and returns
  ``False`` on 304.
- Lazy completion (``CompletableGithubObject``): list items are "incomplete", and
  reading an attribute the list payload lacks GETs the item's url (``pull_request``
  on a plain issue, ``raw_data`` on every item). A connector test should assert
  ``fake.request_count()`` so such N+1 requests are caught.

So the connector builds ``Github(base_url=..., auth=Auth.Token(token), retry=None,
seconds_between_requests=None, seconds_between_writes=None, timeout=...)``, catches
``GithubException`` and classifies it by status and headers: 403/429 with
``x-ratelimit-remaining == "0"`` waits until ``x-ratelimit-reset``; with
``retry-after`` waits that; a "secondary rate limit" message without either waits at
least 60 s; each wait capped and done through the injected sleep and clock;
otherwise fatal (401, 403 without access, 404) or retriable (5xx).
"""

from __future__ import annotations

import base64
import bisect
import copy
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal, TypeVar
from urllib.parse import urlencode

from memsync.connectors.fake_http import (
    FakeHTTPServer,
    FakeResponse,
    RecordedRequest,
    compact_json,
    json_headers,
    load_fixture,
)

__all__ = [
    "FakeComment",
    "FakeCommit",
    "FakeCrossReference",
    "FakeEvent",
    "FakeGitHub",
    "FakeIssue",
    "FakeReview",
    "FakeReviewComment",
    "ScriptedRule",
]


_FIXTURE_API = "https://api.github.com"
_FIXTURE_HTML = "https://github.com"
_FIXTURE_REPO = "octocat/Hello-World"

DEFAULT_RATE_LIMIT_RESET = 1_893_456_000  # 2030-01-01T00:00:00Z: never reached in tests
DEFAULT_START = datetime(2024, 1, 1, tzinfo=UTC)

Json = Any  # a decoded JSON value
Timestamp = datetime | str
T = TypeVar("T")


def _to_datetime(value: Timestamp) -> datetime:
    parsed = datetime.fromisoformat(value) if isinstance(value, str) else value
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no time zone; give an aware datetime or ...Z")
    return parsed.astimezone(UTC)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _node_id(kind: str, ident: int) -> str:
    # The fixtures' node ids are base64("0<len(kind)>:<Kind><id>"), e.g. "05:Issue1".
    return base64.b64encode(f"0{len(kind)}:{kind}{ident}".encode()).decode()


def _replace_strings(value: Json, replacements: Sequence[tuple[str, str]]) -> Json:
    if isinstance(value, str):
        for old, new in replacements:
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_replace_strings(v, replacements) for v in value]
    if isinstance(value, dict):
        return {k: _replace_strings(v, replacements) for k, v in value.items()}
    return value


# -- scripted state ----------------------------------------------------------------


@dataclass
class FakeIssue:
    """An issue or pull request as the fake holds it. Read it; script through the fake."""

    owner: str
    repo: str
    number: int
    id: int
    title: str
    body: str | None
    state: str
    created_at: datetime
    updated_at: datetime
    is_pull_request: bool = False
    pull_id: int | None = None
    user: str = "octocat"
    labels: list[str] = field(default_factory=list)
    comments: int = 0
    closed_at: datetime | None = None
    closed_by: str | None = None
    state_reason: str | None = None
    merged_at: datetime | None = None
    _cache: bytes | None = field(default=None, repr=False, compare=False)


@dataclass
class FakeComment:
    owner: str
    repo: str
    issue_number: int
    id: int
    body: str
    user: str
    created_at: datetime
    updated_at: datetime
    _cache: bytes | None = field(default=None, repr=False, compare=False)


@dataclass
class FakeEvent:
    owner: str
    repo: str
    issue_number: int
    id: int
    event: str
    actor: str
    created_at: datetime
    label: str | None = None
    commit_id: str | None = None


@dataclass
class FakeReview:
    owner: str
    repo: str
    pull_number: int
    id: int
    state: str
    body: str
    user: str
    submitted_at: datetime
    commit_id: str


@dataclass
class FakeReviewComment:
    """A pull request review comment (a comment on a line of the diff)."""

    owner: str
    repo: str
    pull_number: int
    id: int
    body: str
    user: str
    path: str
    line: int
    created_at: datetime
    updated_at: datetime
    in_reply_to_id: int | None = None
    _cache: bytes | None = field(default=None, repr=False, compare=False)


@dataclass
class FakeCrossReference:
    """A ``cross-referenced`` timeline item: ``source`` issue mentioned ``number``."""

    owner: str
    repo: str
    number: int
    source_owner: str
    source_repo: str
    source_number: int
    actor: str
    created_at: datetime


@dataclass
class FakeCommit:
    """A ``committed`` timeline item of a pull request."""

    owner: str
    repo: str
    number: int
    sha: str
    message: str
    author_name: str
    committed_at: datetime


@dataclass
class ScriptedRule:
    """A scripted error response; ``served`` counts how often it was sent."""

    description: str
    response: FakeResponse
    path: re.Pattern[str] | None
    on_request_number: int | None
    times: int
    served: int = 0

    @property
    def spent(self) -> bool:
        return self.served >= self.times

    def matches(self, request: RecordedRequest) -> bool:
        if self.spent:
            return False
        if self.on_request_number is not None and request.number < self.on_request_number:
            return False
        return self.path is None or self.path.search(request.path) is not None


@dataclass
class _Repo:
    owner: str
    name: str
    id: int
    issues: dict[int, FakeIssue] = field(default_factory=dict)
    comments: dict[int, FakeComment] = field(default_factory=dict)
    events: list[FakeEvent] = field(default_factory=list)
    reviews: dict[int, list[FakeReview]] = field(default_factory=dict)
    review_comments: dict[int, FakeReviewComment] = field(default_factory=dict)
    cross_references: list[FakeCrossReference] = field(default_factory=list)
    commits: list[FakeCommit] = field(default_factory=list)
    # number -> where a deleted (None) or transferred (the new API url) issue went
    gone: dict[int, str | None] = field(default_factory=dict)
    version: int = 0
    views: dict[str, tuple[int, list[Any], list[Any]]] = field(default_factory=dict)
    templates: dict[str, Json] = field(default_factory=dict)
    repo_json: Json = None


class _HTTPError(Exception):
    def __init__(self, status: int, message: str, documentation_url: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.documentation_url = documentation_url


_ERROR_BODIES: dict[int, tuple[str, str]] = {
    401: ("Bad credentials", "https://docs.github.com/rest"),
    403: (
        "Resource not accessible by integration",
        "https://docs.github.com/rest/issues/issues#list-repository-issues",
    ),
    404: ("Not Found", "https://docs.github.com/rest"),
    410: ("Gone", "https://docs.github.com/rest"),
    422: ("Validation Failed", "https://docs.github.com/rest"),
    500: ("Server Error", "https://docs.github.com/rest"),
    502: ("Server Error", "https://docs.github.com/rest"),
    503: ("Service Unavailable", "https://docs.github.com/rest"),
}


class FakeGitHub(FakeHTTPServer):
    """Fake GitHub REST API on 127.0.0.1. Use as a context manager.

    ``token``: when set, requests must send ``Authorization: token <t>`` (or
    ``Bearer <t>``), else 401 "Bad credentials". ``html_url``: the web host used in
    ``html_url`` fields. ``rate_limit``/``rate_limit_reset``: values of the
    ``x-ratelimit-*`` headers on normal responses (``remaining`` counts down by one per
    request that is neither a 304 nor ``/rate_limit``). ``enforce_rate_limit``: once
    ``rate_limit`` requests were charged, every request gets GitHub's primary-limit 403
    (``x-ratelimit-remaining: 0``, reset at ``rate_limit_reset``) until
    ``reset_rate_limit()``: a budget smaller than the repository.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        html_url: str = "https://github.com",
        rate_limit: int = 5000,
        rate_limit_reset: int = DEFAULT_RATE_LIMIT_RESET,
        start: datetime = DEFAULT_START,
        enforce_rate_limit: bool = False,
    ) -> None:
        super().__init__()
        self.token = token
        self.enforce_rate_limit = enforce_rate_limit
        self.html_url = html_url.rstrip("/")
        self.rate_limit = rate_limit
        self.rate_limit_reset = rate_limit_reset
        self.rate_limit_used = 0
        self.not_modified_count = 0
        self._lock = threading.RLock()
        self._repos: dict[tuple[str, str], _Repo] = {}
        self._repos_by_id: dict[int, _Repo] = {}
        self._rules: list[ScriptedRule] = []
        self._after: list[Callable[[RecordedRequest], None]] = []
        self._next_id: dict[str, int] = {}
        self._users: dict[str, Json] = {}
        self._labels: dict[str, int] = {}
        self._clock = _to_datetime(start)
        self._fixtures: dict[str, Json] = {
            "issue": load_fixture("github", "issues_list.json")[0],
            "comment": load_fixture("github", "issue_comments_list.json")[0],
            "repo_event": load_fixture("github", "issue_events_list_repo.json")[0],
            "issue_events": load_fixture("github", "issue_events_list_issue.variant.json"),
            "review": load_fixture("github", "pull_reviews_list.json")[0],
            "pull": load_fixture("github", "pulls_list.json")[0],
            "review_comment": load_fixture("github", "pull_review_comments_list.json")[0],
            "timeline": load_fixture("github", "issue_timeline.json"),
            "timeline_references": load_fixture("github", "issue_timeline_references.variant.json"),
            "rate_limit": load_fixture("github", "rate_limit.json"),
            "primary_403": load_fixture("github", "error_primary_rate_limit.response.json"),
            "primary_429": load_fixture(
                "github", "error_primary_rate_limit_429.variant.response.json"
            ),
            "secondary": load_fixture("github", "error_secondary_rate_limit.response.json"),
        }

    # == scripting ===================================================================

    def add_repo(self, owner: str, repo: str, *, id: int | None = None) -> int:
        """Register a repository (``add_issue`` does it implicitly); returns its id."""
        with self._lock:
            return self._repo(owner, repo, create=True, repo_id=id).id

    def add_issue(
        self,
        owner: str,
        repo: str,
        number: int,
        title: str,
        body: str | None = "",
        updated_at: Timestamp | None = None,
        state: Literal["open", "closed"] = "open",
        is_pull_request: bool = False,
        *,
        created_at: Timestamp | None = None,
        closed_at: Timestamp | None = None,
        merged_at: Timestamp | None = None,
        user: str = "octocat",
        labels: Iterable[str] = (),
        id: int | None = None,
    ) -> FakeIssue:
        """Add an issue (or a pull request: it is listed by ``/issues`` too, with a
        ``pull_request`` key). ``updated_at`` defaults to the fake's clock (a minute
        later than the previous default); ``created_at`` defaults to ``updated_at``."""
        with self._lock:
            r = self._repo(owner, repo, create=True)
            if number in r.issues:
                raise ValueError(f"{owner}/{repo}#{number} exists; use edit_issue")
            updated = self._time(updated_at)
            created = _to_datetime(created_at) if created_at is not None else updated
            closed = _to_datetime(closed_at) if closed_at is not None else None
            if state == "closed" and closed is None:
                closed = updated
            issue = FakeIssue(
                owner=owner,
                repo=repo,
                number=number,
                id=id if id is not None else self._new_id("issue"),
                title=title,
                body=body,
                state=state,
                created_at=created,
                updated_at=updated,
                is_pull_request=is_pull_request,
                pull_id=self._new_id("pull") if is_pull_request else None,
                user=user,
                labels=list(labels),
                closed_at=closed if state == "closed" else None,
                state_reason="completed" if state == "closed" else None,
                merged_at=_to_datetime(merged_at) if merged_at is not None else None,
            )
            r.issues[number] = issue
            r.version += 1
            return issue

    def edit_issue(
        self,
        owner: str,
        repo: str,
        number: int,
        *,
        title: str | None = None,
        body: str | None = None,
        state: Literal["open", "closed"] | None = None,
        labels: Iterable[str] | None = None,
        updated_at: Timestamp | None = None,
    ) -> FakeIssue:
        """Change an issue and bump its ``updated_at`` (to ``updated_at``, or the fake's
        clock), so it reappears in a later ``since`` listing."""
        with self._lock:
            issue = self._issue(owner, repo, number)
            if title is not None:
                issue.title = title
            if body is not None:
                issue.body = body
            if labels is not None:
                issue.labels = list(labels)
            when = self._time(updated_at)
            if state is not None and state != issue.state:
                issue.state = state
                issue.closed_at = when if state == "closed" else None
                issue.state_reason = "completed" if state == "closed" else "reopened"
            self._touch(issue, when)
            return issue

    def add_comment(
        self,
        owner: str,
        repo: str,
        number: int,
        body: str,
        *,
        created_at: Timestamp | None = None,
        updated_at: Timestamp | None = None,
        user: str = "octocat",
        id: int | None = None,
    ) -> FakeComment:
        """Comment on an issue or PR. Like GitHub, this bumps the issue's ``comments``
        count and its ``updated_at`` (never backwards)."""
        with self._lock:
            issue = self._issue(owner, repo, number)
            created = self._time(created_at)
            comment = FakeComment(
                owner=owner,
                repo=repo,
                issue_number=number,
                id=id if id is not None else self._new_id("comment"),
                body=body,
                user=user,
                created_at=created,
                updated_at=_to_datetime(updated_at) if updated_at is not None else created,
            )
            r = self._repo(owner, repo)
            r.comments[comment.id] = comment
            issue.comments += 1
            self._touch(issue, created)
            return comment

    def edit_comment(
        self,
        owner: str,
        repo: str,
        comment_id: int,
        body: str,
        *,
        updated_at: Timestamp | None = None,
    ) -> FakeComment:
        """Change a comment's body and bump its ``updated_at`` (the issue's stays)."""
        with self._lock:
            r = self._repo(owner, repo)
            comment = r.comments.get(comment_id)
            if comment is None:
                raise KeyError(f"{owner}/{repo} has no comment {comment_id}")
            comment.body = body
            comment.updated_at = self._time(updated_at)
            comment._cache = None
            r.version += 1
            return comment

    def add_event(
        self,
        owner: str,
        repo: str,
        number: int,
        event: str,
        created_at: Timestamp | None = None,
        *,
        actor: str = "octocat",
        label: str | None = None,
        commit_id: str | None = None,
        id: int | None = None,
    ) -> FakeEvent:
        """Record an issue event. ``closed``/``reopened`` also change the issue's state,
        ``labeled``/``unlabeled`` (with ``label``) its labels; those four bump the issue's
        ``updated_at``. Any other event name is recorded as given."""
        with self._lock:
            issue = self._issue(owner, repo, number)
            when = self._time(created_at)
            if event in ("labeled", "unlabeled") and label is None:
                raise ValueError(f"a {event!r} event needs label=...")
            record = FakeEvent(
                owner=owner,
                repo=repo,
                issue_number=number,
                id=id if id is not None else self._new_id("event"),
                event=event,
                actor=actor,
                created_at=when,
                label=label,
                commit_id=commit_id,
            )
            r = self._repo(owner, repo)
            r.events.append(record)
            r.events.sort(key=lambda e: e.id)
            if event == "closed":
                issue.state, issue.closed_at, issue.closed_by = "closed", when, actor
                issue.state_reason = "completed"
            elif event == "reopened":
                issue.state, issue.closed_at, issue.state_reason = "open", None, "reopened"
            elif event == "labeled" and label is not None and label not in issue.labels:
                issue.labels.append(label)
            elif event == "unlabeled" and label in issue.labels:
                issue.labels.remove(label)
            if event in ("closed", "reopened", "labeled", "unlabeled"):
                self._touch(issue, when)
            r.version += 1
            return record

    def add_review(
        self,
        owner: str,
        repo: str,
        number: int,
        state: Literal["APPROVED", "CHANGES_REQUESTED", "COMMENTED", "DISMISSED"] = "APPROVED",
        body: str = "",
        *,
        submitted_at: Timestamp | None = None,
        user: str = "octocat",
        commit_id: str = "ecdd80bb57125d7ba9641ffaa4d7d2c19d3f3091",
        id: int | None = None,
    ) -> FakeReview:
        """Review a pull request; bumps the PR's ``updated_at``."""
        with self._lock:
            issue = self._pull(owner, repo, number)
            when = self._time(submitted_at)
            review = FakeReview(
                owner=owner,
                repo=repo,
                pull_number=number,
                id=id if id is not None else self._new_id("review"),
                state=state,
                body=body,
                user=user,
                submitted_at=when,
                commit_id=commit_id,
            )
            self._repo(owner, repo).reviews.setdefault(number, []).append(review)
            self._touch(issue, when)
            return review

    def edit_review(
        self,
        owner: str,
        repo: str,
        review_id: int,
        *,
        body: str | None = None,
        state: Literal["APPROVED", "CHANGES_REQUESTED", "COMMENTED", "DISMISSED"] | None = None,
        updated_at: Timestamp | None = None,
    ) -> FakeReview:
        """Edit a review's body or change its state (``DISMISSED``); a review has no
        update time of its own, so this bumps its pull request's ``updated_at``."""
        with self._lock:
            r = self._repo(owner, repo)
            review = next(
                (v for reviews in r.reviews.values() for v in reviews if v.id == review_id),
                None,
            )
            if review is None:
                raise KeyError(f"{owner}/{repo} has no review {review_id}")
            if body is not None:
                review.body = body
            if state is not None:
                review.state = state
            self._touch(self._pull(owner, repo, review.pull_number), self._time(updated_at))
            return review

    def merge_pull(
        self, owner: str, repo: str, number: int, *, merged_at: Timestamp | None = None
    ) -> FakeIssue:
        """Merge pull request ``number``: it is closed, ``merged_at`` and ``closed_at``
        are set (to ``merged_at``, or the fake's clock) and its ``updated_at`` bumped."""
        with self._lock:
            issue = self._pull(owner, repo, number)
            when = self._time(merged_at)
            issue.state, issue.closed_at, issue.merged_at = "closed", when, when
            self._touch(issue, when)
            return issue

    def add_review_comment(
        self,
        owner: str,
        repo: str,
        number: int,
        body: str,
        *,
        path: str = "file1.txt",
        line: int = 2,
        created_at: Timestamp | None = None,
        updated_at: Timestamp | None = None,
        user: str = "octocat",
        in_reply_to: int | None = None,
        id: int | None = None,
    ) -> FakeReviewComment:
        """Comment on line ``line`` of ``path`` in pull request ``number``'s diff; bumps
        the pull request's ``updated_at``."""
        with self._lock:
            issue = self._pull(owner, repo, number)
            created = self._time(created_at)
            comment = FakeReviewComment(
                owner=owner,
                repo=repo,
                pull_number=number,
                id=id if id is not None else self._new_id("review_comment"),
                body=body,
                user=user,
                path=path,
                line=line,
                created_at=created,
                updated_at=_to_datetime(updated_at) if updated_at is not None else created,
                in_reply_to_id=in_reply_to,
            )
            self._repo(owner, repo).review_comments[comment.id] = comment
            self._touch(issue, created)
            return comment

    def edit_review_comment(
        self,
        owner: str,
        repo: str,
        comment_id: int,
        body: str,
        *,
        updated_at: Timestamp | None = None,
    ) -> FakeReviewComment:
        """Change a review comment's body and bump its ``updated_at``."""
        with self._lock:
            r = self._repo(owner, repo)
            comment = r.review_comments[comment_id]
            comment.body = body
            comment.updated_at = self._time(updated_at)
            comment._cache = None
            r.version += 1
            return comment

    def delete_review_comment(self, owner: str, repo: str, comment_id: int) -> None:
        """Delete a review comment: it leaves the lists and answers 404, as on GitHub
        (which records no event for it)."""
        with self._lock:
            r = self._repo(owner, repo)
            del r.review_comments[comment_id]
            r.version += 1

    def delete_comment(self, owner: str, repo: str, comment_id: int) -> None:
        """Delete an issue comment: it leaves the comment lists and its issue's timeline
        (the items after it move one place earlier)."""
        with self._lock:
            r = self._repo(owner, repo)
            del r.comments[comment_id]
            r.version += 1

    def add_cross_reference(
        self,
        owner: str,
        repo: str,
        number: int,
        source_owner: str,
        source_repo: str,
        source_number: int,
        *,
        actor: str = "octocat",
        created_at: Timestamp | None = None,
    ) -> FakeCrossReference:
        """Issue ``source_owner/source_repo#source_number`` (which must exist) mentions
        ``number``: a ``cross-referenced`` item on ``number``'s timeline. Bumps
        ``number``'s ``updated_at``, so a reader of updated issues finds it."""
        with self._lock:
            issue = self._issue(owner, repo, number)
            self._issue(source_owner, source_repo, source_number)
            when = self._time(created_at)
            reference = FakeCrossReference(
                owner, repo, number, source_owner, source_repo, source_number, actor, when
            )
            self._repo(owner, repo).cross_references.append(reference)
            self._touch(issue, when)
            return reference

    def add_commit(
        self,
        owner: str,
        repo: str,
        number: int,
        message: str,
        *,
        sha: str | None = None,
        author_name: str = "Monalisa Octocat",
        committed_at: Timestamp | None = None,
    ) -> FakeCommit:
        """Push a commit to pull request ``number``: a ``committed`` item on its timeline;
        bumps the pull request's ``updated_at``."""
        with self._lock:
            issue = self._issue(owner, repo, number)
            when = self._time(committed_at)
            digest = hashlib.sha1(f"{owner}/{repo}#{number}:{message}:{when}".encode())
            commit = FakeCommit(
                owner, repo, number, sha or digest.hexdigest(), message, author_name, when
            )
            self._repo(owner, repo).commits.append(commit)
            self._touch(issue, when)
            return commit

    def delete_issue(self, owner: str, repo: str, number: int) -> None:
        """Delete an issue (see the module docstring)."""
        with self._lock:
            r = self._repo(owner, repo)
            self._issue(owner, repo, number)
            del r.issues[number]
            r.comments = {i: c for i, c in r.comments.items() if c.issue_number != number}
            r.gone[number] = None
            r.version += 1

    def transfer_issue(
        self,
        owner: str,
        repo: str,
        number: int,
        to_owner: str,
        to_repo: str,
        *,
        to_number: int | None = None,
    ) -> FakeIssue:
        """Move an issue to another repository (see the module docstring); returns it
        as it is there."""
        with self._lock:
            issue = self._issue(owner, repo, number)
            source = self._repo(owner, repo)
            target = self._repo(to_owner, to_repo, create=True)
            new_number = to_number if to_number is not None else max(target.issues, default=0) + 1
            when = self._time(None)
            moved = replace(issue, owner=to_owner, repo=to_repo, number=new_number, _cache=None)
            moved.updated_at = max(issue.updated_at, when)
            target.issues[new_number] = moved
            for ident in [i for i, c in source.comments.items() if c.issue_number == number]:
                comment = source.comments.pop(ident)
                target.comments[ident] = replace(
                    comment, owner=to_owner, repo=to_repo, issue_number=new_number, _cache=None
                )
            source.events.append(
                FakeEvent(
                    owner, repo, number, self._new_id("event"), "transferred", "octocat", when
                )
            )
            del source.issues[number]
            source.gone[number] = f"{self.base_url}/repos/{to_owner}/{to_repo}/issues/{new_number}"
            source.version += 1
            target.version += 1
            return moved

    def script_rate_limit(
        self,
        kind: Literal["primary", "secondary"] = "primary",
        *,
        on_request_number: int | None = None,
        path: str | None = None,
        times: int = 1,
        retry_after: int | None = None,
        reset_at: int | None = None,
        status: Literal[403, 429] = 403,
    ) -> ScriptedRule:
        """Answer the next ``times`` matching requests with a rate-limit error.

        A request matches when its number (1-based, over all requests) is at least
        ``on_request_number`` and ``path`` (a regex, searched in the path without
        query) matches; ``None`` means any. Primary: the fixture body, ``x-ratelimit-
        remaining: 0`` and ``x-ratelimit-reset: reset_at`` (default: the fake's reset).
        Secondary: the fixture body and headers, plus ``retry-after`` when given.
        ``retry_after`` is added to a primary response too when given.
        """
        if kind == "primary":
            response = self._primary_limit(status, reset_at, retry_after)
        else:
            fixture = self._fixtures["secondary"]
            headers = dict(fixture["headers"])
            if reset_at is not None:
                headers["x-ratelimit-reset"] = str(reset_at)
            response = _limit_response(status, fixture["body"], headers, retry_after)
        return self._add_rule(
            f"{kind} rate limit {status}", response, path, on_request_number, times
        )

    def reset_rate_limit(self) -> None:
        """The hour is over: the ``rate_limit`` budget is whole again."""
        with self._lock:
            self.rate_limit_used = 0

    def script_error(
        self,
        status: int,
        *,
        message: str | None = None,
        body: Json = None,
        headers: dict[str, str] | None = None,
        on_request_number: int | None = None,
        path: str | None = None,
        times: int = 1,
    ) -> ScriptedRule:
        """Answer the next ``times`` matching requests (see ``script_rate_limit``) with
        an error that is not a rate limit: 401 "Bad credentials", 403 "Resource not
        accessible by integration", 404, 422, 500, 502, 503. ``body`` replaces the JSON
        body entirely (a ``str`` is sent as text/html, e.g. a proxy's 502 page)."""
        default_message, doc = _ERROR_BODIES.get(status, ("Error", "https://docs.github.com/rest"))
        pairs: list[tuple[str, str]]
        if isinstance(body, str):
            raw = body.encode("utf-8")
            pairs = [("Content-Type", "text/html; charset=utf-8")]
        else:
            payload = (
                body
                if body is not None
                else {
                    "message": message or default_message,
                    "documentation_url": doc,
                    "status": str(status),
                }
            )
            raw = compact_json(payload)
            pairs = json_headers()
        pairs += list((headers or {}).items())
        response = FakeResponse(status, raw, pairs)
        return self._add_rule(f"error {status}", response, path, on_request_number, times)

    def webhook_body(
        self,
        event: Literal[
            "issues",
            "issue_comment",
            "pull_request",
            "pull_request_review",
            "pull_request_review_comment",
        ],
        action: str,
        owner: str,
        repo: str,
        number: int,
        *,
        comment_id: int | None = None,
        review_id: int | None = None,
    ) -> bytes:
        """The body GitHub delivers for ``event`` / ``action`` on issue or pull request
        ``number`` (and its comment ``comment_id``, review comment ``comment_id`` or
        review ``review_id``) as the fake holds them now, with the ``repository`` and
        the ``sender``, per
        https://docs.github.com/en/webhooks/webhook-events-and-payloads (sections
        ``issues``, ``issue_comment``, ``pull_request``, ``pull_request_review``,
        ``pull_request_review_comment``): the ``issues`` events carry the REST
        ``issue``, the pull request events the pull request object (no
        ``state_reason``; ``merged_at`` at its top), and a ``review``'s ``state`` is
        lower-case there (``approved``), where the reviews list says ``APPROVED``.
        Unsigned: a test signs it as GitHub would, with the hook's secret."""
        with self._lock:
            r = self._repo(owner, repo)
            issue = self._issue(owner, repo, number)
            payload: dict[str, Any] = {"action": action}
            if event in ("issues", "issue_comment"):
                payload["issue"] = self._issue_json(r, issue)
            else:
                if event == "pull_request":
                    payload["number"] = number
                payload["pull_request"] = self._pull_json(r, self._pull(owner, repo, number))
            if event == "issue_comment" and comment_id is not None:
                payload["comment"] = json.loads(self._comment_bytes(r, r.comments[comment_id]))
            if event == "pull_request_review_comment" and comment_id is not None:
                comment = r.review_comments[comment_id]
                payload["comment"] = json.loads(self._review_comment_bytes(r, comment))
            if event == "pull_request_review" and review_id is not None:
                [found] = [v for v in r.reviews.get(number, []) if v.id == review_id]
                review = self._review_json(r, found)
                review["state"] = found.state.lower()
                payload["review"] = review
            payload["repository"] = r.repo_json
            payload["sender"] = self._user(issue.user)
            return compact_json(payload)

    def issue(self, owner: str, repo: str, number: int) -> FakeIssue:
        with self._lock:
            return self._issue(owner, repo, number)

    def repo_id(self, owner: str, repo: str) -> int:
        with self._lock:
            return self._repo(owner, repo).id

    @property
    def rules(self) -> list[ScriptedRule]:
        with self._lock:
            return list(self._rules)

    # == state helpers ===============================================================

    def _add_rule(
        self,
        description: str,
        response: FakeResponse,
        path: str | None,
        on_request_number: int | None,
        times: int,
    ) -> ScriptedRule:
        rule = ScriptedRule(
            description=description,
            response=response,
            path=re.compile(path) if path is not None else None,
            on_request_number=on_request_number,
            times=times,
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def _new_id(self, kind: str) -> int:
        value = self._next_id.get(kind, 0) + 1
        self._next_id[kind] = value
        return value

    def _primary_limit(
        self, status: int, reset_at: int | None, retry_after: int | None
    ) -> FakeResponse:
        fixture = self._fixtures["primary_429" if status == 429 else "primary_403"]
        headers = {k: v for k, v in fixture["headers"].items() if k != "date"}
        headers["x-ratelimit-limit"] = str(self.rate_limit)
        headers["x-ratelimit-used"] = str(self.rate_limit)
        headers["x-ratelimit-remaining"] = "0"
        headers["x-ratelimit-reset"] = str(
            reset_at if reset_at is not None else self.rate_limit_reset
        )
        headers["x-ratelimit-resource"] = "core"
        return _limit_response(status, fixture["body"], headers, retry_after)

    def _time(self, value: Timestamp | None) -> datetime:
        if value is not None:
            return _to_datetime(value)
        self._clock += timedelta(minutes=1)
        return self._clock

    def _touch(self, issue: FakeIssue, when: datetime) -> None:
        issue.updated_at = max(issue.updated_at, when)
        issue._cache = None
        self._repo(issue.owner, issue.repo).version += 1

    def _repo(
        self, owner: str, repo: str, *, create: bool = False, repo_id: int | None = None
    ) -> _Repo:
        found = self._repos.get((owner, repo))
        if found is None:
            if not create:
                raise KeyError(f"no repository {owner}/{repo}; add_issue or add_repo first")
            ident = repo_id if repo_id is not None else 1_296_268 + self._new_id("repo")
            found = _Repo(owner=owner, name=repo, id=ident)
            self._prepare_templates(found)
            self._repos[(owner, repo)] = found
            self._repos_by_id[ident] = found
        return found

    def _issue(self, owner: str, repo: str, number: int) -> FakeIssue:
        issue = self._repo(owner, repo).issues.get(number)
        if issue is None:
            raise KeyError(f"{owner}/{repo} has no issue #{number}")
        return issue

    def _pull(self, owner: str, repo: str, number: int) -> FakeIssue:
        issue = self._issue(owner, repo, number)
        if not issue.is_pull_request:
            raise ValueError(f"{owner}/{repo}#{number} is an issue, not a pull request")
        return issue

    # == rendering ===================================================================

    def _prepare_templates(self, r: _Repo) -> None:
        api, html = self.base_url, self.html_url
        replacements = [
            (f"{_FIXTURE_API}/repos/{_FIXTURE_REPO}", f"{api}/repos/{r.owner}/{r.name}"),
            (f"{_FIXTURE_API}/users/octocat", f"{api}/users/{r.owner}"),
            (_FIXTURE_API, api),
            (f"{_FIXTURE_HTML}/{_FIXTURE_REPO}", f"{html}/{r.owner}/{r.name}"),
            (f"{_FIXTURE_HTML}/octocat", f"{html}/{r.owner}"),
            (_FIXTURE_HTML, html),
            ("git:github.com/octocat/Hello-World", f"git:github.com/{r.owner}/{r.name}"),
            ("git@github.com:octocat/Hello-World", f"git@github.com:{r.owner}/{r.name}"),
        ]
        for key in (
            "issue",
            "comment",
            "repo_event",
            "review",
            "pull",
            "review_comment",
            "timeline",
            "timeline_references",
        ):
            r.templates[key] = _replace_strings(self._fixtures[key], replacements)
        r.templates["issue_events"] = _replace_strings(self._fixtures["issue_events"], replacements)
        repo_json = copy.deepcopy(r.templates["pull"]["base"]["repo"])
        repo_json.update(
            id=r.id,
            node_id=_node_id("Repository", r.id),
            name=r.name,
            full_name=f"{r.owner}/{r.name}",
            owner=self._user(r.owner),
        )
        r.repo_json = repo_json

    def _user(self, login: str) -> Json:
        user = self._users.get(login)
        if user is None:
            ident = self._new_id("user")
            template = self._fixtures["issue"]["user"]
            user = _replace_strings(
                template,
                [
                    (f"{_FIXTURE_API}/users/octocat", f"{self.base_url}/users/{login}"),
                    (f"{_FIXTURE_HTML}/octocat", f"{self.html_url}/{login}"),
                ],
            )
            user.update(login=login, id=ident, node_id=_node_id("User", ident))
            self._users[login] = user
        return user

    def _label(self, r: _Repo, name: str) -> Json:
        ident = self._labels.get(name)
        if ident is None:
            ident = self._labels[name] = 208_045_946 + len(self._labels)
        label = dict(r.templates["issue"]["labels"][0])
        label.update(
            id=ident,
            node_id=_node_id("Label", ident),
            url=f"{self.base_url}/repos/{r.owner}/{r.name}/labels/{name}",
            name=name,
            description=None,
            default=False,
        )
        return label

    def _issue_json(self, r: _Repo, issue: FakeIssue) -> Json:
        api = f"{self.base_url}/repos/{r.owner}/{r.name}"
        html = f"{self.html_url}/{r.owner}/{r.name}"
        n = issue.number
        data = dict(r.templates["issue"])
        data.update(
            id=issue.id,
            node_id=_node_id("Issue", issue.id),
            url=f"{api}/issues/{n}",
            labels_url=f"{api}/issues/{n}/labels{{/name}}",
            comments_url=f"{api}/issues/{n}/comments",
            events_url=f"{api}/issues/{n}/events",
            html_url=f"{html}/{'pull' if issue.is_pull_request else 'issues'}/{n}",
            number=n,
            state=issue.state,
            title=issue.title,
            body=issue.body,
            user=self._user(issue.user),
            labels=[self._label(r, name) for name in issue.labels],
            assignee=None,
            assignees=[],
            milestone=None,
            locked=False,
            active_lock_reason=None,
            comments=issue.comments,
            closed_at=_iso(issue.closed_at),
            created_at=_iso(issue.created_at),
            updated_at=_iso(issue.updated_at),
            closed_by=self._user(issue.closed_by) if issue.closed_by else None,
            state_reason=issue.state_reason,
        )
        if issue.is_pull_request:
            # merged_at is in GitHub's issue schema (not in the RAD example's item).
            data["pull_request"] = {
                "merged_at": _iso(issue.merged_at),
                "url": f"{api}/pulls/{n}",
                "html_url": f"{html}/pull/{n}",
                "diff_url": f"{html}/pull/{n}.diff",
                "patch_url": f"{html}/pull/{n}.patch",
            }
        else:
            data.pop("pull_request", None)
        return data

    def _issue_bytes(self, r: _Repo, issue: FakeIssue) -> bytes:
        if issue._cache is None:
            issue._cache = compact_json(self._issue_json(r, issue))
        return issue._cache

    def _comment_bytes(self, r: _Repo, c: FakeComment) -> bytes:
        if c._cache is None:
            api = f"{self.base_url}/repos/{r.owner}/{r.name}"
            data = dict(r.templates["comment"])
            data.update(
                id=c.id,
                node_id=_node_id("IssueComment", c.id),
                url=f"{api}/issues/comments/{c.id}",
                html_url=f"{self.html_url}/{r.owner}/{r.name}/issues/{c.issue_number}"
                f"#issuecomment-{c.id}",
                body=c.body,
                user=self._user(c.user),
                created_at=_iso(c.created_at),
                updated_at=_iso(c.updated_at),
                issue_url=f"{api}/issues/{c.issue_number}",
            )
            c._cache = compact_json(data)
        return c._cache

    def _event_json(self, r: _Repo, e: FakeEvent, *, with_issue: bool) -> Json:
        api = f"{self.base_url}/repos/{r.owner}/{r.name}"
        templates = {t["event"]: t for t in r.templates["issue_events"]}
        data = dict(templates.get(e.event, templates["reopened"]))
        data.pop("label", None)
        data.update(
            id=e.id,
            node_id=_node_id("IssueEvent", e.id),
            url=f"{api}/issues/events/{e.id}",
            actor=self._user(e.actor),
            event=e.event,
            commit_id=e.commit_id,
            commit_url=f"{api}/commits/{e.commit_id}" if e.commit_id else None,
            created_at=_iso(e.created_at),
        )
        if e.label is not None:
            data["label"] = {"name": e.label, "color": "ededed"}
        if with_issue:
            found = r.issues.get(e.issue_number)
            if found is None:  # deleted or transferred since: only what still names it
                data["issue"] = {"number": e.issue_number}
            else:
                issue = self._issue_json(r, found)
                issue.pop("closed_by", None)  # the fixture's embedded issue has no closed_by
                data["issue"] = issue
        return data

    def _review_json(self, r: _Repo, v: FakeReview) -> Json:
        api = f"{self.base_url}/repos/{r.owner}/{r.name}"
        html = f"{self.html_url}/{r.owner}/{r.name}/pull/{v.pull_number}#pullrequestreview-{v.id}"
        data = dict(r.templates["review"])
        data.update(
            id=v.id,
            node_id=_node_id("PullRequestReview", v.id),
            user=self._user(v.user),
            body=v.body,
            state=v.state,
            html_url=html,
            pull_request_url=f"{api}/pulls/{v.pull_number}",
            _links={
                "html": {"href": html},
                "pull_request": {"href": f"{api}/pulls/{v.pull_number}"},
            },
            submitted_at=_iso(v.submitted_at),
            commit_id=v.commit_id,
        )
        return data

    def _review_comment_bytes(self, r: _Repo, c: FakeReviewComment) -> bytes:
        if c._cache is None:
            api = f"{self.base_url}/repos/{r.owner}/{r.name}"
            html = f"{self.html_url}/{r.owner}/{r.name}/pull/{c.pull_number}#discussion_r{c.id}"
            data = dict(r.templates["review_comment"])
            data.update(
                url=f"{api}/pulls/comments/{c.id}",
                id=c.id,
                node_id=_node_id("PullRequestReviewComment", c.id),
                path=c.path,
                in_reply_to_id=c.in_reply_to_id,
                user=self._user(c.user),
                body=c.body,
                created_at=_iso(c.created_at),
                updated_at=_iso(c.updated_at),
                html_url=html,
                pull_request_url=f"{api}/pulls/{c.pull_number}",
                _links={
                    "self": {"href": f"{api}/pulls/comments/{c.id}"},
                    "html": {"href": html},
                    "pull_request": {"href": f"{api}/pulls/{c.pull_number}"},
                },
                line=c.line,
                original_line=c.line,
                start_line=None,
                original_start_line=None,
            )
            if c.in_reply_to_id is None:
                data.pop("in_reply_to_id", None)  # the schema's field is optional
            c._cache = compact_json(data)
        return c._cache

    def _commented_json(self, r: _Repo, c: FakeComment) -> Json:
        template = next(t for t in r.templates["timeline"] if t["event"] == "commented")
        data = dict(template)
        comment = dict(_decode(self._comment_bytes(r, c)))
        data.update({k: comment[k] for k in ("id", "node_id", "url", "html_url", "issue_url")})
        data.update(
            body=c.body,
            user=self._user(c.user),
            actor=self._user(c.user),
            created_at=_iso(c.created_at),
            updated_at=_iso(c.updated_at),
        )
        return data

    def _cross_reference_json(self, r: _Repo, x: FakeCrossReference) -> Json:
        template = next(
            t for t in r.templates["timeline_references"] if t["event"] == "cross-referenced"
        )
        source_repo = self._repo(x.source_owner, x.source_repo)
        source = source_repo.issues.get(x.source_number)
        data = dict(template)
        data.update(
            actor=self._user(x.actor),
            created_at=_iso(x.created_at),
            updated_at=_iso(x.created_at),
        )
        if source is not None:  # a deleted source leaves the timeline with it
            data["source"] = {"type": "issue", "issue": self._issue_json(source_repo, source)}
        return data

    def _commit_json(self, r: _Repo, m: FakeCommit) -> Json:
        template = next(t for t in r.templates["timeline_references"] if t["event"] == "committed")
        api = f"{self.base_url}/repos/{r.owner}/{r.name}"
        person = {
            "date": _iso(m.committed_at),
            "name": m.author_name,
            "email": "octocat@github.com",
        }
        data = dict(template)
        data.update(
            sha=m.sha,
            node_id=_node_id("Commit", int(m.sha[:8], 16)),
            url=f"{api}/git/commits/{m.sha}",
            html_url=f"{self.html_url}/{r.owner}/{r.name}/commit/{m.sha}",
            author=person,
            committer=dict(person),
            message=m.message,
        )
        return data

    def _pull_json(self, r: _Repo, issue: FakeIssue) -> Json:
        api = f"{self.base_url}/repos/{r.owner}/{r.name}"
        html = f"{self.html_url}/{r.owner}/{r.name}"
        n = issue.number
        template = r.templates["pull"]
        data = dict(template)
        pull_id = issue.pull_id or issue.id
        head = dict(template["head"], repo=r.repo_json, user=self._user(r.owner))
        base = dict(template["base"], repo=r.repo_json, user=self._user(r.owner))
        data.update(
            url=f"{api}/pulls/{n}",
            id=pull_id,
            node_id=_node_id("PullRequest", pull_id),
            html_url=f"{html}/pull/{n}",
            diff_url=f"{html}/pull/{n}.diff",
            patch_url=f"{html}/pull/{n}.patch",
            issue_url=f"{api}/issues/{n}",
            commits_url=f"{api}/pulls/{n}/commits",
            review_comments_url=f"{api}/pulls/{n}/comments",
            comments_url=f"{api}/issues/{n}/comments",
            number=n,
            state=issue.state,
            locked=False,
            title=issue.title,
            user=self._user(issue.user),
            body=issue.body,
            labels=[self._label(r, name) for name in issue.labels],
            milestone=None,
            active_lock_reason=None,
            created_at=_iso(issue.created_at),
            updated_at=_iso(issue.updated_at),
            closed_at=_iso(issue.closed_at),
            merged_at=_iso(issue.merged_at),
            assignee=None,
            assignees=[],
            requested_reviewers=[],
            requested_teams=[],
            head=head,
            base=base,
            _links={
                "self": {"href": f"{api}/pulls/{n}"},
                "html": {"href": f"{html}/pull/{n}"},
                "issue": {"href": f"{api}/issues/{n}"},
                "comments": {"href": f"{api}/issues/{n}/comments"},
                "review_comments": {"href": f"{api}/pulls/{n}/comments"},
                "review_comment": {"href": f"{api}/pulls/comments{{/number}}"},
                "commits": {"href": f"{api}/pulls/{n}/commits"},
                "statuses": template["_links"]["statuses"],
            },
            auto_merge=None,
            draft=False,
        )
        return data

    # == request handling ============================================================

    def after_request(self, action: Callable[[RecordedRequest], None]) -> None:
        """Call ``action(request)`` after each request is answered and before the next
        one is, e.g. to edit an issue between two page requests as a user would."""
        with self._lock:
            self._after.append(action)

    def handle(self, request: RecordedRequest) -> FakeResponse:
        with self._lock:
            response = self._answer(request)
            for action in self._after:
                action(request)
            return response

    def _answer(self, request: RecordedRequest) -> FakeResponse:
        with self._lock:
            for rule in self._rules:
                if rule.matches(request):
                    rule.served += 1
                    return rule.response
            try:
                self._authorize(request)
                if request.method not in ("GET", "HEAD"):
                    raise _HTTPError(404, "Not Found", "https://docs.github.com/rest")
                if request.path == "/rate_limit":
                    return self._json_response(request, self._rate_limit_json(), charge=False)
                if self.enforce_rate_limit and self.rate_limit_used >= self.rate_limit:
                    # As GitHub answers a token whose hourly budget is spent.
                    return self._primary_limit(403, None, None)
                return self._route(request)
            except _HTTPError as exc:
                body = {
                    "message": exc.message,
                    "documentation_url": exc.documentation_url,
                    "status": str(exc.status),
                }
                return FakeResponse(
                    exc.status, compact_json(body), json_headers(self._rate_headers())
                )

    def _authorize(self, request: RecordedRequest) -> None:
        if self.token is None:
            return
        given = request.headers.get("authorization", "")
        if given not in (f"token {self.token}", f"Bearer {self.token}"):
            raise _HTTPError(401, "Bad credentials", "https://docs.github.com/rest")

    def _route(self, request: RecordedRequest) -> FakeResponse:
        parts = request.path.strip("/").split("/")
        if parts[0] == "repos" and len(parts) >= 3:
            r = self._repos.get((parts[1], parts[2]))
            rest = parts[3:]
        elif parts[0] == "repositories" and len(parts) >= 2 and parts[1].isdigit():
            r = self._repos_by_id.get(int(parts[1]))
            rest = parts[2:]
        else:
            raise _HTTPError(404, "Not Found", "https://docs.github.com/rest")
        if r is None:
            raise _HTTPError(
                404, "Not Found", "https://docs.github.com/rest/repos/repos#get-a-repository"
            )
        match rest:
            case []:
                return self._json_response(request, r.repo_json)
            case ["issues"]:
                return self._list_issues(request, r)
            case ["issues", "comments"]:
                return self._list_comments(request, r, None)
            case ["issues", "events"]:
                events = sorted(r.events, key=lambda e: e.id, reverse=True)
                return self._paginate(
                    request,
                    r,
                    events,
                    lambda e: compact_json(self._event_json(r, e, with_issue=True)),
                )
            case ["issues", number] if number.isdigit() and int(number) in r.gone:
                moved_to = r.gone[int(number)]
                if moved_to is None:
                    raise _HTTPError(
                        410, "This issue was deleted", "https://docs.github.com/rest/issues"
                    )
                body = {"message": "Moved Permanently", "url": moved_to}
                return FakeResponse(301, compact_json(body), json_headers([("location", moved_to)]))
            case ["issues", number] if number.isdigit():
                issue = self._find_issue(r, int(number))
                return self._json_response(request, self._issue_json(r, issue))
            case ["issues", number, "comments"] if number.isdigit():
                return self._list_comments(request, r, self._find_issue(r, int(number)))
            case ["issues", number, "events"] if number.isdigit():
                n = self._find_issue(r, int(number)).number
                events = [e for e in r.events if e.issue_number == n]
                return self._paginate(
                    request,
                    r,
                    events,
                    lambda e: compact_json(self._event_json(r, e, with_issue=False)),
                )
            case ["issues", number, "timeline"] if number.isdigit():
                return self._timeline(request, r, self._find_issue(r, int(number)))
            case ["pulls", "comments"]:
                return self._list_review_comments(request, r)
            case ["pulls", "comments", ident] if ident.isdigit():
                found = r.review_comments.get(int(ident))
                if found is None:
                    raise _HTTPError(
                        404,
                        "Not Found",
                        "https://docs.github.com/rest/pulls/comments#get-a-review-comment-for-a-pull-request",
                    )
                return self._respond(request, self._review_comment_bytes(r, found), [])
            case ["pulls"]:
                return self._list_pulls(request, r)
            case ["pulls", number] if number.isdigit():
                return self._json_response(request, self._pull_json(r, self._find_pull(r, number)))
            case ["pulls", number, "reviews"] if number.isdigit():
                pull = self._find_pull(r, number)
                reviews = sorted(r.reviews.get(pull.number, []), key=lambda v: v.id)
                return self._paginate(
                    request, r, reviews, lambda v: compact_json(self._review_json(r, v))
                )
        raise _HTTPError(404, "Not Found", "https://docs.github.com/rest")

    def _find_issue(self, r: _Repo, number: int) -> FakeIssue:
        issue = r.issues.get(number)
        if issue is None:
            raise _HTTPError(
                404, "Not Found", "https://docs.github.com/rest/issues/issues#get-an-issue"
            )
        return issue

    def _find_pull(self, r: _Repo, number: str) -> FakeIssue:
        issue = r.issues.get(int(number))
        if issue is None or not issue.is_pull_request:
            raise _HTTPError(
                404, "Not Found", "https://docs.github.com/rest/pulls/pulls#get-a-pull-request"
            )
        return issue

    def _sorted_view(
        self, r: _Repo, name: str, items: Callable[[], Iterable[T]], key: Callable[[T], Any]
    ) -> tuple[list[T], list[Any]]:
        """Items sorted ascending by ``key`` plus the keys, cached until the repo changes."""
        cached = r.views.get(name)
        if cached is None or cached[0] != r.version:
            ordered = sorted(items(), key=key)
            cached = (r.version, ordered, [key(i) for i in ordered])
            r.views[name] = cached
        return cached[1], cached[2]

    @staticmethod
    def _since(request: RecordedRequest) -> datetime | None:
        raw = request.param("since")
        if not raw:
            return None
        try:
            return _to_datetime(raw)
        except ValueError:
            raise _HTTPError(422, "Validation Failed", "https://docs.github.com/rest") from None

    @staticmethod
    def _choice(request: RecordedRequest, name: str, allowed: Sequence[str], default: str) -> str:
        value = request.param(name) or default
        if value not in allowed:
            raise _HTTPError(422, "Validation Failed", "https://docs.github.com/rest")
        return value

    def _list_issues(self, request: RecordedRequest, r: _Repo) -> FakeResponse:
        state = self._choice(request, "state", ("open", "closed", "all"), "open")
        sort = self._choice(request, "sort", ("created", "updated", "comments"), "created")
        direction = self._choice(request, "direction", ("asc", "desc"), "desc")
        since = self._since(request)
        if sort == "updated":
            ordered, keys = self._sorted_view(
                r, "issues:updated", r.issues.values, lambda i: (i.updated_at, i.number)
            )
            start = bisect.bisect_left(keys, (since, -1)) if since is not None else 0
            selected = ordered[start:]
        else:
            attr = "created_at" if sort == "created" else "comments"
            ordered, _ = self._sorted_view(
                r, f"issues:{sort}", r.issues.values, lambda i: (getattr(i, attr), i.number)
            )
            selected = ordered if since is None else [i for i in ordered if i.updated_at >= since]
        if state != "all":
            selected = [i for i in selected if i.state == state]
        if direction == "desc":
            selected = selected[::-1]
        return self._paginate(request, r, selected, lambda i: self._issue_bytes(r, i))

    def _list_comments(
        self, request: RecordedRequest, r: _Repo, issue: FakeIssue | None
    ) -> FakeResponse:
        since = self._since(request)
        if issue is not None:
            selected = sorted(
                (c for c in r.comments.values() if c.issue_number == issue.number),
                key=lambda c: c.id,
            )
            if since is not None:
                selected = [c for c in selected if c.updated_at >= since]
            return self._paginate(request, r, selected, lambda c: self._comment_bytes(r, c))
        sort_given = request.param("sort") is not None
        sort = self._choice(request, "sort", ("created", "updated"), "created")
        # GitHub: "direction ... Ignored without the sort parameter."
        direction = (
            self._choice(request, "direction", ("asc", "desc"), "desc") if sort_given else "asc"
        )
        if sort == "updated":
            ordered, keys = self._sorted_view(
                r, "comments:updated", r.comments.values, lambda c: (c.updated_at, c.id)
            )
            start = bisect.bisect_left(keys, (since, -1)) if since is not None else 0
            selected = ordered[start:]
        else:
            ordered, _ = self._sorted_view(
                r, "comments:created", r.comments.values, lambda c: (c.created_at, c.id)
            )
            selected = ordered if since is None else [c for c in ordered if c.updated_at >= since]
        if direction == "desc":
            selected = selected[::-1]
        return self._paginate(request, r, selected, lambda c: self._comment_bytes(r, c))

    def _list_review_comments(self, request: RecordedRequest, r: _Repo) -> FakeResponse:
        """``/pulls/comments``: ``sort`` created | updated | created_at, ``direction``
        (ignored without ``sort``), ``since`` on ``updated_at``; without ``sort``
        ascending by id ("By default, review comments are in ascending order by ID")."""
        since = self._since(request)
        sort_given = request.param("sort") is not None
        sort = self._choice(request, "sort", ("created", "updated", "created_at"), "created")
        direction = (
            self._choice(request, "direction", ("asc", "desc"), "desc") if sort_given else "asc"
        )
        if sort == "updated":
            ordered, keys = self._sorted_view(
                r,
                "review_comments:updated",
                r.review_comments.values,
                lambda c: (c.updated_at, c.id),
            )
            start = bisect.bisect_left(keys, (since, -1)) if since is not None else 0
            selected = ordered[start:]
        else:
            by = (lambda c: (c.created_at, c.id)) if sort_given else (lambda c: (c.id,))
            ordered, _ = self._sorted_view(
                r, f"review_comments:{sort}:{sort_given}", r.review_comments.values, by
            )
            selected = ordered if since is None else [c for c in ordered if c.updated_at >= since]
        if direction == "desc":
            selected = selected[::-1]
        return self._paginate(request, r, selected, lambda c: self._review_comment_bytes(r, c))

    def _timeline(self, request: RecordedRequest, r: _Repo, issue: FakeIssue) -> FakeResponse:
        """``/issues/{n}/timeline``, oldest first: the issue's comments (``commented``),
        its events, cross-references and commits."""
        n = issue.number
        items: list[tuple[datetime, int, Callable[[], Json]]] = []
        for c in r.comments.values():
            if c.issue_number == n:
                items.append((c.created_at, c.id, partial(self._commented_json, r, c)))
        for e in r.events:
            if e.issue_number == n:
                items.append(
                    (e.created_at, e.id, partial(self._event_json, r, e, with_issue=False))
                )
        for x in r.cross_references:
            if x.number == n:
                items.append((x.created_at, 0, partial(self._cross_reference_json, r, x)))
        for m in r.commits:
            if m.number == n:
                items.append((m.committed_at, 0, partial(self._commit_json, r, m)))
        items.sort(key=lambda item: (item[0], item[1]))
        return self._paginate(request, r, items, lambda item: compact_json(item[2]()))

    def _list_pulls(self, request: RecordedRequest, r: _Repo) -> FakeResponse:
        state = self._choice(request, "state", ("open", "closed", "all"), "open")
        sort = self._choice(
            request, "sort", ("created", "updated", "popularity", "long-running"), "created"
        )
        direction = self._choice(request, "direction", ("asc", "desc"), "desc")
        attr = "updated_at" if sort == "updated" else "created_at"
        pulls = [i for i in r.issues.values() if i.is_pull_request]
        if state != "all":
            pulls = [i for i in pulls if i.state == state]
        pulls.sort(key=lambda i: (getattr(i, attr), i.number), reverse=direction == "desc")
        return self._paginate(request, r, pulls, lambda i: compact_json(self._pull_json(r, i)))

    # -- responses ---------------------------------------------------------------------

    def _rate_headers(self) -> list[tuple[str, str]]:
        return [
            ("x-ratelimit-limit", str(self.rate_limit)),
            ("x-ratelimit-remaining", str(max(0, self.rate_limit - self.rate_limit_used))),
            ("x-ratelimit-reset", str(self.rate_limit_reset)),
            ("x-ratelimit-used", str(self.rate_limit_used)),
            ("x-ratelimit-resource", "core"),
        ]

    def _rate_limit_json(self) -> Json:
        data = copy.deepcopy(self._fixtures["rate_limit"])
        core = {
            "limit": self.rate_limit,
            "used": self.rate_limit_used,
            "remaining": max(0, self.rate_limit - self.rate_limit_used),
            "reset": self.rate_limit_reset,
        }
        data["resources"]["core"] = core
        data["rate"] = dict(core)
        return data

    def _json_response(
        self, request: RecordedRequest, data: Json, *, charge: bool = True
    ) -> FakeResponse:
        return self._respond(request, compact_json(data), [], charge=charge)

    def _respond(
        self,
        request: RecordedRequest,
        body: bytes,
        extra: list[tuple[str, str]],
        *,
        charge: bool = True,
    ) -> FakeResponse:
        etag = f'W/"{hashlib.sha256(body).hexdigest()}"'
        if _etag_matches(request.headers.get("if-none-match"), etag):
            self.not_modified_count += 1
            return FakeResponse(304, b"", [("ETag", etag), *self._rate_headers(), *extra])
        if charge:
            self.rate_limit_used += 1
        headers = json_headers([("ETag", etag), *self._rate_headers(), *extra])
        return FakeResponse(200, body, headers)

    def _paginate(
        self,
        request: RecordedRequest,
        r: _Repo,
        items: Sequence[T],
        render: Callable[[T], bytes],
    ) -> FakeResponse:
        per_page = _int_param(request, "per_page", 30)
        per_page = 30 if per_page < 1 else min(per_page, 100)
        page = max(1, _int_param(request, "page", 1))
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        body = b"[" + b",".join(render(item) for item in chunk) + b"]"
        link = self._link_header(request, r, page, last)
        return self._respond(request, body, [("Link", link)] if link else [])

    def _link_header(self, request: RecordedRequest, r: _Repo, page: int, last: int) -> str | None:
        if page == 1 and last == 1:
            return None
        parts = request.path.strip("/").split("/")
        rest = parts[3:] if parts[0] == "repos" else parts[2:]
        path = "/".join(["repositories", str(r.id), *rest])
        params = [(k, v) for k, values in request.query.items() if k != "page" for v in values]

        def url(n: int) -> str:
            return f"<{self.base_url}/{path}?{urlencode([*params, ('page', str(n))])}>"

        links = []
        if page > 1:
            links.append(f'{url(min(page - 1, last))}; rel="prev"')
        if page < last:
            links.append(f'{url(page + 1)}; rel="next"')
            links.append(f'{url(last)}; rel="last"')
        if page > 1:
            links.append(f'{url(1)}; rel="first"')
        return ", ".join(links)


def _limit_response(
    status: int, body: Json, headers: dict[str, str], retry_after: int | None
) -> FakeResponse:
    if retry_after is not None:
        headers = {**headers, "retry-after": str(retry_after)}
    pairs = [("Content-Type", "application/json; charset=utf-8")]
    pairs += [(k, v) for k, v in headers.items() if k != "content-type"]
    return FakeResponse(status, compact_json(body), pairs)


def _decode(body: bytes) -> Json:
    return json.loads(body)


def _int_param(request: RecordedRequest, name: str, default: int) -> int:
    raw = request.param(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        return default


def _etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    if header.strip() == "*":
        return True
    wanted = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == wanted for tag in header.split(","))
