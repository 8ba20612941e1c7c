"""Support sessions of ticket sources: which session a record belongs to, and how the
session stands (its resolution), read from the ticket's own status.

A ticket connector declares a :class:`TicketSessions` (on an
:class:`~memsync.connectors.http.HttpStream`, ``sessions=``; a record type that builds
itself asks a :class:`TicketStatus`). Every record of a ticket (the ticket, its comments, its
status changes) then carries the ticket's session id on its episode, and the ticket
record a :class:`SessionResolution`, which the sync runner records through
:class:`~memsync.runtime.support.resolutions.Resolutions` when the ticket's episode is
created or revised (a duplicate records nothing).

A declared stream needs one line (Linear's issues)::

    sessions=TicketSessions(_ISSUE_KEY, TicketStatus("state.type", frozenset({"completed"})))

and a record type that builds itself two properties, ``session_id`` and ``resolution``
(Zendesk's and Jira's records).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memsync.compile.support import ResolutionStatus
from memsync.connectors._parsing import dig

__all__ = ["SessionResolution", "TicketSessions", "TicketStatus"]


@dataclass(frozen=True, slots=True)
class SessionResolution:
    """How a ticket's session stands as the source showed it at ``as_of`` (the ticket's
    update time there): the runner records it unless a newer one is stored (an older
    re-read never overwrites a newer status). ``source_status`` is the source's own
    word (``solved``, ``canceled``), kept in the record's metadata."""

    status: ResolutionStatus
    summary: str
    as_of: datetime
    source_status: str


@dataclass(frozen=True, slots=True)
class TicketStatus:
    """How a ticket's status maps to its session's resolution.

    ``field`` is the dotted path of the status in the ticket; its value in ``resolved``
    → ``resolved``, in ``unresolved`` → ``unresolved``, anything else → ``open`` (so a
    reopened ticket goes back to open). The summary is the ``title`` and the source's
    status: ``"Printer on fire (solved)"``.
    """

    field: str
    resolved: frozenset[str]
    unresolved: frozenset[str] = frozenset()
    title: str = "title"

    def resolution(self, data: Mapping[str, Any], as_of: datetime) -> SessionResolution | None:
        """The session's resolution as ticket ``data`` shows it at ``as_of``; ``None``
        when the ticket lacks a status (nothing is known, so nothing is recorded)."""
        value = dig(data, self.field)
        if not isinstance(value, str) or not value:
            return None
        if value in self.resolved:
            status = ResolutionStatus.RESOLVED
        elif value in self.unresolved:
            status = ResolutionStatus.UNRESOLVED
        else:
            status = ResolutionStatus.OPEN
        title = dig(data, self.title)
        summary = f"{title} ({value})" if isinstance(title, str) and title else value
        return SessionResolution(status, summary, as_of, value)


@dataclass(frozen=True, slots=True)
class TicketSessions:
    """What a declared stream of a ticket source says of its records' session.

    ``session`` is a template over the record (its fields by name, ``parent`` for a
    child's parent), rendered after ``{type}:`` as keys are: the ticket's own key
    template on the ticket stream, and the ticket's key from a comment's fields on a
    comment stream, so that a session id is its ticket's key. ``status`` is given on
    the ticket stream only (the records whose status decides the session's).
    """

    session: str
    status: TicketStatus | None = None

    def resolution(self, data: Mapping[str, Any], as_of: datetime) -> SessionResolution | None:
        """The resolution ``data`` shows, or ``None`` on a stream without a status."""
        return None if self.status is None else self.status.resolution(data, as_of)
