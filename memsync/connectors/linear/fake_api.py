"""A scriptable fake of Linear's GraphQL API (the documents the Linear connector sends).

``POST {base_url}/graphql`` with a JSON body ``{"query", "variables",
"operationName"}`` and the API key in ``Authorization``, as Linear documents it
(https://linear.app/developers/graphql). The server is a
:class:`~memsync.connectors.fake_http.FakeHTTPServer`::

    with FakeLinear(token="lin_api_test") as fake:
        fake.add_team("ENG")
        issue = fake.add_issue("ENG", "Checkout times out")   # updatedAt: the fake's clock
        comment = fake.add_comment(issue.id, "Reproduced.")
        fake.edit_comment(comment.id, "Reproduced with 250 items.")  # editedAt, updatedAt
        fake.archive_issue(issue.id)                             # archivedAt (and updatedAt)

Shapes: every node is built from the recorded shapes in
``memsync/connectors/fixtures/linear`` (their README says where each comes from),
overriding ids, numbers, identifiers, timestamps and texts.

Served: the root fields ``organization``, ``issues`` and ``comments`` (recognised in the
query text; any other document is a bug in the caller and fails the test), with the
fields the connector's documents select. ``issues`` / ``comments`` take
``filter`` (``and`` / ``or`` lists; ``updatedAt``, ``createdAt``, ``archivedAt`` with
``gte`` / ``gt`` / ``lte`` / ``lt`` / ``eq``; ``id: {eq | in}``; ``team: {key: {in |
eq}}``, and for comments ``issue: {team: ...}``), ``first`` (default 50, at most 250,
as Linear documents), ``after``, ``includeArchived`` (default false: archived and
trashed records are left out)
and ``orderBy`` (``createdAt``, the default, or ``updatedAt``), newest first, ties by id.
``pageInfo`` has ``hasNextPage`` and ``endCursor``; a cursor names the position of the
page's last node in the sort order (its sort time and id), so a record that moves while
a list is paged shifts nothing in the pages after it, as a keyset cursor would. Comments
on an archived issue stay listed (their own ``archivedAt`` is null), their ``issue``
showing it archived.

Errors, as bodies the SDK's ``parseLinearError`` reads (``extensions.type``) and the
docs show (``extensions.code``): a wrong ``Authorization`` gets HTTP 400
``AUTHENTICATION_ERROR``; a rate limit (scripted) gets HTTP 400 ``RATELIMITED`` with
the ``x-ratelimit-requests-*`` headers (reset in epoch milliseconds), or HTTP 429 with
``Retry-After`` when scripted with ``status=429``.

Scripting:

- ``add_team(key, name=None) -> FakeTeam``;
- ``add_issue(team, title, *, description=None, project_id=None, at=None) ->
  FakeIssue``; ``edit_issue(id, *, title=None, description=None, at=None)``;
  ``move_issue(id, team, *, at=None)`` (new number and identifier, the old one in
  ``previousIdentifiers``); ``archive_issue(id, *, trash=False, touch=True, at=None)``
  (``touch=False``: archiving leaves ``updatedAt`` alone);
- ``add_comment(issue_id, body, *, at=None) -> FakeComment``; ``edit_comment(id, body,
  *, at=None)``; ``archive_comment(id, *, at=None)``; ``delete_comment(id)`` (gone
  without a trace, as a deleted comment is);
- ``script_rate_limit(times=1, *, status=400, retry_after=None)``: the next ``times``
  requests are rate limited; ``limit_budget(requests, *, reset_in=3600)``: after
  ``requests`` more requests every request is rate limited (a storm; ``status=429`` for
  HTTP 429) until the budget is set again (``None``: no budget);
- ``between_pages(after, action)``: run ``action()`` (a mutation) just before the list
  request numbered ``after + 1`` is answered: a record edited while a sync pages;
- inspection: ``list_requests()`` (the list pages served), ``requests`` (every request).

Webhooks: ``webhook_body(type, action, id, *, at=None)`` is the delivery Linear would
push about issue or comment ``id`` as the fake holds it now (built from the
``webhook_*.json`` shapes), unsigned: a test signs it as Linear would.

Times: mutations stamp ``at`` or, without it, the injected clock's now (a
:class:`~memsync.clock.Clock`); without a clock, a counter that starts at
2026-01-01T00:00:00Z and moves one second per mutation.

Cost: filtered, sorted lists and rendered pages are cached until the next mutation, so
a sync reading 10,000 records costs about as much time in the fake as JSON encoding.
"""

from __future__ import annotations

import base64
import bisect
import copy
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memsync.clock import Clock
from memsync.connectors.fake_http import (
    FakeHTTPServer,
    FakeResponse,
    RecordedRequest,
    compact_json,
    json_headers,
    load_fixture,
)

__all__ = ["FakeComment", "FakeIssue", "FakeLinear", "FakeTeam"]

Json = Any

_NAMESPACE = uuid.UUID("6f0b7e2c-3d1a-4b5c-9e8f-7a6b5c4d3e2f")
_DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
_MAX_FIRST = 250
_DEFAULT_FIRST = 50
_ROOTS = ("organization", "issues", "comments")


@dataclass
class FakeTeam:
    id: str
    key: str
    name: str
    next_number: int = 1


@dataclass
class FakeIssue:
    id: str
    team: FakeTeam
    number: int
    title: str
    description: str | None
    project_id: str | None
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None = None
    trashed: bool | None = None
    previous_identifiers: list[str] = field(default_factory=list)
    # A WorkflowState's name and type (triage, backlog, unstarted, started, completed,
    # canceled): https://linear.app/developers/graphql (WorkflowState).
    state: tuple[str, str] = ("Todo", "unstarted")

    @property
    def identifier(self) -> str:
        return f"{self.team.key}-{self.number}"


@dataclass
class FakeComment:
    id: str
    issue: FakeIssue
    body: str
    created_at: datetime
    updated_at: datetime
    edited_at: datetime | None = None
    archived_at: datetime | None = None


@dataclass
class _RateLimitRule:
    times: int
    status: int
    retry_after: int | None


@dataclass(frozen=True)
class _Entry:
    """A record as a list holds it: its sort key (newest first: ``(-micros, id)``), its
    rendered node, and the fields filters read (times parsed)."""

    key: tuple[int, str]
    body: bytes
    fields: dict[str, Any]
    archived: bool

    @classmethod
    def of(cls, record: FakeIssue | FakeComment, node: Json, order: str) -> _Entry:
        moment = record.updated_at if order == "updatedAt" else record.created_at
        fields: dict[str, Any] = {
            "id": record.id,
            "updatedAt": record.updated_at,
            "createdAt": record.created_at,
            "archivedAt": record.archived_at,
            "team": node.get("team"),
        }
        if isinstance(record, FakeComment):
            fields["issue"] = {"team": node["issue"]["team"]}
        archived = node.get("archivedAt") is not None or node.get("trashed") is True
        return cls((-_micros(moment), record.id), compact_json(node), fields, archived)

    def __lt__(self, other: object) -> bool:
        # Compared with entries and with bare keys (bisect on a key).
        mine = self.key
        theirs = other.key if isinstance(other, _Entry) else other
        return mine < theirs  # type: ignore[operator]

    def __gt__(self, other: object) -> bool:
        mine = self.key
        theirs = other.key if isinstance(other, _Entry) else other
        return mine > theirs  # type: ignore[operator]


class _Invalid(Exception):
    """A request the fake cannot answer: a GraphQL validation error (HTTP 400)."""


def _iso(moment: datetime) -> str:
    text = moment.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def _parse_time(value: object) -> datetime:
    if not isinstance(value, str):
        raise _Invalid(f"expected a DateTime, got {value!r}")
    moment = datetime.fromisoformat(value)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class FakeLinear(FakeHTTPServer):
    """Linear's GraphQL endpoint for one workspace, on 127.0.0.1 (see the module)."""

    def __init__(self, token: str = "lin_api_test", *, clock: Clock | None = None) -> None:
        super().__init__()
        self.token = token
        self._clock = clock
        self._tick = _DEFAULT_START
        self._lock = threading.Lock()
        self._organization = load_fixture("linear", "organization.json")
        self._issue_shape = load_fixture("linear", "issues_page.json")["data"]["issues"]["nodes"][0]
        self._comment_shape = load_fixture("linear", "comments_page.json")["data"]["comments"][
            "nodes"
        ][0]
        self._rate_limited = load_fixture("linear", "error_ratelimited.response.json")
        self._unauthenticated = load_fixture("linear", "error_authentication.response.json")
        self._webhook_shapes = {
            "Issue": load_fixture("linear", "webhook_issue.json"),
            "Comment": load_fixture("linear", "webhook_comment.json"),
        }
        self.teams: dict[str, FakeTeam] = {}
        self.issues: dict[str, FakeIssue] = {}
        self.comments: dict[str, FakeComment] = {}
        self._created = 0
        self._rules: list[_RateLimitRule] = []
        self._budget: int | None = None
        self._budget_reset_in = 3600
        self._budget_status = 400
        self._list_requests = 0
        self._between: dict[int, Callable[[], None]] = {}
        self._cache: dict[str, list[_Entry]] = {}
        self._indexes: dict[tuple[str, str], list[_Entry]] = {}

    # -- scripting -------------------------------------------------------------

    @property
    def workspace_id(self) -> str:
        return str(self._organization["data"]["organization"]["id"])

    def add_team(self, key: str, name: str | None = None) -> FakeTeam:
        with self._lock:
            team = FakeTeam(str(uuid.uuid5(_NAMESPACE, f"team:{key}")), key, name or key)
            self.teams[key] = team
            self._changed()
            return team

    def add_issue(
        self,
        team: str,
        title: str,
        *,
        description: str | None = None,
        project_id: str | None = None,
        at: datetime | None = None,
    ) -> FakeIssue:
        with self._lock:
            owner = self.teams[team]
            now = self._now(at)
            issue = FakeIssue(
                id=self._new_id("issue"),
                team=owner,
                number=owner.next_number,
                title=title,
                description=description,
                project_id=project_id,
                created_at=now,
                updated_at=now,
            )
            owner.next_number += 1
            self.issues[issue.id] = issue
            self._changed()
            return issue

    def edit_issue(
        self,
        issue_id: str,
        *,
        title: str | None = None,
        description: str | None = None,
        at: datetime | None = None,
    ) -> None:
        with self._lock:
            issue = self.issues[issue_id]
            issue.title = title if title is not None else issue.title
            issue.description = description if description is not None else issue.description
            issue.updated_at = self._now(at)
            self._changed()

    def set_state(
        self, issue_id: str, name: str, state_type: str, *, at: datetime | None = None
    ) -> None:
        """Move the issue to the workflow state ``name`` of type ``state_type``; Linear
        sets ``completedAt`` / ``canceledAt`` while it is in such a state."""
        with self._lock:
            issue = self.issues[issue_id]
            issue.state = (name, state_type)
            issue.updated_at = self._now(at)
            self._changed()

    def move_issue(self, issue_id: str, team: str, *, at: datetime | None = None) -> None:
        with self._lock:
            issue, target = self.issues[issue_id], self.teams[team]
            issue.previous_identifiers.append(issue.identifier)
            issue.team, issue.number = target, target.next_number
            target.next_number += 1
            issue.updated_at = self._now(at)
            self._changed()

    def archive_issue(
        self, issue_id: str, *, trash: bool = False, touch: bool = True, at: datetime | None = None
    ) -> None:
        with self._lock:
            issue = self.issues[issue_id]
            now = self._now(at)
            issue.archived_at = now
            issue.trashed = True if trash else None
            if touch:
                issue.updated_at = now
            self._changed()

    def add_comment(self, issue_id: str, body: str, *, at: datetime | None = None) -> FakeComment:
        with self._lock:
            now = self._now(at)
            comment = FakeComment(self._new_id("comment"), self.issues[issue_id], body, now, now)
            self.comments[comment.id] = comment
            self._changed()
            return comment

    def edit_comment(self, comment_id: str, body: str, *, at: datetime | None = None) -> None:
        with self._lock:
            comment = self.comments[comment_id]
            comment.body = body
            comment.edited_at = comment.updated_at = self._now(at)
            self._changed()

    def archive_comment(self, comment_id: str, *, at: datetime | None = None) -> None:
        with self._lock:
            comment = self.comments[comment_id]
            comment.archived_at = comment.updated_at = self._now(at)
            self._changed()

    def delete_comment(self, comment_id: str) -> None:
        with self._lock:
            del self.comments[comment_id]
            self._changed()

    def script_rate_limit(
        self, times: int = 1, *, status: int = 400, retry_after: int | None = None
    ) -> None:
        """Rate limit the next ``times`` requests: HTTP 400 ``RATELIMITED`` with the reset
        headers, or with ``status=429`` an HTTP 429 (``Retry-After`` if given)."""
        with self._lock:
            self._rules.append(_RateLimitRule(times, status, retry_after))

    def limit_budget(
        self, requests: int | None, *, reset_in: int = 3600, status: int = 400
    ) -> None:
        """After ``requests`` more requests, rate limit every request (reset ``reset_in``
        seconds ahead; HTTP ``status``, 400 or 429) until called again; ``None`` lifts
        the budget."""
        with self._lock:
            self._budget = requests
            self._budget_reset_in = reset_in
            self._budget_status = status

    def between_pages(self, after: int, action: Callable[[], None]) -> None:
        """Run ``action`` just before list request number ``after + 1`` (counted from
        now) is answered."""
        with self._lock:
            self._between[self._list_requests + after + 1] = action

    def list_requests(self) -> int:
        """How many ``issues`` / ``comments`` pages were answered."""
        with self._lock:
            return self._list_requests

    def webhook_body(
        self,
        kind: str,
        action: str,
        record_id: str,
        *,
        at: datetime | None = None,
    ) -> bytes:
        """The delivery Linear pushes when ``action`` (``create``, ``update``,
        ``remove``) happened to issue (``kind`` ``Issue``) or comment (``Comment``)
        ``record_id``: the ``EntityWebhookPayload`` envelope around the record's
        ``IssueWebhookPayload`` / ``CommentWebhookPayload`` as the fake holds it now
        (https://linear.app/developers/webhooks), sent at ``at`` (default: now) as
        ``webhookTimestamp``. Build a removed comment's before deleting it."""
        with self._lock:
            sent = at or (self._clock.now() if self._clock is not None else self._tick)
            payload = copy.deepcopy(self._webhook_shapes[kind])
            record = self.issues[record_id] if kind == "Issue" else self.comments[record_id]
            data = payload["data"]
            if isinstance(record, FakeIssue):
                data.update(self._issue_webhook_data(record))
                data["state"].update(name=record.state[0], type=record.state[1])
                url = data["url"]
            else:
                issue = record.issue
                data.update(_comment_fields(record))
                data["issue"].update(
                    id=issue.id,
                    identifier=issue.identifier,
                    title=issue.title,
                    teamId=issue.team.id,
                    team={"id": issue.team.id, "key": issue.team.key, "name": issue.team.name},
                    url=f"https://linear.app/acme/issue/{issue.identifier}",
                )
                url = f"https://linear.app/acme/issue/{issue.identifier}#comment-{record.id[:8]}"
            if action != "update":
                payload.pop("updatedFrom", None)
            payload.update(
                action=action,
                createdAt=_iso(sent),
                url=url,
                organizationId=self.workspace_id,
                webhookTimestamp=int(sent.timestamp() * 1000),
            )
            return compact_json(payload)

    # -- internals -------------------------------------------------------------

    def _issue_webhook_data(self, issue: FakeIssue) -> Json:
        team = issue.team
        return {
            "id": issue.id,
            "number": issue.number,
            "identifier": issue.identifier,
            "title": issue.title,
            "description": issue.description,
            "createdAt": _iso(issue.created_at),
            "updatedAt": _iso(issue.updated_at),
            "archivedAt": None if issue.archived_at is None else _iso(issue.archived_at),
            "trashed": issue.trashed,
            "url": f"https://linear.app/acme/issue/{issue.identifier}",
            "teamId": team.id,
            "team": {"id": team.id, "key": team.key, "name": team.name},
            "projectId": issue.project_id,
            "previousIdentifiers": list(issue.previous_identifiers),
        }

    def _now(self, at: datetime | None) -> datetime:
        if at is not None:
            return at
        if self._clock is not None:
            return self._clock.now()
        self._tick += timedelta(seconds=1)
        return self._tick

    def _new_id(self, kind: str) -> str:
        self._created += 1
        return str(uuid.uuid5(_NAMESPACE, f"{kind}:{self._created}"))

    def _changed(self) -> None:
        self._cache.clear()
        self._indexes.clear()

    def handle(self, request: RecordedRequest) -> FakeResponse:
        if request.method != "POST" or request.path != "/graphql":
            return FakeResponse(404, b"Not Found", [("Content-Type", "text/plain")])
        if request.headers.get("authorization") != self.token:
            return self._fixture_response(self._unauthenticated)
        limited = self._take_rate_limit()
        if limited is not None:
            return limited
        try:
            body = json.loads(request.body)
            return FakeResponse(200, self._answer(body), json_headers())
        except _Invalid as error:
            errors = [
                {
                    "message": str(error),
                    "extensions": {"code": "GRAPHQL_VALIDATION_FAILED", "type": "graphql error"},
                }
            ]
            return FakeResponse(400, compact_json({"errors": errors}), json_headers())

    def _take_rate_limit(self) -> FakeResponse | None:
        with self._lock:
            if self._rules:
                rule = self._rules[0]
                rule.times -= 1
                if rule.times <= 0:
                    self._rules.pop(0)
                return self._limited(rule.status, rule.retry_after, 60)
            if self._budget is not None:
                if self._budget <= 0:
                    return self._limited(self._budget_status, None, self._budget_reset_in)
                self._budget -= 1
        return None

    def _limited(self, status: int, retry_after: int | None, reset_in: int) -> FakeResponse:
        response = copy.deepcopy(self._rate_limited)
        now = self._clock.now() if self._clock is not None else datetime.now(UTC)
        reset = str(int((now.timestamp() + reset_in) * 1000))
        response["status"] = status
        response["headers"]["x-ratelimit-requests-reset"] = reset
        response["headers"]["x-ratelimit-complexity-reset"] = reset
        if retry_after is not None:
            response["headers"]["retry-after"] = str(retry_after)
        return self._fixture_response(response)

    @staticmethod
    def _fixture_response(response: Json) -> FakeResponse:
        headers = list(response["headers"].items())
        return FakeResponse(response["status"], compact_json(response["body"]), headers)

    def _answer(self, body: Json) -> bytes:
        query = body.get("query") if isinstance(body, dict) else None
        if not isinstance(query, str):
            raise _Invalid("no query")
        # The document's root field: the first field of its selection set.
        found = re.match(r"\s*(?:query\b[^{]*)?\{\s*(\w+)", query)
        roots = [found.group(1)] if found and found.group(1) in _ROOTS else []
        if len(roots) != 1:
            raise AssertionError(f"FakeLinear serves one of {_ROOTS} per document: {query!r}")
        if roots[0] == "organization":
            return compact_json(self._organization)
        action = None
        with self._lock:
            self._list_requests += 1
            action = self._between.pop(self._list_requests, None)
        if action is not None:
            action()
        variables = body.get("variables") or {}
        return self._page(roots[0], query, variables)

    def _page(self, root: str, query: str, variables: Json) -> bytes:
        first = variables.get("first", _DEFAULT_FIRST)
        if not isinstance(first, int) or not 0 < first <= _MAX_FIRST:
            raise _Invalid(f"first must be between 1 and {_MAX_FIRST}, got {first!r}")
        order = _argument(query, "orderBy") or "createdAt"
        if order not in ("createdAt", "updatedAt"):
            raise _Invalid(f"orderBy {order!r}")
        include_archived = _argument(query, "includeArchived") == "true"
        where = variables.get("filter") or {}
        with self._lock:
            cache_key = json.dumps([root, order, include_archived, where], sort_keys=True)
            chosen = self._cache.get(cache_key)
            if chosen is None:
                chosen = self._select(root, order, include_archived, where)
                self._cache[cache_key] = chosen
        after = variables.get("after")
        start = 0 if after is None else bisect.bisect_right(chosen, _decode_cursor(after))
        chunk = chosen[start : start + first]
        has_next = start + first < len(chosen)
        end_cursor = _encode_cursor(chunk[-1].key) if chunk else None
        page_info = compact_json({"hasNextPage": has_next, "endCursor": end_cursor})
        return b"".join(
            [
                b'{"data":{"',
                root.encode(),
                b'":{"nodes":[',
                b",".join(entry.body for entry in chunk),
                b'],"pageInfo":',
                page_info,
                b"}}}",
            ]
        )

    def _select(self, root: str, order: str, include_archived: bool, where: Json) -> list[_Entry]:
        """The entries of ``root`` that pass the filter, in the list's order."""
        entries = self._indexed(root, order)
        if order == "updatedAt":
            # The walk's filters bound updatedAt: only that slice of the index is tested.
            low, high = _bounds(where, "updatedAt")
            if high is not None:
                entries = entries[bisect.bisect_left(entries, (-_micros(high), "")) :]
            if low is not None:
                entries = entries[: bisect.bisect_right(entries, (-_micros(low), "\uffff"))]
        passes = _compile(where)
        return [
            entry
            for entry in entries
            if (include_archived or not entry.archived) and passes(entry.fields)
        ]

    def _indexed(self, root: str, order: str) -> list[_Entry]:
        """Every record of ``root``, rendered once, sorted newest first by ``order``
        (ties by id); rebuilt after a mutation."""
        index = self._indexes.get((root, order))
        if index is None:
            records: list[FakeIssue] | list[FakeComment]
            records = (
                list(self.issues.values()) if root == "issues" else list(self.comments.values())
            )
            index = sorted(_Entry.of(record, self._node(record), order) for record in records)
            self._indexes[(root, order)] = index
        return index

    def _node(self, record: FakeIssue | FakeComment) -> Json:
        return (
            self._issue_node(record)
            if isinstance(record, FakeIssue)
            else self._comment_node(record)
        )

    def _team_node(self, team: FakeTeam) -> Json:
        organization = {"id": self.workspace_id}
        return {"id": team.id, "key": team.key, "name": team.name, "organization": organization}

    def _issue_node(self, issue: FakeIssue) -> Json:
        node = copy.deepcopy(self._issue_shape)
        team = self._team_node(issue.team)
        node.update(
            id=issue.id,
            identifier=issue.identifier,
            number=issue.number,
            title=issue.title,
            description=issue.description,
            url=f"https://linear.app/acme/issue/{issue.identifier}",
            createdAt=_iso(issue.created_at),
            updatedAt=_iso(issue.updated_at),
            archivedAt=None if issue.archived_at is None else _iso(issue.archived_at),
            trashed=issue.trashed,
            startedAt=None,
            completedAt=_iso(issue.updated_at) if issue.state[1] == "completed" else None,
            canceledAt=_iso(issue.updated_at) if issue.state[1] == "canceled" else None,
            state={"name": issue.state[0], "type": issue.state[1]},
            team=team,
            project=None if issue.project_id is None else {"id": issue.project_id, "name": "P"},
            parent=None,
        )
        return node

    def _comment_node(self, comment: FakeComment) -> Json:
        node = copy.deepcopy(self._comment_shape)
        issue = comment.issue
        node.update(
            _comment_fields(comment),
            issue={
                "id": issue.id,
                "identifier": issue.identifier,
                "archivedAt": None if issue.archived_at is None else _iso(issue.archived_at),
                "trashed": issue.trashed,
                "team": self._team_node(issue.team),
                "project": None if issue.project_id is None else {"id": issue.project_id},
            },
        )
        return node


def _comment_fields(comment: FakeComment) -> Json:
    """The fields a comment has alike as a GraphQL node and in a webhook's ``data``."""
    return {
        "id": comment.id,
        "issueId": comment.issue.id,
        "body": comment.body,
        "createdAt": _iso(comment.created_at),
        "updatedAt": _iso(comment.updated_at),
        "editedAt": None if comment.edited_at is None else _iso(comment.edited_at),
        "archivedAt": None if comment.archived_at is None else _iso(comment.archived_at),
    }


def _argument(query: str, name: str) -> str | None:
    match = re.search(rf"\b{name}\s*:\s*(\w+)", query)
    return match.group(1) if match else None


def _encode_cursor(key: tuple[int, str]) -> str:
    return base64.b64encode(json.dumps(list(key)).encode()).decode()


def _decode_cursor(cursor: object) -> tuple[int, str]:
    try:
        micros, record_id = json.loads(base64.b64decode(str(cursor), validate=True))
        return int(micros), str(record_id)
    except (ValueError, TypeError) as error:
        raise _Invalid(f"invalid cursor {cursor!r}") from error


def _micros(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def _bounds(where: Json, name: str) -> tuple[datetime | None, datetime | None]:
    """The ``gte`` / ``lte`` bounds a filter puts on ``name`` at its top level (directly
    or in a top-level ``and``): a range the whole filter lies within."""
    parts = [where, *where.get("and", [])] if isinstance(where, dict) else []
    for part in parts:
        condition = part.get(name) if isinstance(part, dict) else None
        if isinstance(condition, dict):
            low, high = condition.get("gte"), condition.get("lte")
            return (
                None if low is None else _parse_time(low),
                None if high is None else _parse_time(high),
            )
    return None, None


Test = Callable[[dict[str, Any]], bool]


def _compile(where: Json) -> Test:
    """``where`` as a test of a record's fields: the subset of Linear's filters the
    connector uses. Anything else is refused (a validation error), never ignored."""
    if not isinstance(where, dict):
        raise _Invalid(f"filter must be an object, got {where!r}")
    tests = [_condition(name, condition) for name, condition in where.items()]
    return lambda fields: all(test(fields) for test in tests)


def _condition(name: str, condition: Json) -> Test:
    if name in ("and", "or"):
        parts = [_compile(part) for part in condition]
        combine = all if name == "and" else any
        return lambda fields: combine(part(fields) for part in parts)
    if name in ("updatedAt", "createdAt", "archivedAt"):
        return _time_test(name, condition)
    if name == "team":
        return lambda fields: _compare_key(fields.get("team"), condition)
    if name == "id":
        return _id_test(condition)
    if name == "issue":
        nested = _compile(condition)
        return lambda fields: nested(fields.get("issue") or {})
    raise _Invalid(f"FakeLinear does not filter on {name!r}")


def _time_test(name: str, condition: Json) -> Callable[[dict[str, Any]], bool]:
    checks: dict[str, Callable[[datetime, datetime], bool]] = {
        "gte": lambda moment, bound: moment >= bound,
        "gt": lambda moment, bound: moment > bound,
        "lte": lambda moment, bound: moment <= bound,
        "lt": lambda moment, bound: moment < bound,
        "eq": lambda moment, bound: moment == bound,
    }
    bounds = []
    for operator, bound in condition.items():
        if operator not in checks:
            raise _Invalid(f"DateComparator has no {operator!r} here")
        bounds.append((checks[operator], _parse_time(bound)))

    def test(fields: dict[str, Any]) -> bool:
        moment = fields.get(name)
        return moment is not None and all(check(moment, bound) for check, bound in bounds)

    return test


def _id_test(condition: Json) -> Test:
    if not isinstance(condition, dict) or not set(condition) <= {"eq", "in"} or not condition:
        raise _Invalid(f"IDComparator {condition!r}")
    wanted = set(condition.get("in", [])) | ({condition["eq"]} if "eq" in condition else set())
    return lambda fields: fields.get("id") in wanted


def _compare_key(team: Json, condition: Json) -> bool:
    if set(condition) != {"key"}:
        raise _Invalid(f"FakeLinear filters teams by key only: {condition!r}")
    key = (team or {}).get("key")
    comparator = condition["key"]
    if "in" in comparator:
        return key in comparator["in"]
    if "eq" in comparator:
        return bool(key == comparator["eq"])
    raise _Invalid(f"StringComparator {comparator!r}")
