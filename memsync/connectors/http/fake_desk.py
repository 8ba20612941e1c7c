"""A fake "Desk" API on 127.0.0.1 for :mod:`memsync.connectors.http.example`.

Desk is a made-up helpdesk, so there is no vendor page to copy payloads from; the fake
follows the conventions the example declares, each as documented where it comes from:

- ``GET /v1/tickets?sort=updated_at&updated_since=…`` pages through tickets in
  ascending ``updated_at`` order, ``per_page`` at a time, with the next page in a
  ``Link: <…>; rel="next"`` header as GitHub's REST API sends it
  (https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api,
  RFC 8288); the link carries a keyset cursor (``after=<updated_at>|<id>`` of the last
  ticket handed out) rather than a page number, so a ticket updated during a read moves
  nothing across a page boundary;
- ``GET /v1/tickets/{id}/notes`` answers ``{"notes": […], "next": url-or-null}``; a
  deleted ticket answers 404 (``{"error": "not_found"}``) there;
- every request needs ``Authorization: Bearer {token}`` (RFC 6750), else 401;
- past ``budget`` requests it answers 429 with ``Retry-After: 3600`` (RFC 9110
  §10.2.3) until :meth:`FakeDesk.refill`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlencode

from memsync.connectors.fake_http import (
    FakeHTTPServer,
    FakeResponse,
    RecordedRequest,
    compact_json,
    json_headers,
)

__all__ = ["FakeDesk"]


@dataclass
class _Ticket:
    id: int
    subject: str
    updated_at: datetime
    notes: list[dict[str, object]] = field(default_factory=list)

    def render(self) -> dict[str, object]:
        return {
            "id": self.id,
            "subject": self.subject,
            "updated_at": self.updated_at.isoformat().replace("+00:00", "Z"),
        }


class FakeDesk(FakeHTTPServer):
    """Tickets with notes; ``per_page`` tickets and ``notes_per_page`` notes a page."""

    def __init__(
        self,
        *,
        token: str = "desk-token",
        per_page: int = 2,
        notes_per_page: int = 2,
        budget: int | None = None,
    ) -> None:
        super().__init__()
        self.token = token
        self.per_page = per_page
        self.notes_per_page = notes_per_page
        self.budget = budget
        self._left = budget
        self._lock = threading.Lock()
        self._tickets: dict[int, _Ticket] = {}
        self._next_note_id = 1

    # -- scripting -------------------------------------------------------------

    def add_ticket(
        self, ticket_id: int, subject: str, updated_at: datetime, notes: int = 0
    ) -> None:
        """Add (or replace) a ticket with ``notes`` notes created at its update time."""
        with self._lock:
            ticket = _Ticket(ticket_id, subject, updated_at)
            for _ in range(notes):
                ticket.notes.append(
                    {
                        "id": self._next_note_id,
                        "body": f"note {self._next_note_id} on ticket {ticket_id}",
                        "created_at": updated_at.isoformat().replace("+00:00", "Z"),
                    }
                )
                self._next_note_id += 1
            self._tickets[ticket_id] = ticket

    def edit_ticket(self, ticket_id: int, subject: str, updated_at: datetime) -> None:
        """Change a ticket's subject, and its update time."""
        with self._lock:
            ticket = self._tickets[ticket_id]
            ticket.subject, ticket.updated_at = subject, updated_at

    def delete_ticket(self, ticket_id: int) -> None:
        """Delete a ticket: gone from the list, its notes answer 404."""
        with self._lock:
            del self._tickets[ticket_id]

    def refill(self) -> None:
        """Give the request budget back (an hour later, say)."""
        with self._lock:
            self._left = self.budget

    # -- serving ---------------------------------------------------------------

    def handle(self, request: RecordedRequest) -> FakeResponse:
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return _json(401, {"error": "unauthorized"})
        with self._lock:
            if self._left is not None:
                if self._left <= 0:
                    return _json(429, {"error": "rate_limited"}, [("Retry-After", "3600")])
                self._left -= 1
            parts = request.path.strip("/").split("/")
            if parts == ["v1", "tickets"]:
                return self._tickets_page(request)
            if len(parts) == 4 and parts[:2] == ["v1", "tickets"] and parts[3] == "notes":
                return self._notes_page(request, int(parts[2]))
        return _json(404, {"error": "not_found"})

    def _tickets_page(self, request: RecordedRequest) -> FakeResponse:
        since_text = request.param("updated_since")
        since = (
            datetime.fromisoformat(since_text) if since_text else datetime(1970, 1, 1, tzinfo=UTC)
        )
        matching = sorted(
            (t for t in self._tickets.values() if t.updated_at >= since),
            key=lambda t: (t.updated_at, t.id),
        )
        after = request.param("after")
        if after:  # a keyset cursor: the (updated_at, id) of the last ticket handed out
            moment, _, ticket_id = after.partition("|")
            cursor = (datetime.fromisoformat(moment), int(ticket_id))
            matching = [t for t in matching if (t.updated_at, t.id) > cursor]
        chunk = matching[: self.per_page]
        headers: list[tuple[str, str]] = []
        if len(matching) > self.per_page:
            last = chunk[-1]
            query = urlencode(
                {
                    "sort": "updated_at",
                    "updated_since": since.isoformat(),
                    "after": f"{last.updated_at.isoformat()}|{last.id}",
                }
            )
            headers.append(("Link", f'<{self.base_url}/v1/tickets?{query}>; rel="next"'))
        return _json(200, {"tickets": [t.render() for t in chunk]}, headers)

    def _notes_page(self, request: RecordedRequest, ticket_id: int) -> FakeResponse:
        ticket = self._tickets.get(ticket_id)
        if ticket is None:
            return _json(404, {"error": "not_found"})
        offset = int(request.param("offset", "0") or "0")
        end = offset + self.notes_per_page
        following = (
            f"{self.base_url}/v1/tickets/{ticket_id}/notes?offset={end}"
            if end < len(ticket.notes)
            else None
        )
        return _json(200, {"notes": ticket.notes[offset:end], "next": following})


def _json(status: int, body: object, headers: list[tuple[str, str]] | None = None) -> FakeResponse:
    return FakeResponse(status, compact_json(body), json_headers(headers or []))
