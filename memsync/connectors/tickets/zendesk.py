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

A ticket's payload is :func:`ticket_payload`: the fields the REST ticket and the
``detail`` of a webhook's ticket event (:mod:`~memsync.connectors.tickets.zendesk_webhook`)
both carry, under the REST names and normalised alike, so a pushed ticket and its
re-read store one episode.

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

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from memsync.connectors._parsing import optional_int, optional_str, parse_iso_time, required_int
from memsync.connectors.config import SubjectTemplateField
from memsync.connectors.errors import StopRun
from memsync.connectors.http import (
    BasicAuth,
    BodyCursor,
    DeletedWhen,
    FirstOf,
    HttpConnector,
    HttpSource,
    HttpStream,
    Incremental,
    Item,
    NextUrl,
    NotFound,
    RecordBuilder,
)
from memsync.connectors.sessions import SessionResolution, TicketStatus
from memsync.connectors.tickets.declaration import ZENDESK, ZendeskConfig
from memsync.connectors.webhooks import WebhookReceiver
from memsync.episode import JSONObject

_INCREMENTAL_PATH = "/api/v2/incremental/tickets/cursor.json"
# Zendesk refuses an incremental export that starts less than a minute ago.
_EXPORT_MIN_AGE = timedelta(minutes=1)
_SOURCE = "zendesk"
# A ticket's payload holds only what the REST ticket and a webhook's ``detail`` both
# carry (https://developer.zendesk.com/api-reference/ticketing/tickets/tickets/#json-format,
# https://developer.zendesk.com/api-reference/webhooks/event-types/ticket-events/), so
# the two paths agree; volatile fields (``generated_timestamp``, ``url``) are not among
# them, so they never produce a revision. The detail names two of them otherwise.
_DETAIL_NAMES = {"form_id": "ticket_form_id", "custom_status": "custom_status_id"}
# The detail writes ids as strings; the REST ticket as numbers.
_TICKET_ID_FIELDS = (
    "id",
    "requester_id",
    "submitter_id",
    "assignee_id",
    "organization_id",
    "group_id",
    "brand_id",
    "ticket_form_id",
    "custom_status_id",
)
# The detail writes these upper-case (``OPEN``); the REST ticket lower-case.
_TICKET_ENUM_FIELDS = ("status", "priority", "type")
_TICKET_TEXT_FIELDS = ("subject", "description", "external_id")
# An id written as a string: ASCII digits, no more than an int64 holds.
_DECIMAL_ID = re.compile(r"[0-9]{1,18}")
# Zendesk's statuses: new, open, pending, hold, solved, closed (and deleted, a
# tombstone). A solved ticket can still be reopened, which makes it open again.
# https://developer.zendesk.com/api-reference/ticketing/tickets/tickets/#json-format
_STATUS = TicketStatus("status", resolved=frozenset({"solved", "closed"}), title="subject")


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
        return ticket_key_prefix(self.subdomain, self.id)

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

    @property
    def session_id(self) -> str:
        # A ticket is a support session: the ticket's key names it, on all its records.
        return self.ticket.key_prefix

    @property
    def resolution(self) -> SessionResolution | None:
        # Only the ticket says how it stands; its comments and audits belong to it.
        return None


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

    @property
    def resolution(self) -> SessionResolution | None:
        return _STATUS.resolution(self.data, self.ticket.updated_at)


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


def _parse_time(value: object, what: str) -> datetime:
    return parse_iso_time(value, what, source=_SOURCE)


def _required_int(data: Mapping[str, Any], field: str, what: str) -> int:
    return required_int(data, field, what, source=_SOURCE)


def ticket_key_prefix(subdomain: str, ticket_id: int) -> str:
    """The key of ticket ``ticket_id`` of account ``subdomain`` (see
    :attr:`TicketRef.key_prefix`), for a deletion that names only the id."""
    return f"{_SOURCE}:{subdomain}:ticket:{ticket_id}"


def ticket_payload(raw: Mapping[str, Any]) -> JSONObject:
    """The payload of a ticket read as the REST API returns it or pushed as a webhook's
    ``detail``: the fields both carry, under the REST names, normalised alike (ids as
    numbers, an id of 0 as none, ``status``/``priority``/``type`` and ``via.channel``
    lower-case, tags sorted, times as UTC ISO 8601 with ``Z``). The same ticket in the
    same state gives the same payload whichever way it came."""
    fields = {_DETAIL_NAMES.get(name, name): value for name, value in raw.items()}
    payload: JSONObject = {name: _ticket_id(fields.get(name)) for name in _TICKET_ID_FIELDS}
    payload.update({name: _lower(fields.get(name)) for name in _TICKET_ENUM_FIELDS})
    payload.update({name: optional_str(fields.get(name)) for name in _TICKET_TEXT_FIELDS})
    public = fields.get("is_public")
    payload["is_public"] = public if isinstance(public, bool) else None
    tags = fields.get("tags")
    # A set to Zendesk: the two paths need not list it in one order.
    payload["tags"] = (
        sorted(t for t in tags if isinstance(t, str)) if isinstance(tags, list) else []
    )
    via = fields.get("via")
    payload["via"] = {"channel": _lower(via.get("channel") if isinstance(via, dict) else None)}
    for name in ("created_at", "updated_at"):
        payload[name] = _utc_text(fields.get(name))
    return payload


def zendesk_ticket(subdomain: str, raw: Mapping[str, Any]) -> ZendeskTicket:
    """The ticket record of ``raw`` (a REST ticket or a webhook's ``detail``) in account
    ``subdomain``; :class:`StopRun` if it has no id or ``updated_at``."""
    data = ticket_payload(raw)
    ticket_id = optional_int(data["id"])
    if ticket_id is None:
        raise StopRun(f"{_SOURCE}: ticket has no integer 'id': {raw.get('id')!r}")
    ref = TicketRef(
        subdomain=subdomain,
        id=ticket_id,
        updated_at=_utc(raw.get("updated_at"), "ticket updated_at"),
        organization_id=optional_int(data["organization_id"]),
        requester_id=optional_int(data["requester_id"]),
        assignee_id=optional_int(data["assignee_id"]),
        group_id=optional_int(data["group_id"]),
        brand_id=optional_int(data["brand_id"]),
    )
    return ZendeskTicket(ticket=ref, data=data)


def _ticket_id(value: object) -> int | None:
    # Zendesk ids are positive; a detail writes "0" for none (the example of
    # https://developer.zendesk.com/api-reference/webhooks/event-types/webhook-event-types/).
    if isinstance(value, str):
        number = int(value) if _DECIMAL_ID.fullmatch(value) else None
    else:
        number = optional_int(value)
    return number if number else None


def _lower(value: object) -> str | None:
    return value.lower() if isinstance(value, str) and value else None


def _utc(value: object, what: str) -> datetime:
    """An ISO 8601 time in UTC; :class:`StopRun` if it is not one, or has none (a time
    at the edge of the calendar whose offset takes it out of range)."""
    moment = _parse_time(value, what)
    try:
        return moment.astimezone(UTC)
    except OverflowError:
        raise StopRun(f"{_SOURCE}: {what} {value!r} is out of range") from None


def _utc_text(value: object) -> str | None:
    try:
        return _utc(value, "ticket time").isoformat().replace("+00:00", "Z")
    except StopRun:
        return None


def _ticket(item: Item) -> Iterator[ZendeskTicket]:
    yield zendesk_ticket(item.config.subdomain, item.data)


def _parent_ticket(item: Item) -> TicketRef:
    # Comments and audits are read for a ticket (the stream's parent) and keyed under
    # it: the list belongs to the ticket we asked for.
    assert isinstance(item.parent, ZendeskTicket), item.parent
    return item.parent.ticket


def _comment(item: Item) -> Iterator[ZendeskComment]:
    ticket = _parent_ticket(item)
    yield ZendeskComment(
        ticket=ticket,
        comment_id=_required_int(item.data, "id", f"comment of ticket {ticket.id}"),
        created_at=_parse_time(item.data.get("created_at"), "comment created_at"),
        data=dict(item.data),
    )


def _status_changes(item: Item) -> Iterator[ZendeskStatusChange]:
    ticket, audit = _parent_ticket(item), item.data
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
            ticket=ticket,
            audit_id=_required_int(audit, "id", f"audit of ticket {ticket.id}"),
            created_at=_parse_time(audit.get("created_at"), "audit created_at"),
            previous=_as_text(event.get("previous_value")),
            value=_as_text(event.get("value")),
            author_id=optional_int(audit.get("author_id")),
            channel=channel if isinstance(channel, str) else None,
        )


def _as_text(value: object) -> str | None:
    return None if value is None else str(value)


def _per_ticket(name: str, build: RecordBuilder, enabled_by: str) -> HttpStream:
    """A list below one ticket: cursor pagination (``meta.has_more`` / ``links.next``) or
    offset pagination (``next_page``); a 404 means the ticket was deleted while we read."""
    return HttpStream(
        name=name,
        path=f"/api/v2/tickets/{{parent[id]}}/{name}.json",
        params={"page[size]": "{config.page_size}"},
        pagination=FirstOf((NextUrl("links.next", only_if="meta.has_more"), NextUrl("next_page"))),
        on_not_found=NotFound.EMPTY,
        enabled_by=enabled_by,
        build=build,
    )


TICKETS = HttpStream(
    name="tickets",
    path=_INCREMENTAL_PATH,
    incremental=Incremental(
        field="updated_at", param="start_time", value="{since_epoch}", min_age=_EXPORT_MIN_AGE
    ),
    pagination=BodyCursor("after_cursor", "cursor", done="end_of_stream", keep_params=False),
    deleted_when=DeletedWhen("status", ("deleted",)),
    children=(
        _per_ticket("comments", _comment, "include_comments"),
        _per_ticket("audits", _status_changes, "include_status_changes"),
    ),
    ordered=True,
    build=_ticket,
)

ZENDESK_API = HttpSource(
    base_url="https://{config.subdomain}.zendesk.com",
    streams=(TICKETS,),
    auth=BasicAuth(username="{config.email}/token"),
    vendor="Zendesk",
    auth_hint=(
        "Zendesk refused the credentials of {config.email} (API token auth). Check email and "
        "token, and that token access is enabled in Admin Center > Apps and integrations > APIs."
    ),
    not_found_hint="Check subdomain '{config.subdomain}' and base_url {base_url}",
)


class ZendeskConnector(HttpConnector[ZendeskConfig, ZendeskRecord], declaration=ZENDESK):
    """Tickets, comments and status changes of one Zendesk Support account, as
    :data:`ZENDESK_API` declares them.

    Repeats: every ticket updated in the window is re-read with all its comments and
    audits, so overlapping windows and backfills repeat records; keys make that free.
    Rate limits: 429 is waited out per ``Retry-After`` within ``retry`` caps, then
    :class:`RateLimitExhausted`; 5xx and timeouts the same, then :class:`RetryableError`;
    401/403 and malformed bodies raise :class:`StopRun`.
    """

    source = ZENDESK_API

    def source_updated_at(self, record: ZendeskRecord) -> datetime | None:
        """A ticket's ``updated_at``: Zendesk moves it with every change of the ticket.
        Comments and status changes carry no update time of their own."""
        return record.ticket.updated_at if isinstance(record, ZendeskTicket) else None

    def webhook_receiver(self) -> WebhookReceiver[ZendeskRecord] | None:
        """Ticket-event deliveries, when ``webhook:`` is configured."""
        if self.config.webhook is None:
            return None
        # Imported here: the receiver module builds on this one's ticket parser.
        from memsync.connectors.tickets.zendesk_webhook import ZendeskWebhookReceiver

        return ZendeskWebhookReceiver(
            self.config.subdomain, self.config.webhook.secret.get_secret_value()
        )
