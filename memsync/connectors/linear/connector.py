"""The Linear connector: issues and comments of one workspace, declared on the HTTP base.

Every request is ``POST {base_url}/graphql`` with the API key in ``Authorization``
(https://linear.app/developers/graphql), sent, retried and mapped to the connector
errors by :class:`~memsync.connectors.http.connector.HttpConnector` as
:data:`LINEAR_SOURCE` declares it (auth, the two streams, their key templates, subject
fields and payloads, and ``RATELIMITED`` as a rate limit whatever its HTTP status). What
the declaration cannot say is how a window is read, and that is here:

- streams ``issues`` and ``comments``, limited to the configured team keys, with
  ``includeArchived: true`` (archived and trashed records come back, and become
  tombstones) and ``orderBy: updatedAt``, paged with ``first`` / ``after:
  pageInfo.endCursor`` (https://linear.app/developers/pagination,
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

Keys come from the nodes alone: the workspace's UUID is read with each record
(``team { organization { id } }``), so no request is spent on it.

Pushed deliveries (:mod:`.webhook`) carry Linear's webhook shape, not these documents'
nodes, so :meth:`LinearConnector.read_one` reads the record back by id with the same
document and the same mapping: a pushed record and its re-read are one episode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

from memsync.connectors._parsing import parse_iso_time
from memsync.connectors.base import Cursor, Deletion, Stream, Window
from memsync.connectors.errors import StopRun
from memsync.connectors.http import (
    ApiKeyHeader,
    DeletedWhen,
    GraphQLPageInfo,
    HttpConnector,
    HttpRecord,
    HttpSource,
    HttpStream,
    Incremental,
    PageRequest,
    dig,
)
from memsync.connectors.linear.declaration import LINEAR, LinearConfig
from memsync.connectors.linear.walk import SubWindow, WindowWalk
from memsync.connectors.sessions import TicketSessions, TicketStatus
from memsync.connectors.webhooks import WebhookReceiver
from memsync.episode import JSONObject, Tombstone

__all__ = ["COMMENTS_QUERY", "ISSUES_QUERY", "LINEAR_SOURCE", "LinearConnector"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

_PAGE_ARGUMENTS = (
    "filter: $filter, first: $first, after: $after, includeArchived: true, orderBy: updatedAt"
)
_PAGE_INFO = "pageInfo { hasNextPage endCursor }"
_TEAM = "team { id key name organization { id } }"

ISSUES_QUERY = (
    "query MemsyncIssues($filter: IssueFilter, $first: Int, $after: String) "
    f"{{ issues({_PAGE_ARGUMENTS}) {{ nodes {{ "
    "id identifier number title description priority priorityLabel estimate dueDate url "
    "createdAt updatedAt archivedAt trashed startedAt completedAt canceledAt "
    f"state {{ name type }} {_TEAM} project {{ id name }} "
    "assignee { id name } creator { id name } parent { id identifier } "
    "labels { nodes { name } } "
    f"}} {_PAGE_INFO} }} }}"
)

COMMENTS_QUERY = (
    "query MemsyncComments($filter: CommentFilter, $first: Int, $after: String) "
    f"{{ comments({_PAGE_ARGUMENTS}) {{ nodes {{ "
    "id body createdAt updatedAt editedAt archivedAt parentId issueId user { id name } "
    f"issue {{ id identifier archivedAt trashed {_TEAM} project {{ id }} }} "
    f"}} {_PAGE_INFO} }} }}"
)


_ISSUE_KEY = "{team[organization][id]}:issue:{id}"
_COMMENT_ISSUE_KEY = "{issue[team][organization][id]}:issue:{issue[id]}"
"""A comment's issue's key: the session of an issue is its key, on its comments too."""
# A workflow state's type: triage, backlog, unstarted, started, completed or canceled
# (https://linear.app/developers/graphql: WorkflowState.type); moved back out of
# completed, the issue is open again.
_STATE = TicketStatus(
    "state.type", resolved=frozenset({"completed"}), unresolved=frozenset({"canceled"})
)


def _subject_fields(issue: str) -> dict[str, str]:
    """The subject fields of a record, read at ``issue`` (an issue node, or a comment's
    ``issue``): a comment carries its issue's."""
    return {
        "workspace": f"{issue}team.organization.id",
        "team_key": f"{issue}team.key",
        "team_id": f"{issue}team.id",
        "issue_id": f"{issue}id",
        "issue_identifier": f"{issue}identifier",
        "project_id": f"{issue}project.id",
    }


def _list(name: str, document: str, **declared: Any) -> HttpStream:
    """A root list of the GraphQL API (``issues``, ``comments``) as a stream: posted to
    ``/graphql``, nodes at ``data.{name}.nodes``, Relay paging, positioned by
    ``updatedAt`` and ordered (by the walk: see the module)."""
    return HttpStream(
        name=name,
        path="/graphql",
        graphql=document,
        records=f"data.{name}.nodes",
        pagination=GraphQLPageInfo(f"data.{name}.pageInfo"),
        incremental=Incremental(field="updatedAt"),
        ordered=True,
        **declared,
    )


LINEAR_SOURCE = HttpSource(
    base_url="https://api.linear.app",
    vendor="Linear",
    auth=ApiKeyHeader(header="Authorization"),
    auth_hint=(
        "Linear refused the API key. Check token (a personal API key from Settings > "
        "Account > Security & access) and that it may read the configured teams"
    ),
    not_found_hint="check base_url {base_url} (requests go to {base_url}/graphql)",
    streams=(
        _list(
            "issues",
            ISSUES_QUERY,
            # UUIDs only: ENG-12 changes when the issue moves to another team.
            key=_ISSUE_KEY,
            sessions=TicketSessions(_ISSUE_KEY, _STATE),
            episode_type="linear.issue",
            subject_fields=_subject_fields(""),
            # updatedAt moves without an edit a reader would see (a new comment).
            exclude=frozenset({"updatedAt"}),
            deleted_when=DeletedWhen("archivedAt", with_children=True),
        ),
        _list(
            "comments",
            COMMENTS_QUERY,
            # Under its issue's key, so that the issue's tombstone covers it.
            key=f"{_COMMENT_ISSUE_KEY}:comment:{{id}}",
            sessions=TicketSessions(_COMMENT_ISSUE_KEY),
            episode_type="linear.comment",
            occurred_at="createdAt",
            subject_fields=_subject_fields("issue."),
            # The issue's identifier, team and archive state are the issue's, not edits
            # of the comment (issueId stays).
            exclude=frozenset({"updatedAt", "issue"}),
            deleted_when=DeletedWhen("archivedAt", with_children=False),
        ),
    ),
)


class LinearConnector(HttpConnector[LinearConfig, HttpRecord], declaration=LINEAR):
    """Issues and comments of one Linear workspace (optionally some of its teams).

    Repeats: every record updated in a window is read again by the next window's
    overlap and by backfills; keys make that free. Conflicts: none, keys are UUIDs.
    Rate limits: a 429 or a ``RATELIMITED`` GraphQL error waits as the response says
    (``Retry-After``, or the reset of the budget that ran out), within ``retry`` caps,
    then :class:`RateLimitExhausted`; 5xx and timeouts back off, then
    :class:`RetryableError`; refused credentials, other GraphQL errors and bodies that
    are not the API's raise :class:`StopRun`.
    """

    source = LINEAR_SOURCE

    def source_updated_at(self, record: HttpRecord) -> datetime | None:
        """The issue's or comment's ``updatedAt``: Linear moves it with every edit (and
        with more, a new comment on an issue, which only makes it later)."""
        return _updated_at(record.data)

    def webhook_receiver(self) -> WebhookReceiver[HttpRecord] | None:
        """``Issue`` and ``Comment`` deliveries, when ``webhook:`` is configured."""
        if self.config.webhook is None:
            return None
        # Imported here: the receiver module builds on this one.
        from memsync.connectors.linear.webhook import LinearWebhookReceiver

        return LinearWebhookReceiver(self, self.config.webhook.secret.get_secret_value())

    def read_one(self, stream: str, record_id: str) -> list[HttpRecord | Tombstone] | None:
        """Issue (``stream`` ``issues``) or comment (``comments``) ``record_id`` as a
        re-read finds it now, in one request: ``[record]``, ``[tombstone]`` when it is
        archived or trashed (a comment also when its issue is), ``[]`` when it is not one
        this connector reads (another team's, a comment that is not on an issue), and
        ``None`` when Linear answers with no such record (purged, or out of the API
        key's sight).

        Sent once, without the retries and waits of a run: a delivery is answered
        within Linear's five seconds, and Linear delivers a refused one again. Raises
        the connector errors of a request (:class:`RetryableError` for a timeout, a 5xx
        or a rate limit, :class:`StopRun` for the rest); repeats read the same record.
        """
        [declared] = [s for s in self.source.streams if s.name == stream]
        where: JSONObject = {"id": {"eq": record_id}}
        nodes, _ = self._page(declared, where, None, first=1, retrying=False)
        found = [node for node in nodes if node.get("id") == record_id]
        if not found:
            return None
        [node] = found
        if not self._in_configured_teams(declared, node):
            return []
        position = _updated_at(node)
        read = self._nodes_read(declared, [node], Window(None, position), position)
        return [item for item in read if isinstance(item, HttpRecord | Tombstone)]

    def removed(
        self, stream: str, node: Mapping[str, Any], *, deleted_at: datetime | None = None
    ) -> Tombstone:
        """The tombstone of issue (``stream`` ``issues``, with its comments) or comment
        (``comments``) ``node``, which needs only the ids its key is built from (see
        :data:`LINEAR_SOURCE`): a deletion pushed names no more. ``deleted_at``: when it
        was deleted, if known (:class:`~memsync.episode.Tombstone`)."""
        [declared] = [s for s in self.source.streams if s.name == stream]
        key = self._render(declared.key, node, {})
        return Tombstone(
            f"{self.type}:{key}", with_children=stream == "issues", deleted_at=deleted_at
        )

    def _in_configured_teams(self, declared: HttpStream, node: Mapping[str, Any]) -> bool:
        if self.config.teams is None:
            return True
        issue = node if declared.name == "issues" else node.get("issue")
        return dig(issue, "team.key") in self.config.teams if isinstance(issue, dict) else True

    def fetch_stream(
        self, stream: Stream, window: Window, cursor: Cursor | None
    ) -> Iterator[HttpRecord | Deletion]:
        """The tombstones of the issues (or comments) archived in the window, then every
        one updated in it, oldest sub-window first (see :mod:`.walk`), each record at the
        walk's position when its page was read."""
        [declared] = [s for s in self.source.streams if s.name == stream.name]
        start = window.start or self.config.start or _EPOCH
        # Archives first, so that a run cut short in the walk has seen those of its
        # whole window: the next run's window starts later.
        archived = self._where(declared, "archivedAt", SubWindow(start, window.end))
        after: str | None = None
        while True:
            nodes, after = self._page(declared, archived, after)
            yield from self._nodes_read(declared, nodes, window, start)
            if after is None:
                break
        yield from self._walk(declared, window, start)

    def _walk(
        self, declared: HttpStream, window: Window, start: datetime
    ) -> Iterator[HttpRecord | Deletion]:
        walk = WindowWalk.over(start, window.end, self.config.page_size)
        # Sub-windows share their boundary instants (both ends are included): what was
        # handed out at one is not handed out again when the walk reaches it (a few
        # records per sub-window are remembered, those at its ends).
        at_boundaries: set[tuple[object, object]] = set()
        while not walk.done:
            position = walk.position
            asked = walk.next()
            where = self._where(declared, "updatedAt", asked)
            nodes, after = self._page(declared, where, None)
            fresh = [n for n in nodes if (n.get("id"), n.get("updatedAt")) not in at_boundaries]
            yield from self._nodes_read(declared, fresh, window, position)
            edges = (asked.start, asked.end, _updated_at(nodes[-1]) if nodes else None)
            at_boundaries |= {
                (node.get("id"), node.get("updatedAt"))
                for node in nodes
                if _updated_at(node) in edges
            }
            if after is None:
                walk.read_to_end(len(nodes))
                continue
            if _newest_first(nodes) and walk.page_overflowed(_updated_at(nodes[-1])):
                continue
            # One instant holds a whole page, or the answer is not newest first: this
            # sub-window is paged to its end instead.
            while after is not None:
                nodes, after = self._page(declared, where, after)
                yield from self._nodes_read(declared, nodes, window, position)
            walk.read_to_end(self.config.page_size)

    def _nodes_read(
        self,
        declared: HttpStream,
        nodes: Sequence[dict[str, Any]],
        window: Window,
        position: datetime,
    ) -> Iterator[HttpRecord | Deletion]:
        """The records (at ``position``) or tombstones the nodes stand for."""
        for node in nodes:
            issue = node.get("issue") if declared.name == "comments" else node
            if _gone(node) or not isinstance(issue, dict) or _gone(issue):
                if isinstance(issue, dict):
                    # A live comment of an archived issue would otherwise revive what the
                    # issue's tombstone covered.
                    yield Tombstone(
                        f"{self.type}:{self._render(declared.key, node, {})}",
                        with_children=declared.name == "issues",
                    )
                # (A comment without an issue is a project's or document's: not read.)
                continue
            for item in self._records(declared, node, window, None):
                if isinstance(item, HttpRecord):
                    yield dataclasses.replace(item, position=position)

    def _where(self, declared: HttpStream, field: str, span: SubWindow) -> JSONObject:
        """``field`` (``updatedAt`` or ``archivedAt``) within ``span``, of the configured
        teams."""
        within: JSONObject = {field: {"gte": _iso(span.start), "lte": _iso(span.end)}}
        if self.config.teams is None:
            return within
        team: JSONObject = {"team": {"key": {"in": list(self.config.teams)}}}
        return {"and": [within, team if declared.name == "issues" else {"issue": team}]}

    def _page(
        self,
        declared: HttpStream,
        where: JSONObject,
        after: str | None,
        *,
        first: int | None = None,
        retrying: bool = True,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page (``first`` nodes, by default the configured page size; sent once
        unless ``retrying``): its nodes and, when there is a next page, the cursor to it."""
        variables = {"filter": where, "first": first or self.config.page_size, "after": after}
        request = PageRequest(declared.path, variables=variables)
        send = self._send if retrying else self._send_once
        body, _ = send(declared, request)
        nodes = dig(body, declared.records or "")
        if not isinstance(nodes, list):
            raise StopRun(self._malformed(declared, request, f"no '{declared.records}' list"))
        page_info = dig(body, f"data.{declared.name}.pageInfo")
        if not isinstance(page_info, dict) or page_info.get("hasNextPage") is not True:
            return [node for node in nodes if isinstance(node, dict)], None
        end_cursor = page_info.get("endCursor")
        if not isinstance(end_cursor, str) or not end_cursor or end_cursor == after:
            raise StopRun(self._malformed(declared, request, "hasNextPage without a new endCursor"))
        return [node for node in nodes if isinstance(node, dict)], end_cursor


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _updated_at(node: Mapping[str, Any]) -> datetime:
    return parse_iso_time(node.get("updatedAt"), "updatedAt", source="linear")


def _newest_first(nodes: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a page is ordered newest first, as ``orderBy: updatedAt`` answers: only
    then does a full page hold the newest part of what was asked, completely."""
    times = [_updated_at(node) for node in nodes]
    return bool(times) and all(a >= b for a, b in pairwise(times))


def _gone(node: Mapping[str, Any]) -> bool:
    """Archived (``archivedAt``) or in the trash (``trashed``, issues only)."""
    return node.get("archivedAt") is not None or node.get("trashed") is True
