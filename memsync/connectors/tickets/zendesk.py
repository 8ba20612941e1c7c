"""The Zendesk Support connector: tickets, their comments and their status changes.

What is read, per window:

- ``GET /api/v2/incremental/tickets/cursor.json?start_time=…`` then ``?cursor=…`` until
  ``end_of_stream``: every ticket updated since the window start (latest state only);
- for each such ticket, ``GET /api/v2/tickets/{id}/comments.json`` and
  ``GET /api/v2/tickets/{id}/audits.json`` (cursor pagination via ``meta.has_more`` /
  ``links.next``, or offset pagination via ``next_page``), from which the ``Change``
  events on ``status`` become status-change records.

A ticket the export shows with status ``deleted`` is a tombstone for the ticket and
everything below its key (comments, status changes); nothing more is read for it.

One stream, ``tickets``, ordered: the export hands tickets out in the order of their
``generated_timestamp`` (what ``start_time`` compares with; a time-based export's
``end_time`` is the last ticket's), which is never before the ticket's ``updated_at``,
the position of the ticket and of its comments and status changes. So every ticket not
yet handed out has a ``generated_timestamp`` at or after the highest position handed
out, and an export started there reads it: the runner may checkpoint after every
committed batch, and a run cut short resumes where it stopped.

Next-page links are followed by path and query against the configured base URL, so
credentials are only ever sent to that host and a fake server works unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from memsync.clock import Clock, SystemClock
from memsync.connectors._parsing import optional_int, parse_iso_time, required_int
from memsync.connectors.base import Cursor, Deletion, RecordConnector, Stream, Window
from memsync.connectors.config import SubjectTemplateField
from memsync.connectors.errors import RateLimited, RetryableError, StopRun
from memsync.connectors.retry import Retrier, retry_after_from_headers
from memsync.connectors.tickets.declaration import ZENDESK, ZendeskConfig
from memsync.episode import JSONObject, Tombstone
from memsync.stopping import Sleeper

if TYPE_CHECKING:
    import httpx

_INCREMENTAL_PATH = "/api/v2/incremental/tickets/cursor.json"
# Zendesk refuses an incremental export that starts less than a minute ago.
_EXPORT_MIN_AGE = timedelta(minutes=1)
# Fields that change without anything a reader would call an edit; keeping them out of
# the payload means they never produce a revision.
_VOLATILE_TICKET_FIELDS = frozenset({"generated_timestamp", "url"})
_BODY_SNIPPET_CHARS = 200
_SOURCE = "zendesk"


@dataclass(frozen=True, slots=True)
class TicketRef:
    """The ticket a record belongs to: its account and ids for keys and subjects, and
    its update time."""

    subdomain: str
    id: int
    updated_at: datetime
    organization_id: int | None = None
    requester_id: int | None = None
    assignee_id: int | None = None
    group_id: int | None = None
    brand_id: int | None = None

    @property
    def key_prefix(self) -> str:
        """``zendesk:{subdomain}:ticket:{id}``, the ticket's key and the start of the
        keys of its comments and audits: Zendesk never reuses an id in an account."""
        return f"{_SOURCE}:{self.subdomain}:ticket:{self.id}"

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        """The subject fields of every record of this ticket (``subject_fields``)."""
        return {
            "subdomain": self.subdomain,
            "ticket_id": self.id,
            "organization_id": self.organization_id,
            "requester_id": self.requester_id,
            "assignee_id": self.assignee_id,
            "group_id": self.group_id,
            "brand_id": self.brand_id,
        }


@dataclass(frozen=True, slots=True)
class _TicketRecord:
    """What every Zendesk record shares: the ticket it was read for."""

    ticket: TicketRef

    @property
    def position(self) -> datetime:
        # Comments and audits are read because their ticket was updated, so the
        # ticket's update time is the position every one of them stands for.
        return self.ticket.updated_at

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return self.ticket.subject_values()


@dataclass(frozen=True, slots=True)
class ZendeskTicket(_TicketRecord):
    """A ticket in its latest state, as the incremental export returns it."""

    data: JSONObject

    episode_type: ClassVar[str] = "zendesk.ticket"

    def key(self) -> str:
        return self.ticket.key_prefix

    @property
    def occurred_at(self) -> datetime:
        return self.ticket.updated_at

    def payload(self) -> JSONObject:
        return dict(self.data)


@dataclass(frozen=True, slots=True)
class ZendeskComment(_TicketRecord):
    """One comment of a ticket."""

    comment_id: int
    created_at: datetime
    data: JSONObject

    episode_type: ClassVar[str] = "zendesk.comment"

    def key(self) -> str:
        return f"{self.ticket.key_prefix}:comment:{self.comment_id}"

    @property
    def occurred_at(self) -> datetime:
        return self.created_at

    def payload(self) -> JSONObject:
        data = self.data
        # metadata.system holds the client's IP, user agent and location: personal
        # data with no value for memory, so it is left out.
        return {
            "ticket_id": self.ticket.id,
            "id": self.comment_id,
            "author_id": data.get("author_id"),
            "body": data.get("body"),
            "public": data.get("public"),
            "created_at": data.get("created_at"),
            "attachments": [
                {k: a.get(k) for k in ("id", "file_name", "content_type", "size")}
                for a in data.get("attachments") or []
                if isinstance(a, dict)
            ],
        }


@dataclass(frozen=True, slots=True)
class ZendeskStatusChange(_TicketRecord):
    """A ``status`` Change event of one audit: ``previous`` → ``value``."""

    audit_id: int
    created_at: datetime
    previous: str | None
    value: str | None
    author_id: int | None
    channel: str | None

    episode_type: ClassVar[str] = "zendesk.status_change"

    def key(self) -> str:
        return f"{self.ticket.key_prefix}:audit:{self.audit_id}:status"

    @property
    def occurred_at(self) -> datetime:
        return self.created_at

    def payload(self) -> JSONObject:
        return {
            "ticket_id": self.ticket.id,
            "audit_id": self.audit_id,
            "field": "status",
            "from": self.previous,
            "to": self.value,
            "author_id": self.author_id,
            "channel": self.channel,
            "created_at": self.created_at.isoformat(),
        }


ZendeskRecord = ZendeskTicket | ZendeskComment | ZendeskStatusChange


class _NotFound(StopRun):
    """HTTP 404: fatal for the export (wrong subdomain), harmless for one ticket's
    comments or audits (the ticket was deleted while we read)."""


def _parse_time(value: object, what: str) -> datetime:
    return parse_iso_time(value, what, source=_SOURCE)


def _required_int(data: Mapping[str, Any], field: str, what: str) -> int:
    return required_int(data, field, what, source=_SOURCE)


class ZendeskConnector(RecordConnector[ZendeskConfig, ZendeskRecord], declaration=ZENDESK):
    """Tickets, comments and status changes of one Zendesk Support account.

    Repeats: every ticket updated in the window is re-read with all its comments and
    audits, so overlapping windows and backfills repeat records; keys make that free.
    Rate limits: 429 is waited out per ``Retry-After`` within ``retry`` caps, then
    :class:`RateLimitExhausted`; 5xx and timeouts the same, then :class:`RetryableError`;
    401/403 and malformed bodies raise :class:`StopRun`.
    """

    def __init__(
        self,
        config: ZendeskConfig,
        *,
        client: httpx.Client | None = None,
        transport: httpx.BaseTransport | None = None,
        sleeper: Sleeper | None = None,
        clock: Clock | None = None,
    ) -> None:
        # httpx is imported by an instance, never by the class: listing or validating
        # connectors does not load it.
        import httpx

        super().__init__(config, sleeper=sleeper)
        self._clock: Clock = clock or SystemClock()
        self._client = client
        self._transport = transport
        self._owns_client = client is None
        self._auth = httpx.BasicAuth(f"{config.email}/token", config.token.get_secret_value())
        self.retrier = Retrier(config.retry.policy(), sleeper=self.sleeper, clock=clock)

    def secret_values(self) -> list[str]:
        """The token, and the ``email/token:TOKEN`` pair basic auth sends (base64)."""
        token = self.config.token.get_secret_value()
        return [*super().secret_values(), f"{self.config.email}/token:{token}"]

    def close(self) -> None:
        """Close the HTTP client if this connector created it."""
        if self._owns_client and self._client is not None:
            self._client.close()
            self._client = None

    @property
    def client(self) -> httpx.Client:
        # Created on first use: mapping records to episodes (the conformance kit, a
        # dry run) never needs a connection pool or a TLS context.
        if self._client is None:
            import httpx

            self._client = httpx.Client(
                transport=self._transport,
                timeout=self.config.timeout.total_seconds(),
                headers={"Accept": "application/json", "User-Agent": "memsync-connector"},
            )
        return self._client

    # --- reading --------------------------------------------------------------------------

    def streams(self) -> tuple[Stream, ...]:
        """One ordered stream, ``tickets`` (see the module docstring for why ordered)."""
        return (Stream("tickets", ordered=True),)

    def fetch(self, window: Window, cursor: Cursor | None) -> Iterator[ZendeskRecord | Deletion]:
        """Yield each ticket updated in the window, followed by its comments and status
        changes, or a tombstone for a deleted one. Tickets updated after ``window.end``
        are left for the next run."""
        start = window.start or self.config.start or datetime(1970, 1, 1, tzinfo=UTC)
        start = min(start, window.end - _EXPORT_MIN_AGE)
        params: dict[str, str | int] = {"start_time": max(int(start.timestamp()), 0)}
        while True:
            page = self._get(_INCREMENTAL_PATH, params)
            tickets = page.get("tickets")
            if not isinstance(tickets, list):
                raise StopRun(self._malformed(_INCREMENTAL_PATH, "no 'tickets' list"))
            for raw in tickets:
                ticket = self._ticket(raw)
                if ticket.ticket.updated_at > window.end:
                    continue
                if ticket.data.get("status") == "deleted":
                    yield Tombstone(ticket.key(), with_children=True)
                    continue
                yield ticket
                if self.config.include_comments:
                    yield from self._comments(ticket.ticket)
                if self.config.include_status_changes:
                    yield from self._status_changes(ticket.ticket)
            if page.get("end_of_stream") is True:
                return
            after = page.get("after_cursor")
            if not isinstance(after, str) or not after or params.get("cursor") == after:
                raise StopRun(
                    self._malformed(_INCREMENTAL_PATH, "not end_of_stream but no new after_cursor")
                )
            params = {"cursor": after}

    def _ticket(self, raw: object) -> ZendeskTicket:
        if not isinstance(raw, dict):
            raise StopRun(self._malformed(_INCREMENTAL_PATH, f"ticket is {raw!r}"))
        ref = TicketRef(
            subdomain=self.config.subdomain,
            id=_required_int(raw, "id", "ticket"),
            updated_at=_parse_time(raw.get("updated_at"), "ticket updated_at"),
            organization_id=optional_int(raw.get("organization_id")),
            requester_id=optional_int(raw.get("requester_id")),
            assignee_id=optional_int(raw.get("assignee_id")),
            group_id=optional_int(raw.get("group_id")),
            brand_id=optional_int(raw.get("brand_id")),
        )
        data = {k: v for k, v in raw.items() if k not in _VOLATILE_TICKET_FIELDS}
        return ZendeskTicket(ticket=ref, data=data)

    def _comments(self, ticket: TicketRef) -> Iterator[ZendeskComment]:
        path = f"/api/v2/tickets/{ticket.id}/comments.json"
        for raw in self._paginate(path, "comments"):
            yield ZendeskComment(
                ticket=ticket,
                comment_id=_required_int(raw, "id", f"comment of ticket {ticket.id}"),
                created_at=_parse_time(raw.get("created_at"), "comment created_at"),
                data=raw,
            )

    def _status_changes(self, ticket: TicketRef) -> Iterator[ZendeskStatusChange]:
        path = f"/api/v2/tickets/{ticket.id}/audits.json"
        for audit in self._paginate(path, "audits"):
            events = audit.get("events")
            for event in events if isinstance(events, list) else []:
                if not (
                    isinstance(event, dict)
                    and event.get("type") == "Change"
                    and event.get("field_name") == "status"
                ):
                    continue
                via = audit.get("via")
                channel = via.get("channel") if isinstance(via, dict) else None
                yield ZendeskStatusChange(
                    # Keyed under the ticket we asked for: the audit list belongs to it.
                    ticket=ticket,
                    audit_id=_required_int(audit, "id", f"audit of ticket {ticket.id}"),
                    created_at=_parse_time(audit.get("created_at"), "audit created_at"),
                    previous=_as_text(event.get("previous_value")),
                    value=_as_text(event.get("value")),
                    author_id=optional_int(audit.get("author_id")),
                    channel=channel if isinstance(channel, str) else None,
                )

    def _paginate(self, path: str, items_key: str) -> Iterator[dict[str, Any]]:
        """Items of every page of a per-ticket list; a 404 (ticket gone) yields nothing."""
        target: tuple[str, Mapping[str, str | int] | None] = (
            path,
            {"page[size]": self.config.page_size},
        )
        seen: set[str] = set()
        while True:
            try:
                page = self._get(*target)
            except _NotFound:
                return
            items = page.get(items_key)
            if not isinstance(items, list):
                raise StopRun(self._malformed(path, f"no '{items_key}' list"))
            yield from (item for item in items if isinstance(item, dict))
            next_url = _next_page(page)
            if next_url is None:
                return
            if next_url in seen:
                raise StopRun(self._malformed(path, f"pagination repeats {next_url}"))
            seen.add(next_url)
            target = (_path_and_query(next_url), None)

    # --- HTTP -----------------------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, str | int] | None) -> dict[str, Any]:
        return self.retrier.call(
            lambda: self._get_once(path, params), what=f"zendesk '{self.name}'"
        )

    def _get_once(self, path: str, params: Mapping[str, str | int] | None) -> dict[str, Any]:
        import httpx

        url = f"{self.config.api_base}{path}"
        what = f"zendesk '{self.name}': GET {path}"
        try:
            response = self.client.get(url, params=params, auth=self._auth)
        except httpx.TimeoutException as error:
            raise RetryableError(f"{what} timed out ({type(error).__name__})") from error
        except httpx.TransportError as error:
            raise RetryableError(f"{what} failed: {type(error).__name__}: {error}") from error
        status = response.status_code
        wait = retry_after_from_headers(response.headers, self._clock.now())
        if status == 429:
            raise RateLimited(f"{what}: HTTP 429 {_snippet(response)}", retry_after=wait)
        if status >= 500:
            raise RetryableError(f"{what}: HTTP {status} {_snippet(response)}", retry_after=wait)
        if status in (401, 403):
            raise StopRun(
                f"{what}: HTTP {status}: Zendesk refused the credentials of "
                f"{self.config.email} (API token auth). Check email and token, and that "
                "token access is enabled in Admin Center > Apps and integrations > APIs."
            )
        if status == 404:
            raise _NotFound(
                f"{what}: HTTP 404: not found. Check subdomain '{self.config.subdomain}' "
                f"and base_url {self.config.api_base}"
            )
        if status >= 400:
            raise StopRun(f"{what}: HTTP {status} {_snippet(response)}")
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise StopRun(
                f"{what}: HTTP {status} with a body that is not a JSON object "
                f"(content-type {response.headers.get('content-type', 'none')!r}): "
                f"{_snippet(response)}. Is base_url pointing at a Zendesk API?"
            )
        return body

    def _malformed(self, path: str, problem: str) -> str:
        return f"zendesk '{self.name}': GET {path}: unexpected response shape: {problem}"


def _as_text(value: object) -> str | None:
    return None if value is None else str(value)


def _snippet(response: httpx.Response) -> str:
    text = response.text.strip().replace("\n", " ")
    if len(text) > _BODY_SNIPPET_CHARS:
        text = text[:_BODY_SNIPPET_CHARS] + "…"
    return repr(text)


def _next_page(page: Mapping[str, Any]) -> str | None:
    meta = page.get("meta")
    links = page.get("links")
    if isinstance(meta, dict) and meta.get("has_more") is True and isinstance(links, dict):
        next_link = links.get("next")
        return next_link if isinstance(next_link, str) and next_link else None
    next_page = page.get("next_page")
    return next_page if isinstance(next_page, str) and next_page else None


def _path_and_query(url: str) -> str:
    # Only the path and query of a next link are used: the host stays the configured
    # one, so credentials never travel to a host named by a response.
    import httpx

    return httpx.URL(url).raw_path.decode("ascii")
