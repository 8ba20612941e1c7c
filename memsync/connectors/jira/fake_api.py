"""A scriptable fake of the Jira Cloud REST API v3 (the parts the Jira connector reads).

Responses are rendered from the shapes Atlassian documents, recorded in
``memsync/connectors/fixtures/jira`` (its README cites each example of
https://developer.atlassian.com/cloud/jira/platform/rest/v3/ and the rate-limiting page
https://developer.atlassian.com/cloud/jira/platform/rate-limiting/), with ids, keys,
urls, timestamps and texts overridden. The server is a
:class:`~memsync.connectors.fake_http.FakeHTTPServer`::

    with FakeJira(email="bot@acme.example", token="t", time_zone="Australia/Sydney") as fake:
        issue = fake.add_issue("ENG", "Checkout fails")  # ENG-1, id 10000, updated auto
        fake.edit_issue(issue.id, summary="Checkout fails on Safari")  # bumps updated
        comment = fake.add_comment(issue.id, "Reproduced")  # bumps the issue's updated
        fake.edit_comment(issue.id, comment.id, "Reproduced on 17.2")  # bumps it again
        fake.move_issue(issue.id, "OPS")  # OPS-1, same id
        fake.delete_comment(issue.id, comment.id)
        fake.delete_issue(issue.id)  # gone from the search; its comments answer 404

Timestamps are aware datetimes; omitted ones come from the fake's clock, one minute per
call after ``start`` (JQL compares at minute precision).

Served:

- ``GET /rest/api/3/myself``: ``myself.json`` with ``emailAddress`` and ``timeZone``;
- ``GET /rest/api/3/search/jql``: ``jql`` of the form the connector writes, ``<scope> AND
  updated >= "yyyy-MM-dd HH:mm" ORDER BY updated ASC, key ASC`` (the time read in
  ``time_zone``, as Jira reads it), where ``<scope>`` is ``project in (A, B)`` or a
  parenthesised conjunction of ``project = X`` / ``labels = X`` clauses (anything else
  answers 400 with an ``errorMessages`` body, as Jira does for a JQL it cannot parse);
  ``fields`` (only those fields are rendered; default ``id``), ``maxResults`` (default
  50, at most 5000) and ``nextPageToken``; ``isLast`` on every page and
  ``nextPageToken`` only on pages that are not the last (as documented);
- ``GET /rest/api/3/issue/{idOrKey}/comment``: ``startAt``, ``maxResults`` (default
  100), ``orderBy=created``; ``total``; 404 for an unknown or deleted issue;
- ``GET /rest/api/3/issue/{idOrKey}``: the issue as the search renders it (``fields``
  as there), current (not lagging); 404 for an unknown or deleted issue.

:meth:`FakeJira.webhook_body` renders what a Jira webhook delivers about an issue (and a
comment) the fake holds, from Atlassian's example callback (``webhook_issue_event.variant.json``),
with the text as webhooks carry it (a string, not ADF).

Every request needs basic auth with the configured email and token (else 401).

Misbehaving on purpose:

- ``offset_tokens=True``: ``nextPageToken`` encodes an offset into the result, so an
  issue edited between two page requests (``after_request``) leaves its place and
  shifts the issues after it one place earlier ("shifted pages"); by default the token
  encodes the last issue handed out (a keyset), which nothing shifts;
- ``script_rate_limit(times=1, retry_after=30, path=None)``: the next ``times``
  requests (to ``path`` only, if given) answer 429 with the headers of
  ``error_rate_limited.variant.response.json``; ``limit_budget(n)``: after ``n`` more
  requests, every request answers that 429 until ``limit_budget(None)`` (a storm);
- ``after_request(action)``: ``action(request)`` runs after each answer, before the next
  request is read (edit an issue between two pages);
- ``search_lag`` with ``clock``: the search is eventually consistent, as Atlassian says
  of it ("recent updates might not be immediately visible"): it answers with each issue
  as it was ``search_lag`` before ``clock()`` (a new issue is not found yet, an edit not
  seen yet); the comment lists are current.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from memsync.connectors.fake_http import (
    FakeHTTPServer,
    FakeResponse,
    RecordedRequest,
    compact_json,
    json_headers,
    load_fixture,
)

__all__ = ["FakeJira", "FakeJiraComment", "FakeJiraIssue"]

DEFAULT_START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
_SEARCH = "/rest/api/3/search/jql"
_MYSELF = "/rest/api/3/myself"
_COMMENTS = re.compile(r"^/rest/api/3/issue/(?P<issue>[^/]+)/comment$")
_ISSUE = re.compile(r"^/rest/api/3/issue/(?P<issue>[^/]+)$")
_QUERY = re.compile(
    r'^(?:(?P<scope>.+) AND )?updated >= "(?P<since>\d{4}-\d{2}-\d{2} \d{2}:\d{2})" '
    r"ORDER BY updated ASC, key ASC$"
)
_PROJECTS = re.compile(r"^project in \((?P<keys>[A-Z0-9_, ]+)\)$")
_CLAUSE = re.compile(r"^(?P<field>project|labels) = (?P<value>[A-Za-z0-9_-]+)$")
_MAX_RESULTS = 5000

Json = Any


@dataclass
class FakeJiraComment:
    """One comment: ``id`` is numeric, as Jira's (sent as a string)."""

    id: int
    body: str
    author: str
    created: datetime
    updated: datetime


@dataclass
class FakeJiraIssue:
    """One issue; ``key`` changes when it moves project, ``id`` never does."""

    id: int
    key: str
    project: str
    summary: str
    description: str
    created: datetime
    updated: datetime
    status: str = "Open"
    reporter: str = "5b10a2844c20165700ede21g"
    assignee: str | None = None
    labels: tuple[str, ...] = ()
    comments: list[FakeJiraComment] = field(default_factory=list)


# The category of each status name the fake knows (Jira's default workflows'); any other
# name is work in progress ("indeterminate").
_STATUS_CATEGORIES = {"Open": "new", "To Do": "new", "Done": "done", "Closed": "done"}


def _jira_time(moment: datetime) -> str:
    # Jira's format: milliseconds and a +hhmm offset ("2021-01-17T12:34:00.000+0000").
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
        f"{moment.microsecond // 1000:03d}+0000"
    )


def _order(issue: FakeJiraIssue) -> tuple[datetime, str, int]:
    """``ORDER BY updated ASC, key ASC``: Jira sorts keys by project, then number."""
    return issue.updated, issue.project, int(issue.key.rsplit("-", 1)[1])


def _adf(text: str) -> Json:
    """Text as Atlassian Document Format, the shape of the fixtures' v3 bodies."""
    return {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": text}]}],
    }


class FakeJira(FakeHTTPServer):
    """A Jira Cloud site on 127.0.0.1; see the module docstring."""

    def __init__(
        self,
        *,
        email: str = "bot@acme.example",
        token: str = "jira-token",
        time_zone: str = "UTC",
        start: datetime = DEFAULT_START,
        offset_tokens: bool = False,
        search_lag: timedelta = timedelta(0),
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        super().__init__()
        self._lock = threading.RLock()
        self._auth = "Basic " + base64.b64encode(f"{email}:{token}".encode()).decode()
        self.email = email
        self.time_zone = time_zone
        self.offset_tokens = offset_tokens
        self.search_lag = search_lag
        self._clock = clock
        # What the search index holds of each issue: its versions, oldest first.
        self._versions: dict[int, list[FakeJiraIssue]] = {}
        self._now = start
        self._issues: dict[int, FakeJiraIssue] = {}
        self._next_issue_id = 10000
        self._next_comment_id = 20000
        self._numbers: dict[str, int] = {}
        self._rate_limited: list[tuple[str | None, int]] = []
        self._rate_limit_retry_after = 30
        self._budget: int | None = None
        self._issue_shape: Json = load_fixture("jira", "search_jql_page.variant.json")["issues"][0]
        self._comment_shape: Json = load_fixture("jira", "issue_comments.json")["comments"][0]

    # -- scripting ---------------------------------------------------------------

    def _stamp(self, at: datetime | None) -> datetime:
        if at is not None:
            return at
        self._now += timedelta(minutes=1)
        return self._now

    def _changed(self, issue: FakeJiraIssue) -> FakeJiraIssue:
        """Record the issue's new version for the search index; return the issue."""
        version = copy.copy(issue)
        version.comments = list(issue.comments)
        self._versions.setdefault(issue.id, []).append(version)
        return issue

    def _searchable(self) -> list[FakeJiraIssue]:
        """What the search sees: each issue as it was ``search_lag`` ago (an issue created
        since is not found yet, an edit made since is not seen yet); deleted ones not."""
        if not self.search_lag or self._clock is None:
            return list(self._issues.values())
        horizon = self._clock() - self.search_lag
        seen = []
        for issue_id in self._issues:
            indexed = [v for v in self._versions[issue_id] if v.updated <= horizon]
            if indexed:
                seen.append(indexed[-1])
        return seen

    def _new_key(self, project: str) -> str:
        self._numbers[project] = self._numbers.get(project, 0) + 1
        return f"{project}-{self._numbers[project]}"

    def add_issue(
        self,
        project: str,
        summary: str,
        description: str = "",
        *,
        updated: datetime | None = None,
        labels: tuple[str, ...] = (),
        assignee: str | None = None,
    ) -> FakeJiraIssue:
        with self._lock:
            when = self._stamp(updated)
            issue = FakeJiraIssue(
                id=self._next_issue_id,
                key=self._new_key(project),
                project=project,
                summary=summary,
                description=description,
                created=when,
                updated=when,
                labels=labels,
                assignee=assignee,
            )
            self._next_issue_id += 1
            self._issues[issue.id] = issue
            return self._changed(issue)

    def issue(self, issue_id: int) -> FakeJiraIssue:
        with self._lock:
            return self._issues[issue_id]

    def edit_issue(
        self,
        issue_id: int,
        *,
        summary: str | None = None,
        status: str | None = None,
        at: datetime | None = None,
    ) -> FakeJiraIssue:
        with self._lock:
            issue = self._issues[issue_id]
            issue.summary = summary if summary is not None else issue.summary
            issue.status = status if status is not None else issue.status
            issue.updated = self._stamp(at)
            return self._changed(issue)

    def move_issue(self, issue_id: int, project: str, *, at: datetime | None = None) -> str:
        """Move the issue to ``project``: a new key, the same id; returns the new key."""
        with self._lock:
            issue = self._issues[issue_id]
            issue.project, issue.key = project, self._new_key(project)
            issue.updated = self._stamp(at)
            return self._changed(issue).key

    def delete_issue(self, issue_id: int) -> None:
        with self._lock:
            del self._issues[issue_id]

    def add_comment(
        self,
        issue_id: int,
        body: str,
        *,
        author: str = "5b10a2844c20165700ede21g",
        at: datetime | None = None,
    ) -> FakeJiraComment:
        with self._lock:
            issue = self._issues[issue_id]
            when = self._stamp(at)
            comment = FakeJiraComment(self._next_comment_id, body, author, when, when)
            self._next_comment_id += 1
            issue.comments.append(comment)
            issue.updated = when
            self._changed(issue)
            return comment

    def edit_comment(
        self, issue_id: int, comment_id: int, body: str, *, at: datetime | None = None
    ) -> None:
        with self._lock:
            issue = self._issues[issue_id]
            (comment,) = (c for c in issue.comments if c.id == comment_id)
            comment.body = body
            comment.updated = issue.updated = self._stamp(at)
            self._changed(issue)

    def delete_comment(self, issue_id: int, comment_id: int, *, at: datetime | None = None) -> None:
        with self._lock:
            issue = self._issues[issue_id]
            issue.comments = [c for c in issue.comments if c.id != comment_id]
            issue.updated = self._stamp(at)
            self._changed(issue)

    def webhook_body(
        self,
        event: str,
        issue_id: int,
        *,
        comment_id: int | None = None,
        at: datetime | None = None,
    ) -> bytes:
        """The body Jira delivers for ``event`` (``jira:issue_updated``, ``comment_created``,
        …) about issue ``issue_id`` (and its comment ``comment_id``) as the fake holds them
        now: Atlassian's example callback (``webhook_issue_event.variant.json``, see the
        fixtures README) with ``timestamp`` (``at``, else the issue's ``updated``, in
        milliseconds), ``webhookEvent``, ids, key, project, summary and texts overridden;
        the description and the comment's body are strings, as webhooks carry them, not
        ADF. Unsigned: a test signs it as Jira would, with the webhook's secret."""
        with self._lock:
            issue = self._issues[issue_id]
            payload: dict[str, Json] = load_fixture("jira", "webhook_issue_event.variant.json")
            payload["timestamp"] = int((at or issue.updated).timestamp() * 1000)
            payload["webhookEvent"] = event
            payload.pop("changelog")
            rendered = payload["issue"]
            rendered["id"], rendered["key"] = str(issue.id), issue.key
            rendered["self"] = f"{self.base_url}/rest/api/2/issue/{issue.id}"
            fields = rendered["fields"]
            fields["summary"], fields["description"] = issue.summary, issue.description
            fields["labels"], fields["created"] = list(issue.labels), _jira_time(issue.created)
            fields["project"]["key"] = issue.project
            if comment_id is None:
                payload.pop("comment")
            else:
                (comment,) = (c for c in issue.comments if c.id == comment_id)
                shape = payload["comment"]
                shape["id"], shape["body"] = str(comment.id), comment.body
                shape["self"] = f"{self.base_url}/rest/api/2/issue/{issue.id}/comment/{comment.id}"
                shape["created"], shape["updated"] = (
                    _jira_time(comment.created),
                    _jira_time(comment.updated),
                )
            return compact_json(payload)

    def script_rate_limit(
        self, *, times: int = 1, retry_after: int = 30, path: str | None = None
    ) -> None:
        with self._lock:
            self._rate_limited.append((path, times))
            self._rate_limit_retry_after = retry_after

    def limit_budget(self, requests: int | None, *, retry_after: int = 3600) -> None:
        """After ``requests`` more requests every request answers 429; ``None``: no limit."""
        with self._lock:
            self._budget = requests
            self._rate_limit_retry_after = retry_after

    # -- serving -----------------------------------------------------------------

    def handle(self, request: RecordedRequest) -> FakeResponse:
        with self._lock:
            return self._answer(request)

    def _answer(self, request: RecordedRequest) -> FakeResponse:
        if request.headers.get("authorization") != self._auth:
            return self._error(401, "You are not authenticated. Authentication required.")
        limited = self._rate_limit(request)
        if limited is not None:
            return limited
        if request.method != "GET":
            return self._error(405, f"{request.method} is not served by this fake")
        if request.path == _MYSELF:
            return self._json(self._myself())
        if request.path == _SEARCH:
            return self._search(request)
        match = _COMMENTS.match(request.path)
        if match:
            return self._comments(request, match["issue"])
        match = _ISSUE.match(request.path)
        if match:
            return self._get_issue(request, match["issue"])
        return self._error(404, f"No resource at {request.path}")

    def _rate_limit(self, request: RecordedRequest) -> FakeResponse | None:
        if self._budget is not None:
            if self._budget <= 0:
                return self._too_many()
            self._budget -= 1
        for index, (path, times) in enumerate(self._rate_limited):
            if path is None or path == request.path:
                if times <= 1:
                    del self._rate_limited[index]
                else:
                    self._rate_limited[index] = (path, times - 1)
                return self._too_many()
        return None

    def _too_many(self) -> FakeResponse:
        recorded = load_fixture("jira", "error_rate_limited.variant.response.json")
        headers = dict(recorded["headers"])
        headers["retry-after"] = str(self._rate_limit_retry_after)
        headers.pop("x-ratelimit-reset")  # a time the fake has no clock for
        return FakeResponse(429, compact_json(recorded["body"]), list(headers.items()))

    def _myself(self) -> Json:
        me = load_fixture("jira", "myself.json")
        me["emailAddress"] = self.email
        me["timeZone"] = self.time_zone
        return me

    def _search(self, request: RecordedRequest) -> FakeResponse:
        jql = request.param("jql") or ""
        query = _QUERY.match(jql)
        if query is None:
            return self._error(400, f"Error in the JQL Query: this fake cannot read {jql!r}.")
        keep = self._scope(query["scope"])
        if keep is None:
            return self._error(400, f"Error in the JQL Query: unsupported scope in {jql!r}.")
        local = datetime.strptime(query["since"], "%Y-%m-%d %H:%M")
        since = local.replace(tzinfo=ZoneInfo(self.time_zone)).astimezone(UTC)
        found = sorted(
            (i for i in self._searchable() if i.updated >= since and keep(i)),
            key=_order,
        )
        size = min(int(request.param("maxResults") or 50), _MAX_RESULTS)
        start = self._page_start(found, request.param("nextPageToken"))
        page = found[start : start + size]
        wanted = set((request.param("fields") or "id").split(","))
        body: dict[str, Json] = {
            "issues": [self._render_issue(i, wanted) for i in page],
            "isLast": start + size >= len(found),
        }
        if not body["isLast"]:
            body["nextPageToken"] = self._token(start + size, page[-1])
        return self._json(body)

    def _scope(self, scope: str | None) -> Callable[[FakeJiraIssue], bool] | None:
        if scope is None:
            return lambda issue: True
        projects = _PROJECTS.match(scope)
        if projects:
            keys = {key.strip() for key in projects["keys"].split(",")}
            return lambda issue: issue.project in keys
        if not (scope.startswith("(") and scope.endswith(")")):
            return None
        clauses: list[tuple[str, str]] = []
        for clause in scope[1:-1].split(" AND "):
            match = _CLAUSE.match(clause.strip())
            if match is None:
                return None
            clauses.append((match["field"], match["value"]))

        def keep(issue: FakeJiraIssue) -> bool:
            return all(
                issue.project == value if name == "project" else value in issue.labels
                for name, value in clauses
            )

        return keep

    def _token(self, offset: int, last: FakeJiraIssue) -> str:
        updated, project, number = _order(last)
        after = [updated.isoformat(), project, number]
        state = {"offset": offset} if self.offset_tokens else {"after": after}
        return base64.urlsafe_b64encode(json.dumps(state).encode()).decode()

    def _page_start(self, found: list[FakeJiraIssue], token: str | None) -> int:
        if not token:
            return 0
        state = json.loads(base64.urlsafe_b64decode(token.encode()))
        if "offset" in state:
            return int(state["offset"])
        updated, project, number = state["after"]
        after = (datetime.fromisoformat(updated), project, number)
        for index, issue in enumerate(found):
            if _order(issue) > after:
                return index
        return len(found)

    def _render_issue(self, issue: FakeJiraIssue, wanted: set[str]) -> Json:
        rendered = copy.deepcopy(self._issue_shape)
        rendered["id"] = str(issue.id)
        rendered["key"] = issue.key
        rendered["self"] = f"{self.base_url}/rest/api/3/issue/{issue.id}"
        fields = rendered["fields"]
        fields["summary"] = issue.summary
        fields["description"] = _adf(issue.description)
        fields["status"]["name"] = issue.status
        # StatusDetails.statusCategory (JIRAOAS): what the status means, whatever its name.
        fields["status"]["statusCategory"] = {
            "key": _STATUS_CATEGORIES.get(issue.status, "indeterminate")
        }
        fields["project"]["key"] = issue.project
        fields["project"]["id"] = str(10000 + list(self._numbers).index(issue.project))
        fields["project"]["self"] = f"{self.base_url}/rest/api/3/project/{issue.project}"
        fields["created"] = _jira_time(issue.created)
        fields["updated"] = _jira_time(issue.updated)
        fields["reporter"]["accountId"] = issue.reporter
        fields["assignee"] = (
            None if issue.assignee is None else {**fields["reporter"], "accountId": issue.assignee}
        )
        fields["labels"] = list(issue.labels)
        fields["comment"] = [self._render_comment(issue, c) for c in issue.comments]
        if "*all" not in wanted:
            rendered["fields"] = {name: value for name, value in fields.items() if name in wanted}
        return rendered

    def _render_comment(self, issue: FakeJiraIssue, comment: FakeJiraComment) -> Json:
        rendered = copy.deepcopy(self._comment_shape)
        rendered["id"] = str(comment.id)
        rendered["self"] = f"{self.base_url}/rest/api/3/issue/{issue.id}/comment/{comment.id}"
        rendered["body"] = _adf(comment.body)
        rendered["author"]["accountId"] = comment.author
        rendered["created"] = _jira_time(comment.created)
        rendered["updated"] = _jira_time(comment.updated)
        return rendered

    def _find(self, id_or_key: str) -> FakeJiraIssue | None:
        if id_or_key.isdigit():
            return self._issues.get(int(id_or_key))
        return next((i for i in self._issues.values() if i.key == id_or_key), None)

    def _get_issue(self, request: RecordedRequest, id_or_key: str) -> FakeResponse:
        issue = self._find(id_or_key)
        if issue is None:
            return self._not_found()
        return self._json(
            self._render_issue(issue, set((request.param("fields") or "*all").split(",")))
        )

    @staticmethod
    def _not_found() -> FakeResponse:
        recorded = load_fixture("jira", "error_issue_not_found.variant.response.json")
        return FakeResponse(404, compact_json(recorded["body"]), json_headers())

    def _comments(self, request: RecordedRequest, id_or_key: str) -> FakeResponse:
        issue = self._find(id_or_key)
        if issue is None:
            return self._not_found()
        start = int(request.param("startAt") or 0)
        size = int(request.param("maxResults") or 100)
        comments = sorted(issue.comments, key=lambda c: (c.created, c.id))
        return self._json(
            {
                "comments": [
                    self._render_comment(issue, c) for c in comments[start : start + size]
                ],
                "maxResults": size,
                "startAt": start,
                "total": len(comments),
            }
        )

    @staticmethod
    def _json(body: Json) -> FakeResponse:
        return FakeResponse(200, compact_json(body), json_headers())

    @staticmethod
    def _error(status: int, message: str) -> FakeResponse:
        return FakeResponse(
            status, compact_json({"errorMessages": [message], "errors": {}}), json_headers()
        )
