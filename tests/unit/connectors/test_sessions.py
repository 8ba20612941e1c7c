"""How a ticket's status maps to its session's resolution (memsync.connectors.sessions)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from memsync.compile.support import ResolutionStatus
from memsync.connectors.sessions import TicketSessions, TicketStatus

AT = datetime(2026, 3, 1, tzinfo=UTC)
LINEAR_STATE = TicketStatus(
    "state.type", resolved=frozenset({"completed"}), unresolved=frozenset({"canceled"})
)


@given(st.text(min_size=1), st.text())
def test_a_status_is_resolved_unresolved_or_else_open(value: str, title: str) -> None:
    resolution = LINEAR_STATE.resolution({"state": {"type": value}, "title": title}, AT)
    assert resolution is not None
    expected = {
        "completed": ResolutionStatus.RESOLVED,
        "canceled": ResolutionStatus.UNRESOLVED,
    }.get(value, ResolutionStatus.OPEN)
    assert (resolution.status, resolution.source_status, resolution.as_of) == (expected, value, AT)
    assert resolution.summary == (f"{title} ({value})" if title else value)


def test_a_ticket_without_a_status_says_nothing_and_neither_does_a_comment_stream() -> None:
    assert LINEAR_STATE.resolution({"title": "No state selected"}, AT) is None
    assert LINEAR_STATE.resolution({"state": {"type": None}}, AT) is None
    assert TicketSessions("{issue[id]}").resolution({"state": {"type": "completed"}}, AT) is None
