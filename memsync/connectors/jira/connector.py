"""The Jira Cloud connector: issues found by JQL, and their comments.

Built on the HTTP base (:mod:`memsync.connectors.http`): the base holds the client, the
basic auth, retries and what each status means; this module declares the source and
reads it, because Jira's search needs more than the base's paging declares (below).

What is read, per window ``[start, end]``:

- ``GET /rest/api/3/myself`` once per instance: the time zone of the account, in which
  JQL reads a bare date-time (``updated >= "2026-01-05 09:30"`` means 09:30 *there*);
- ``GET /rest/api/3/search/jql`` with ``<scope> AND updated >= "<start>" ORDER BY updated
  ASC, key ASC`` (``<scope>``: ``project in (…)``, the configured ``jql``, or nothing),
  the fields the payload needs (the enhanced search returns only ``id`` by default), paged
  as described below;
- for each issue updated in the window, ``GET /rest/api/3/issue/{id}/comment`` with
  ``orderBy=created``, paged by ``startAt``;
- for a pushed delivery (:mod:`memsync.connectors.jira.webhook`), ``GET
  /rest/api/3/issue/{id}`` with the same fields, then its comments as above: the re-read
  of one issue.

Paging the search: JQL compares ``updated`` at minute precision, in the account's time
zone, so each next page asks again from the minute of the last issue read (a *keyset*
page: the issues of that minute read before are dropped by id and ``updated``), and
``nextPageToken`` is followed only when one minute holds a whole page. Whatever the token
encodes, an issue edited while the search is paged moves to the end of the order and
cannot shift an issue not yet read out of the next page: that page starts after what was
read, not at an offset. Issues updated after ``end`` are left for the next run.

One stream, ``issues``, ordered: issues go out in ``updated`` order, each followed by
its comments, whose position is the issue's ``updated`` (they are read because it
changed). An edited or added comment bumps its issue's ``updated``, so it is read by the
next window. The search is eventually consistent: an issue updated just before a run may
be missing from it, which the overlap (default ``2h``) covers.

Deletions: an issue whose comments answer 404 (deleted while read) is a tombstone with
its comments; each complete read of an issue's comments lists them (a deleted comment is
tombstoned); a read of the whole scope (window from ``start``, or from the beginning)
lists every issue, so a stored issue the search no longer returns, deleted or moved out
of scope, is tombstoned with its comments.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memsync.clock import Clock
from memsync.connectors._parsing import optional_str, parse_iso_time
from memsync.connectors.base import Cursor, Deletion, KeyScope, Listing, Stream, Window
from memsync.connectors.config import SubjectTemplateField
from memsync.connectors.errors import StopRun
from memsync.connectors.http import (
    BasicAuth,
    HttpConnector,
    HttpSource,
    HttpStream,
    Item,
    NotFound,
    PageRequest,
)

# The base's "this request answered 404 or 410": for an issue's comments, the issue is gone.
from memsync.connectors.http.connector import _Gone as Gone
from memsync.connectors.jira.declaration import JIRA, JiraConfig
from memsync.connectors.sessions import SessionResolution, TicketStatus
from memsync.connectors.webhooks import WebhookReceiver
from memsync.episode import JSONObject, Tombstone
from memsync.stopping import Sleeper

if TYPE_CHECKING:
    import httpx

__all__ = [
    "IssueRef",
    "JiraComment",
    "JiraConnector",
    "JiraIssue",
    "JiraRecord",
    "adf_text",
    "issue_key_prefix",
    "jql_time",
]

_SOURCE = "jira"
# A status's category (StatusDetails.statusCategory.key: new, indeterminate or done), not
# its name, which every workflow names its own way; reopened, an issue is open again.
# https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-workflow-statuses/
_STATUS = TicketStatus("status.statusCategory.key", frozenset({"done"}), title="summary")
_SEARCH_PATH = "/rest/api/3/search/jql"
_ISSUE_PATH = "/rest/api/3/issue/{id}"
_MYSELF_PATH = "/rest/api/3/myself"
# The enhanced search returns only ids unless asked: these are what the payload and the
# subject fields read.
_SEARCH_FIELDS = (
    "summary,description,status,issuetype,priority,project,reporter,assignee,labels,"
    "created,updated,resolution,parent"
)
_JQL_MINUTE = "%Y-%m-%d %H:%M"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A comment list whose total changes while it is paged is read again from its start, at
# most this many times; after that its comments go out without a listing.
_COMMENT_LIST_READS = 3
# ADF nodes that end a line of the plain text.
_ADF_BLOCKS = frozenset(
    {"paragraph", "heading", "codeBlock", "blockquote", "listItem", "tableCell", "panel", "rule"}
)


@dataclass(frozen=True, slots=True)
class IssueRef:
    """The issue a record belongs to: the ids its keys are built from, the fields subject
    templates may name, and its update time."""

    site: str
    id: str
    key: str
    updated: datetime
    project_key: str | None = None
    project_id: str | None = None
    reporter_id: str | None = None
    assignee_id: str | None = None

    @property
    def key_prefix(self) -> str:
        """``jira:{site}:issue:{id}``: the issue's key and the start of its comments'."""
        return issue_key_prefix(self.site, self.id)

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return {
            "site": self.site,
            "project_key": self.project_key,
            "project_id": self.project_id,
            "issue_key": self.key,
            "issue_id": self.id,
            "reporter_id": self.reporter_id,
            "assignee_id": self.assignee_id,
        }


def issue_key_prefix(site: str, issue_id: str) -> str:
    """``jira:{site}:issue:{id}``: an issue's key and the start of its comments'. The
    numeric id, not the issue key, which changes when the issue moves project."""
    return f"{_SOURCE}:{site}:issue:{issue_id}"


@dataclass(frozen=True, slots=True)
class _IssueRecord:
    """What every Jira record shares: the issue it was read for."""

    issue: IssueRef

    @property
    def position(self) -> datetime:
        # Comments are read because their issue was updated (a comment added or edited
        # bumps the issue's ``updated``), so the issue's update time stands for them too.
        return self.issue.updated

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.issue.subject_values()

    @property
    def session_id(self) -> str:
        # An issue is a support session: its key names it, on its comments too.
        return self.issue.key_prefix

    @property
    def resolution(self) -> SessionResolution | None:
        # Only the issue says how it stands; its comments belong to it.
        return None


@dataclass(frozen=True, slots=True)
class JiraIssue(_IssueRecord):
    """An issue in its latest state, as the search returns it."""

    fields: JSONObject

    episode_type: ClassVar[str] = "jira.issue"

    def key(self) -> str:
        return self.issue.key_prefix

    @property
    def resolution(self) -> SessionResolution | None:
        return _STATUS.resolution(self.fields, self.issue.updated)

    @property
    def occurred_at(self) -> datetime:
        return self.issue.updated

    def payload(self) -> JSONObject:
        fields = self.fields
        # ``updated`` is left out: it changes with every comment, which is its own
        # episode, and would make each new comment a revision of the issue too.
        labels = fields.get("labels")
        parent = fields.get("parent")
        return {
            "id": self.issue.id,
            "key": self.issue.key,
            "project": self.issue.project_key,
            # ``title`` and plain-text ``description``: where compilers read an issue's
            # text (memsync.compile.text); Jira's v3 answers the description as ADF.
            "title": optional_str(fields.get("summary")),
            "description": adf_text(fields.get("description")),
            "status": _name(fields.get("status")),
            "issuetype": _name(fields.get("issuetype")),
            "priority": _name(fields.get("priority")),
            "resolution": _name(fields.get("resolution")),
            "reporter": self.issue.reporter_id,
            "assignee": self.issue.assignee_id,
            "labels": sorted(str(label) for label in labels) if isinstance(labels, list) else [],
            "parent": parent.get("key") if isinstance(parent, dict) else None,
            "created": fields.get("created"),
        }


@dataclass(frozen=True, slots=True)
class JiraComment(_IssueRecord):
    """One comment of an issue."""

    comment_id: str
    created: datetime
    data: JSONObject
    #: Its last edit (``updated``; its ``created`` when Jira left that out).
    updated: datetime | None = None

    episode_type: ClassVar[str] = "jira.comment"

    def key(self) -> str:
        return f"{self.issue.key_prefix}:comment:{self.comment_id}"

    @property
    def occurred_at(self) -> datetime:
        return self.created

    def payload(self) -> JSONObject:
        # ``updated`` and ``updateAuthor`` are left out: an edit shows in ``body``.
        return {
            "id": self.comment_id,
            "issue_id": self.issue.id,
            "author": _account_id(self.data.get("author")),
            "body": adf_text(self.data.get("body")),
            "created": self.data.get("created"),
            "visibility": self.data.get("visibility"),
        }


JiraRecord = JiraIssue | JiraComment


@dataclass(frozen=True, slots=True)
class IssuesListing(Listing):
    """Every issue of the configured scope, read in full: a stored issue or comment whose
    issue is not among them is gone (deleted, or moved out of the scope)."""

    def gone(self, key: str) -> bool:
        # jira:{site}:issue:{id}[:comment:{id}] -> jira:{site}:issue:{id}
        return ":".join(key.split(":", 4)[:4]) not in self.present


def adf_text(document: object) -> str | None:
    """The plain text of an Atlassian Document Format value (what v3 answers for
    descriptions and comment bodies): text nodes joined, a line per block, mentions
    and emoji as their text; a plain string (v2, or a gateway) is kept as it is."""
    if document is None or isinstance(document, str):
        return document
    lines: list[str] = []
    current: list[str] = []

    def walk(node: object) -> None:
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        attrs = node.get("attrs")
        if kind == "text" and isinstance(node.get("text"), str):
            current.append(node["text"])
        elif kind in ("mention", "emoji", "status") and isinstance(attrs, dict):
            current.append(str(attrs.get("text") or attrs.get("shortName") or ""))
        elif kind == "hardBreak":
            lines.append("".join(current))
            current.clear()
        children = node.get("content")
        for child in children if isinstance(children, list) else []:
            walk(child)
        if kind in _ADF_BLOCKS and current:
            lines.append("".join(current))
            current.clear()

    walk(document)
    if current:
        lines.append("".join(current))
    return "\n".join(lines)


def _name(value: object) -> str | None:
    return optional_str(value.get("name")) if isinstance(value, dict) else None


def _account_id(value: object) -> str | None:
    return optional_str(value.get("accountId")) if isinstance(value, dict) else None


def _parse_time(value: object, what: str) -> datetime:
    return parse_iso_time(value, what, source=_SOURCE)


def _numeric_id(value: object, what: str) -> str:
    # Jira sends ids as strings of digits ("10002"); keys are built from them.
    text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
    if not text.isdigit():
        raise StopRun(f"{_SOURCE}: {what} has no numeric 'id': {value!r}")
    return text


def issue_of(site: str, raw: object, path: str = _SEARCH_PATH) -> JiraIssue:
    """A search result (or the issue ``path`` answered) as a record; :class:`StopRun`
    when it is not Jira's shape."""
    if not isinstance(raw, dict) or not isinstance(raw.get("fields"), dict):
        raise StopRun(_shape_error(path, f"issue without fields: {raw!r:.200}"))
    fields: dict[str, Any] = raw["fields"]
    project = fields.get("project")
    project = project if isinstance(project, dict) else {}
    key = optional_str(raw.get("key"))
    if key is None:
        raise StopRun(_shape_error(path, f"issue without a key: {raw!r:.200}"))
    ref = IssueRef(
        site=site,
        id=_numeric_id(raw.get("id"), f"issue {key}"),
        key=key,
        updated=_parse_time(fields.get("updated"), f"issue {key} updated"),
        project_key=optional_str(project.get("key")),
        project_id=optional_str(project.get("id")),
        reporter_id=_account_id(fields.get("reporter")),
        assignee_id=_account_id(fields.get("assignee")),
    )
    return JiraIssue(issue=ref, fields=fields)


def comment_of(issue: IssueRef, raw: object) -> JiraComment:
    """One item of an issue's comment list as a record."""
    if not isinstance(raw, dict):
        raise StopRun(f"{_SOURCE}: comment of issue {issue.key} is {raw!r:.200}")
    created = _parse_time(raw.get("created"), f"comment of issue {issue.key} created")
    updated = raw.get("updated")
    return JiraComment(
        issue=issue,
        comment_id=_numeric_id(raw.get("id"), f"comment of issue {issue.key}"),
        created=created,
        data=raw,
        updated=created
        if updated is None
        else _parse_time(updated, f"comment of issue {issue.key} updated"),
    )


def jql_time(moment: datetime, zone: ZoneInfo) -> str:
    """``moment`` as JQL reads a bare date-time of an account in ``zone``: local time to
    the minute, rounded down; and where that local time occurs twice (the end of summer
    time) and ``moment`` is its first occurrence, an hour earlier, so Jira never reads it
    as a time after ``moment`` whichever occurrence it takes."""
    local = moment.astimezone(zone).replace(second=0, microsecond=0)
    naive = local.replace(tzinfo=None)
    twice = (
        naive.replace(tzinfo=zone, fold=0).utcoffset()
        != naive.replace(tzinfo=zone, fold=1).utcoffset()
    )
    if twice and local.fold == 0:
        naive -= timedelta(hours=1)
    return naive.strftime(_JQL_MINUTE)


def _shape_error(path: str, problem: str) -> str:
    return f"{_SOURCE}: GET {path}: unexpected response shape: {problem}"


# The source as the HTTP base reads it: where Jira is, how it authenticates, what its
# statuses mean. The streams say what is requested and what each item becomes; the
# reading itself is JiraConnector.fetch_stream (keyset pages, listings), not the base's.
# One stream, ``issues``, ordered (the module docstring says why).
ISSUES = HttpStream(
    name="issues",
    path=_SEARCH_PATH,
    records="issues",
    build=lambda item: [issue_of(item.config.site, item.data)],
    ordered=True,
)
COMMENTS = HttpStream(
    name="comments",
    path="/rest/api/3/issue/{parent[id]}/comment",
    records="comments",
    build=lambda item: [comment_of(_parent_issue(item), item.data)],
    on_not_found=NotFound.PARENT_GONE,
)
SOURCE = HttpSource(
    base_url="https://{config.site}.atlassian.net",
    streams=(ISSUES,),
    auth=BasicAuth(username="{config.email}"),
    vendor="Jira Cloud",
    auth_hint=(
        "Jira refused the credentials of {config.email}: check email and token (an API "
        "token from id.atlassian.com, of that account)"
    ),
    not_found_hint="check site and base_url {base_url}",
)


def _parent_issue(item: Item) -> IssueRef:
    assert isinstance(item.parent, JiraIssue), item.parent
    return item.parent.issue


class JiraConnector(HttpConnector[JiraConfig, JiraRecord], declaration=JIRA):
    """Issues and comments of one Jira Cloud site, in the configured scope.

    On the HTTP base (auth, client, retries, the meaning of each status), with its own
    reading: the base's paging follows ``nextPageToken`` and lists a full read only
    without ``start``, where Jira needs the JQL written in the account's time zone,
    pages no edit can shift, comment listings and a full read from ``start``.

    Repeats: every issue updated in the window is re-read with all its comments, so
    overlapping windows and backfills repeat records; keys make that free. Rate limits:
    429 is waited out per ``Retry-After`` (else ``X-RateLimit-Reset``) within ``retry``
    caps, then :class:`RateLimitExhausted`; 5xx and timeouts the same, then
    :class:`RetryableError`; refused credentials, a refused JQL and bodies that are not
    Jira's raise :class:`StopRun`.
    """

    source = SOURCE

    def __init__(
        self,
        config: JiraConfig,
        *,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        sleeper: Sleeper | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(config, client=client, transport=transport, sleeper=sleeper, clock=clock)
        self._time_zone: ZoneInfo | None = None

    def check(self, now: datetime) -> str:
        """``GET /rest/api/3/myself``: the account the credentials belong to."""
        me = self._get(_MYSELF_PATH)
        who = optional_str(me.get("displayName")) or optional_str(me.get("accountId")) or "?"
        return f"reached as {who} (time zone {self._zone_of(me).key})"

    # --- reading --------------------------------------------------------------------------

    def fetch_stream(
        self, stream: Stream, window: Window, cursor: Cursor | None
    ) -> Iterator[JiraRecord | Deletion]:
        """Yield each issue updated in the window followed by its comments and their
        listing, or its tombstone when it is gone meanwhile; after a read of the whole
        scope, the listing of its issues."""
        start = window.start or self.config.start
        whole_scope = start is None or (
            self.config.start is not None and start <= self.config.start
        )
        present: set[str] = set()
        for issue in self._search(start or _EPOCH, window.end, read_to_the_end=whole_scope):
            if issue.issue.updated > window.end:
                present.add(issue.key())  # it exists; its changes are the next run's
                continue
            yield issue
            if not self.config.include_comments:
                present.add(issue.key())
                continue
            try:
                yield from self._comments(issue.issue)
            except Gone:
                yield Tombstone(issue.key(), with_children=True)
                continue
            present.add(issue.key())
        if whole_scope:
            scope = KeyScope(f"{_SOURCE}:{self.config.site}:issue:")
            yield IssuesListing(scope, frozenset(present))

    def _search(
        self, start: datetime, end: datetime, *, read_to_the_end: bool
    ) -> Iterator[JiraIssue]:
        """Issues updated since ``start`` in ``updated`` order, by keyset pages (see the
        module docstring); past ``end`` only if ``read_to_the_end``."""
        since = self._jql_minute(start)
        token: str | None = None
        # The issues already handed out at or after the current page's first minute, by
        # id: a keyset page reads that minute again.
        handed_out: dict[str, datetime] = {}
        while True:
            params: dict[str, str | int] = {
                "jql": self._jql(since),
                "fields": _SEARCH_FIELDS,
                "maxResults": self.config.page_size,
            }
            if token is not None:
                params["nextPageToken"] = token
            page = self._get(_SEARCH_PATH, params)
            raw_issues = page.get("issues")
            if not isinstance(raw_issues, list):
                raise StopRun(_shape_error(_SEARCH_PATH, "no 'issues' list"))
            issues = [issue_of(self.config.site, raw) for raw in raw_issues]
            for issue in issues:
                if handed_out.get(issue.issue.id) == issue.issue.updated:
                    continue
                handed_out[issue.issue.id] = issue.issue.updated
                yield issue
                if issue.issue.updated > end and not read_to_the_end:
                    return  # the rest is later still: the next run's
            next_token = page.get("nextPageToken")
            if page.get("isLast") is True or not isinstance(next_token, str) or not next_token:
                return
            if not issues:
                raise StopRun(_shape_error(_SEARCH_PATH, "an empty page that is not the last"))
            boundary = self._jql_minute(issues[-1].issue.updated)
            if boundary != since:
                since, token = boundary, None
                handed_out = {
                    key: updated
                    for key, updated in handed_out.items()
                    if self._jql_minute(updated) >= boundary
                }
            elif next_token == token:
                raise StopRun(_shape_error(_SEARCH_PATH, "nextPageToken repeats"))
            else:
                # One minute holds a whole page: only the token gets past it.
                token = next_token

    def _jql(self, since: str) -> str:
        if self.config.projects:
            scope = f"project in ({', '.join(self.config.projects)}) AND "
        elif self.config.jql is not None:
            scope = f"({self.config.jql}) AND "
        else:
            scope = ""
        return f'{scope}updated >= "{since}" ORDER BY updated ASC, key ASC'

    def _jql_minute(self, moment: datetime) -> str:
        return jql_time(moment, self._zone())

    def _zone(self) -> ZoneInfo:
        if self._time_zone is None:
            self._time_zone = self._zone_of(self._get(_MYSELF_PATH))
        return self._time_zone

    def _zone_of(self, me: Mapping[str, Any]) -> ZoneInfo:
        name = me.get("timeZone")
        try:
            return ZoneInfo(name) if isinstance(name, str) and name else ZoneInfo("UTC")
        except (ZoneInfoNotFoundError, ValueError):
            raise StopRun(
                f"jira '{self.name}': GET {_MYSELF_PATH}: time zone {name!r} is unknown here, "
                "so JQL times cannot be written in it (update the tzdata package)"
            ) from None

    def _comments(self, issue: IssueRef) -> Iterator[JiraComment | Listing]:
        """Every comment of ``issue``, then their listing if the list held still while it
        was paged. Raises the base's 404 error when the issue is gone."""
        path = f"/rest/api/3/issue/{issue.id}/comment"
        handed_out: set[str] = set()
        for _ in range(_COMMENT_LIST_READS):
            start_at, total = 0, None
            # Only what this read saw proves presence: a comment handed out by an earlier
            # read may have been deleted since.
            read: set[str] = set()
            while True:
                page = self._get(
                    path,
                    {
                        "startAt": start_at,
                        "maxResults": self.config.page_size,
                        "orderBy": "created",
                    },
                    COMMENTS,
                )
                comments = page.get("comments")
                page_total = page.get("total")
                if not isinstance(comments, list) or not isinstance(page_total, int):
                    raise StopRun(_shape_error(path, "no 'comments' list and 'total'"))
                if total is not None and page_total != total:
                    break  # a comment was added or deleted meanwhile: offsets moved
                total = page_total
                for raw in comments:
                    comment = comment_of(issue, raw)
                    read.add(comment.comment_id)
                    if comment.comment_id not in handed_out:
                        handed_out.add(comment.comment_id)
                        yield comment
                start_at += len(comments)
                if not comments or start_at >= total:
                    present = frozenset(f"{issue.key_prefix}:comment:{c}" for c in read)
                    yield Listing(KeyScope(f"{issue.key_prefix}:comment:"), present)
                    return

    def read_issue(self, issue_id: str) -> Sequence[JiraRecord] | None:
        """The re-read of one issue, as :meth:`fetch_stream` reads each issue of a window:
        ``GET /rest/api/3/issue/{id}`` with the search's fields, parsed by the search's
        parser, then (``include_comments``) its comments; ``None`` when it is gone (404).
        What receives a pushed delivery reads through this, so a pushed record is built
        from what the re-read sees (v3's ADF text, not the webhook's wiki markup).

        Repeats: reading again returns the issue as it is then. Raises what
        :meth:`fetch` raises for refused credentials, rate limits and outages."""
        try:
            path = _ISSUE_PATH.format(id=issue_id)
            issue = issue_of(self.config.site, self._get(path, {"fields": _SEARCH_FIELDS}), path)
            if not self.config.include_comments:
                return [issue]
            comments = [c for c in self._comments(issue.issue) if isinstance(c, JiraComment)]
        except Gone:
            return None
        return [issue, *comments]

    def source_updated_at(self, record: JiraRecord) -> datetime | None:
        """An issue's ``updated`` (Jira moves it with every change of the issue); a
        comment's own ``updated`` (moved by each edit of it), else its ``created``."""
        if isinstance(record, JiraIssue):
            return record.issue.updated
        return record.updated or record.created

    def webhook_receiver(self) -> WebhookReceiver[JiraRecord] | None:
        """``jira:issue_*`` and ``comment_*`` deliveries, when ``webhook:`` is configured."""
        if self.config.webhook is None:
            return None
        # Imported here: the receiver module builds on this one's parsers.
        from memsync.connectors.jira.webhook import JiraWebhookReceiver

        return JiraWebhookReceiver(
            self.config, self.config.webhook.secret.get_secret_value(), self.read_issue
        )

    # --- requests -------------------------------------------------------------------------

    def _get(
        self, path: str, params: Mapping[str, str | int] | None = None, stream: HttpStream = ISSUES
    ) -> dict[str, Any]:
        """One request through the base (auth, retries, statuses); the JSON body."""
        body, _ = self._send(stream, PageRequest(path, params or {}))
        return body
