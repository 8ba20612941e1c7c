"""The Linear connector: issues and comments of one workspace, through the GraphQL API.

Every request is ``POST {base_url}/graphql`` with the API key in ``Authorization``
(https://linear.app/developers/graphql). What is read, per stream and window
``[start, end]``:

- ``organization { id name urlKey }`` once per instance: the workspace's UUID is the
  second segment of every key;
- ``issues`` (stream ``issues``) and ``comments`` (stream ``comments``), limited to the
  configured team keys, with ``includeArchived: true`` (archived and trashed records
  come back, and become tombstones) and ``orderBy: updatedAt``, paged with ``first`` /
  ``after: pageInfo.endCursor`` (https://linear.app/developers/pagination,
  https://linear.app/developers/filtering): first those whose ``archivedAt`` lies in
  the window (archiving need not move ``updatedAt``), paged to the end; then those whose
  ``updatedAt`` lies in it, walked oldest sub-window first (:mod:`.walk`).

``orderBy: updatedAt`` hands out the newest first, so paging a window from its top
reads its end first, and a run cut short there could move no checkpoint. The walk asks
for sub-windows from the bottom instead (the whole window first: one request when it
fits a page), and each record's position is where the walk stood when its page was read
(everything before it had been read): the streams are *ordered* by that position, the
runner checkpoints after every committed batch, and a run cut short resumes at the
oldest sub-window it had not finished. A record updated while the list is read moves
after the window's end (filtered out: the next window, which starts ``overlap`` before
this one's end, reads it) and shifts nothing else, since pages follow a cursor, not an
offset.

Rate limits (https://linear.app/developers/rate-limiting): an HTTP 429, or a GraphQL
error whose ``extensions.code`` is ``RATELIMITED`` (``extensions.type`` ``ratelimited``
in the SDK's terms, which may arrive with HTTP 400 or 200), is a :class:`RateLimited`
attempt; the wait is ``Retry-After`` if sent, else the reset time of the exhausted
budget (``X-RateLimit-Requests-Reset`` / ``X-RateLimit-Complexity-Reset``, epoch
milliseconds, as the SDK's ``RatelimitedLinearError`` reads them).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import TYPE_CHECKING, Any, ClassVar

from memsync.clock import Clock, SystemClock
from memsync.connectors._parsing import optional_str, parse_iso_time
from memsync.connectors.base import (
    Cursor,
    Deletion,
    RecordConnector,
    Stream,
    Window,
    fetch_every_stream,
)
from memsync.connectors.config import SubjectTemplateField
from memsync.connectors.errors import RateLimited, RetryableError, StopRun
from memsync.connectors.linear.declaration import LINEAR, LinearConfig
from memsync.connectors.linear.walk import SubWindow, WindowWalk
from memsync.connectors.retry import Retrier, retry_after_from_headers
from memsync.episode import JSONObject, Tombstone
from memsync.stopping import Sleeper

if TYPE_CHECKING:
    import httpx

__all__ = [
    "COMMENTS_QUERY",
    "ISSUES_QUERY",
    "ORGANIZATION_QUERY",
    "IssueRef",
    "LinearComment",
    "LinearConnector",
    "LinearIssue",
    "LinearRecord",
]

_SOURCE = "linear"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_BODY_SNIPPET_CHARS = 200
# An epoch value this large is in milliseconds (Linear's reset headers), not seconds.
_EPOCH_MILLIS_THRESHOLD = 10**11

ORGANIZATION_QUERY = "query MemsyncOrganization { organization { id name urlKey } }"

_PAGE_ARGUMENTS = (
    "filter: $filter, first: $first, after: $after, includeArchived: true, orderBy: updatedAt"
)
_PAGE_INFO = "pageInfo { hasNextPage endCursor }"

ISSUES_QUERY = (
    "query MemsyncIssues($filter: IssueFilter, $first: Int, $after: String) "
    f"{{ issues({_PAGE_ARGUMENTS}) {{ nodes {{ "
    "id identifier number title description priority priorityLabel estimate dueDate url "
    "createdAt updatedAt archivedAt trashed startedAt completedAt canceledAt "
    "state { name type } team { id key name } project { id name } "
    "assignee { id name } creator { id name } parent { id identifier } "
    "labels { nodes { name } } "
    f"}} {_PAGE_INFO} }} }}"
)

COMMENTS_QUERY = (
    "query MemsyncComments($filter: CommentFilter, $first: Int, $after: String) "
    f"{{ comments({_PAGE_ARGUMENTS}) {{ nodes {{ "
    "id body createdAt updatedAt editedAt archivedAt parentId user { id name } "
    "issue { id identifier archivedAt trashed team { id key } project { id } } "
    f"}} {_PAGE_INFO} }} }}"
)


@dataclass(frozen=True, slots=True)
class IssueRef:
    """The issue a record belongs to: the UUIDs its keys are built from, and the fields
    the subject template may name."""

    workspace: str
    id: str
    identifier: str
    team_id: str | None
    team_key: str | None
    project_id: str | None

    @property
    def key(self) -> str:
        """``linear:{workspace uuid}:issue:{issue uuid}``: neither ever changes, while an
        identifier such as ENG-12 does when the issue moves to another team."""
        return f"{_SOURCE}:{self.workspace}:issue:{self.id}"

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return {
            "workspace": self.workspace,
            "team_key": self.team_key,
            "team_id": self.team_id,
            "issue_id": self.id,
            "issue_identifier": self.identifier,
            "project_id": self.project_id,
        }


@dataclass(frozen=True, slots=True)
class LinearIssue:
    """An issue in its latest state."""

    issue: IssueRef
    #: Where a read finds it: the walk's position when its page was read (see
    #: :mod:`.walk`), never after its ``updatedAt``.
    position: datetime
    updated_at: datetime
    data: JSONObject

    episode_type: ClassVar[str] = "linear.issue"

    def key(self) -> str:
        return self.issue.key

    @property
    def occurred_at(self) -> datetime:
        # The payload is the issue as of its last update.
        return self.updated_at

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.issue.subject_values()

    def payload(self) -> JSONObject:
        return dict(self.data)


@dataclass(frozen=True, slots=True)
class LinearComment:
    """One comment of an issue."""

    issue: IssueRef
    comment_id: str
    #: As :attr:`LinearIssue.position`.
    position: datetime
    created_at: datetime
    updated_at: datetime
    data: JSONObject

    episode_type: ClassVar[str] = "linear.comment"

    def key(self) -> str:
        return f"{self.issue.key}:comment:{self.comment_id}"

    @property
    def occurred_at(self) -> datetime:
        return self.created_at

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.issue.subject_values()

    def payload(self) -> JSONObject:
        return dict(self.data)


LinearRecord = LinearIssue | LinearComment


@dataclass(frozen=True, slots=True)
class _ListQuery:
    """One paged root field: the stream that reads it and its GraphQL document."""

    stream: str
    root: str
    document: str


_ISSUES = _ListQuery("issues", "issues", ISSUES_QUERY)
_COMMENTS = _ListQuery("comments", "comments", COMMENTS_QUERY)
_LISTS = {query.stream: query for query in (_ISSUES, _COMMENTS)}


class LinearConnector(RecordConnector[LinearConfig, LinearRecord], declaration=LINEAR):
    """Issues and comments of one Linear workspace (optionally some of its teams).

    Repeats: every record updated in a window is read again by the next window's
    overlap and by backfills; keys make that free. Conflicts: none, keys are UUIDs.
    Rate limits: a 429 or a ``RATELIMITED`` GraphQL error waits as the response says,
    within ``retry`` caps, then :class:`RateLimitExhausted`; 5xx and timeouts back off,
    then :class:`RetryableError`; refused credentials, other GraphQL errors and bodies
    that are not the API's raise :class:`StopRun`.
    """

    def __init__(
        self,
        config: LinearConfig,
        *,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        sleeper: Sleeper | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(config, sleeper=sleeper)
        self._clock: Clock = clock or SystemClock()
        self._client = client
        self._transport = transport
        self._owns_client = client is None
        self._workspace: str | None = None
        self.retrier = Retrier(config.retry.policy(), sleeper=self.sleeper, clock=clock)

    def close(self) -> None:
        """Close the HTTP client if this connector created it."""
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    @property
    def client(self) -> httpx.Client:
        # Created on first use, importing httpx then: mapping records (the conformance
        # kit) and listing connector types never load it.
        if self._client is None:
            import httpx

            self._client = httpx.Client(
                transport=self._transport,
                timeout=self.config.timeout.total_seconds(),
                headers={"Content-Type": "application/json", "User-Agent": "memsync-connector"},
            )
        return self._client

    # --- reading --------------------------------------------------------------------------

    def streams(self) -> tuple[Stream, ...]:
        """``issues`` then ``comments``, both ordered by the walk's position (see the
        module)."""
        return tuple(Stream(name, ordered=True) for name in _LISTS)

    def fetch(self, window: Window, cursor: Cursor | None) -> Iterator[LinearRecord | Deletion]:
        return fetch_every_stream(self, window, cursor)

    def fetch_stream(
        self, stream: Stream, window: Window, cursor: Cursor | None
    ) -> Iterator[LinearRecord | Deletion]:
        """The tombstones of the issues (or comments) archived in the window, then every
        one updated in it, oldest sub-window first (see :mod:`.walk`), each record at the
        walk's position when its page was read."""
        query = _LISTS[stream.name]
        workspace = self.workspace()
        start = window.start or self.config.start or _EPOCH
        # Archives first, so that a run cut short in the walk has seen those of its
        # whole window: the next run's window starts later.
        archived = self._where(query, "archivedAt", SubWindow(start, window.end))
        for node in self._pages(query, archived):
            yield from self._records(query, workspace, [node], start)
        walk = WindowWalk.over(start, window.end, self.config.page_size)
        # Sub-windows share their boundary instants (both ends are included): what was
        # handed out at one is not handed out again when the walk reaches it (a few
        # records per sub-window are remembered, those at its ends).
        at_boundaries: set[tuple[object, object]] = set()
        while not walk.done:
            position = walk.position
            asked = walk.next()
            where = self._where(query, "updatedAt", asked)
            nodes, end_cursor = self._page(query, where, None)
            fresh = [n for n in nodes if (n.get("id"), n.get("updatedAt")) not in at_boundaries]
            yield from self._records(query, workspace, fresh, position)
            at_boundaries |= {
                (node.get("id"), node.get("updatedAt"))
                for node in nodes
                if _updated_at(node) in (asked.start, asked.end, _updated_at(nodes[-1]))
            }
            if end_cursor is None:
                walk.read_to_end(len(nodes))
                continue
            if _newest_first(nodes) and walk.page_overflowed(_updated_at(nodes[-1])):
                continue
            # One instant holds a whole page, or the answer is not newest first: this
            # sub-window is paged to its end instead.
            for node in self._pages(query, where, end_cursor):
                yield from self._records(query, workspace, [node], position)
            walk.read_to_end(self.config.page_size)

    def _records(
        self,
        query: _ListQuery,
        workspace: str,
        nodes: Sequence[Mapping[str, Any]],
        position: datetime,
    ) -> Iterator[LinearRecord | Tombstone]:
        for node in nodes:
            if query is _ISSUES:
                yield self._issue(workspace, node, position)
            else:
                yield from self._comment(workspace, node, position)

    def workspace(self) -> str:
        """The workspace's UUID (``organization.id``), asked once per instance."""
        if self._workspace is None:
            data = self._post(ORGANIZATION_QUERY, {})
            organization = data.get("organization")
            workspace = organization.get("id") if isinstance(organization, dict) else None
            if not isinstance(workspace, str) or not workspace:
                raise StopRun(self._malformed("organization", f"no id in {organization!r}"))
            self._workspace = workspace
        return self._workspace

    def check(self, now: datetime) -> str:
        """One ``organization`` query: the key is accepted and names its workspace."""
        del now
        return f"reached workspace {self.workspace()}"

    def _where(self, query: _ListQuery, field: str, span: SubWindow) -> JSONObject:
        """``field`` (``updatedAt`` or ``archivedAt``) within ``span``, of the configured
        teams."""
        within: JSONObject = {field: {"gte": _iso(span.start), "lte": _iso(span.end)}}
        if self.config.teams is None:
            return within
        team: JSONObject = {"team": {"key": {"in": list(self.config.teams)}}}
        return {"and": [within, team if query is _ISSUES else {"issue": team}]}

    def _page(
        self, query: _ListQuery, where: JSONObject, after: str | None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page: its nodes and, when there is a next page, the cursor to it."""
        variables: JSONObject = {"filter": where, "first": self.config.page_size}
        if after is not None:
            variables["after"] = after
        connection = self._post(query.document, variables).get(query.root)
        if not isinstance(connection, dict) or not isinstance(connection.get("nodes"), list):
            raise StopRun(self._malformed(query.root, "no nodes list"))
        nodes = [node for node in connection["nodes"] if isinstance(node, dict)]
        page_info = connection.get("pageInfo")
        if not isinstance(page_info, dict) or page_info.get("hasNextPage") is not True:
            return nodes, None
        end_cursor = page_info.get("endCursor")
        if not isinstance(end_cursor, str) or not end_cursor or end_cursor == after:
            raise StopRun(self._malformed(query.root, "hasNextPage without a new endCursor"))
        return nodes, end_cursor

    def _pages(
        self, query: _ListQuery, where: JSONObject, after: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every node from the page after ``after`` to the end of the list."""
        while True:
            nodes, after_this = self._page(query, where, after)
            yield from nodes
            if after_this is None:
                return
            after = after_this

    def _issue(
        self, workspace: str, node: Mapping[str, Any], position: datetime
    ) -> LinearIssue | Tombstone:
        ref = _issue_ref(workspace, node)
        if _gone(node):
            # An archived or trashed issue takes its comments with it (keys below its own).
            return Tombstone(ref.key, with_children=True)
        labels = node.get("labels")
        label_nodes = labels.get("nodes") if isinstance(labels, dict) else None
        data: JSONObject = {
            field: node.get(field)
            for field in (
                "id",
                "identifier",
                "number",
                "title",
                "description",
                "priority",
                "priorityLabel",
                "estimate",
                "dueDate",
                "url",
                "createdAt",
                "startedAt",
                "completedAt",
                "canceledAt",
            )
        }
        # Sorted names: the order Linear lists labels in is not an edit.
        data["labels"] = sorted(
            label["name"]
            for label in label_nodes or []
            if isinstance(label, dict) and isinstance(label.get("name"), str)
        )
        for field in ("state", "team", "project", "assignee", "creator", "parent"):
            data[field] = node.get(field)
        # updatedAt stays out: it moves without an edit a reader would see (a new comment).
        return LinearIssue(
            issue=ref,
            position=position,
            updated_at=_time(node.get("updatedAt"), "issue updatedAt"),
            data=data,
        )

    def _comment(
        self, workspace: str, node: Mapping[str, Any], position: datetime
    ) -> Iterator[LinearComment | Tombstone]:
        issue = node.get("issue")
        if not isinstance(issue, dict):
            # A comment on a project, document or update: not an issue's, not read here.
            return
        ref = _issue_ref(workspace, issue)
        comment_id = _required_id(node, "comment")
        if _gone(node) or _gone(issue):
            # A live comment of an archived issue would otherwise revive what the
            # issue's tombstone covered.
            yield Tombstone(f"{ref.key}:comment:{comment_id}")
            return
        user = node.get("user")
        yield LinearComment(
            issue=ref,
            comment_id=comment_id,
            position=position,
            created_at=_time(node.get("createdAt"), "comment createdAt"),
            updated_at=_time(node.get("updatedAt"), "comment updatedAt"),
            data={
                "id": comment_id,
                "issue_id": ref.id,
                "parent_id": node.get("parentId"),
                "body": node.get("body"),
                "user": user if isinstance(user, dict) else None,
                "createdAt": node.get("createdAt"),
                "editedAt": node.get("editedAt"),
            },
        )

    # --- HTTP -----------------------------------------------------------------------------

    def _post(self, document: str, variables: JSONObject) -> dict[str, Any]:
        """``data`` of one GraphQL request, retried within the caps."""
        return self.retrier.call(
            lambda: self._post_once(document, variables), what=f"linear '{self.name}'"
        )

    def _post_once(self, document: str, variables: JSONObject) -> dict[str, Any]:
        import httpx

        operation = document.split("(", 1)[0].split("{", 1)[0].removeprefix("query ").strip()
        what = f"linear '{self.name}': {operation}"
        try:
            response = self.client.post(
                f"{self.config.api_base}/graphql",
                json={"query": document, "variables": variables, "operationName": operation},
                headers={"Authorization": self.config.token.get_secret_value()},
            )
        except httpx.TimeoutException as error:
            raise RetryableError(f"{what} timed out ({type(error).__name__})") from error
        except httpx.TransportError as error:
            raise RetryableError(f"{what} failed: {type(error).__name__}: {error}") from error
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        errors = body.get("errors") if isinstance(body, dict) else None
        codes = _error_codes(errors)
        if status == 429 or "RATELIMITED" in codes:
            wait = _rate_limit_wait(response.headers, self._clock.now())
            raise RateLimited(
                f"{what}: rate limited (HTTP {status}) {_snippet(response)}", retry_after=wait
            )
        if status >= 500:
            raise RetryableError(
                f"{what}: HTTP {status} {_snippet(response)}",
                retry_after=retry_after_from_headers(response.headers, self._clock.now()),
            )
        if status in (401, 403) or codes & {"AUTHENTICATION_ERROR", "FORBIDDEN"}:
            raise StopRun(
                f"{what}: HTTP {status}: Linear refused the API key "
                f"({', '.join(sorted(codes)) or 'no error code'}). Check token "
                "(${LINEAR_API_KEY}: a personal API key from Settings > Account > Security "
                "& access) and that it may read the configured teams."
            )
        if errors:
            raise StopRun(f"{what}: HTTP {status}: GraphQL errors {_snippet(response)}")
        data = body.get("data") if isinstance(body, dict) else None
        if status >= 400 or not isinstance(data, dict):
            raise StopRun(
                f"{what}: HTTP {status} with a body that is not a GraphQL answer "
                f"(content-type {response.headers.get('content-type', 'none')!r}): "
                f"{_snippet(response)}. Is base_url pointing at Linear's API?"
            )
        return data

    def _malformed(self, root: str, problem: str) -> str:
        return f"linear '{self.name}': {root}: unexpected response shape: {problem}"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _time(value: object, what: str) -> datetime:
    return parse_iso_time(value, what, source=_SOURCE)


def _required_id(node: Mapping[str, Any], what: str) -> str:
    value = optional_str(node.get("id"))
    if value is None:
        raise StopRun(f"{_SOURCE}: {what} has no id: {node.get('id')!r}")
    return value


def _updated_at(node: Mapping[str, Any]) -> datetime:
    return _time(node.get("updatedAt"), "updatedAt")


def _newest_first(nodes: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a page is ordered newest first, as ``orderBy: updatedAt`` answers: only
    then does a full page hold the newest part of what was asked, completely."""
    times = [_updated_at(node) for node in nodes]
    return bool(times) and all(a >= b for a, b in pairwise(times))


def _gone(node: Mapping[str, Any]) -> bool:
    """Archived (``archivedAt``) or in the trash (``trashed``, issues only)."""
    return node.get("archivedAt") is not None or node.get("trashed") is True


def _issue_ref(workspace: str, node: Mapping[str, Any]) -> IssueRef:
    team = node.get("team")
    project = node.get("project")
    return IssueRef(
        workspace=workspace,
        id=_required_id(node, "issue"),
        identifier=optional_str(node.get("identifier")) or "",
        team_id=optional_str(team.get("id")) if isinstance(team, dict) else None,
        team_key=optional_str(team.get("key")) if isinstance(team, dict) else None,
        project_id=optional_str(project.get("id")) if isinstance(project, dict) else None,
    )


def _error_codes(errors: object) -> set[str]:
    """The error codes of a GraphQL ``errors`` list, upper case: ``extensions.code``
    (``RATELIMITED``) or, as the SDK reads it, ``extensions.type`` (``ratelimited``)."""
    codes: set[str] = set()
    for error in errors if isinstance(errors, list) else []:
        extensions = error.get("extensions") if isinstance(error, dict) else None
        if not isinstance(extensions, dict):
            continue
        for field in ("code", "type"):
            value = extensions.get(field)
            if isinstance(value, str):
                codes.add(value.upper().replace(" ", "_"))
    return codes


def _rate_limit_wait(headers: Mapping[str, str], now: datetime) -> float | None:
    """``Retry-After`` if sent; else until the reset of the budget that ran out."""
    wait = retry_after_from_headers(
        {name: value for name, value in headers.items() if name.lower() == "retry-after"}, now
    )
    if wait is not None:
        return wait
    waits = []
    for budget in ("requests", "complexity"):
        remaining = headers.get(f"x-ratelimit-{budget}-remaining")
        reset = headers.get(f"x-ratelimit-{budget}-reset")
        if remaining is None or reset is None or remaining.strip() not in ("0", "0.0"):
            continue
        try:
            value = float(reset)
        except ValueError:
            continue
        seconds = value / 1000 if value >= _EPOCH_MILLIS_THRESHOLD else value
        waits.append(max(seconds - now.timestamp(), 0.0))
    return max(waits) if waits else None


def _snippet(response: httpx.Response) -> str:
    text = response.text.strip().replace("\n", " ")
    if len(text) > _BODY_SNIPPET_CHARS:
        text = text[:_BODY_SNIPPET_CHARS] + "…"
    return repr(text)
