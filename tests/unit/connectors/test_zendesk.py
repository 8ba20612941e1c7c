from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
import respx
from hypothesis import given
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.compile.support import ResolutionStatus
from memsync.connectors import (
    Deletion,
    RateLimitExhausted,
    RetryableError,
    StopRun,
    Tombstone,
    Window,
)
from memsync.connectors.testing import ConnectorConformanceSuite, DeletionScenario
from memsync.connectors.tickets import (
    TicketRef,
    ZendeskComment,
    ZendeskConfig,
    ZendeskConnector,
    ZendeskRecord,
    ZendeskStatusChange,
    ZendeskTicket,
)
from memsync.stopping import FakeSleeper
from tests.unit.connectors.fixtures import (
    LOCAL_FIXTURES,
    SHARED_FIXTURES,
    fixture_response,
    load_fixture,
)

BASE = "https://acme.zendesk.com"
EXPORT = "/api/v2/incremental/tickets/cursor.json"
NOW = datetime(2024, 6, 1, tzinfo=UTC)
WINDOW = Window(start=datetime(2011, 1, 1, tzinfo=UTC), end=NOW)


def _config(**fields: object) -> ZendeskConfig:
    return ZendeskConfig.model_validate(
        {
            "name": "support",
            "subject": "org:{organization_id}",
            "subdomain": "acme",
            "email": "agent@acme.test",
            "token": "s3cret-token",
            "retry": {"max_attempts": 4, "max_wait": "5m"},
            **fields,
        }
    )


class Harness:
    """A connector whose waits are recorded (and advance a fake clock), never waited."""

    def __init__(self, **fields: object) -> None:
        self.sleeper = FakeSleeper(FakeClock(NOW))
        self.clock = self.sleeper.clock
        self.connector = ZendeskConnector(_config(**fields), sleeper=self.sleeper, clock=self.clock)

    def fetch(self, window: Window = WINDOW) -> list[ZendeskRecord | Deletion]:
        return list(self.connector.fetch(window, None))


def _ticket_page(ticket_id: int, *, end: bool, after: str = "CURSOR1") -> dict[str, Any]:
    page: dict[str, Any] = load_fixture("zendesk", "incremental_tickets_cursor.json")
    page["end_of_stream"] = end
    page["after_cursor"] = after
    page["tickets"][0]["id"] = ticket_id
    return page


def _mock_ticket_children(mock: respx.MockRouter, ticket_id: int) -> None:
    mock.get(f"/api/v2/tickets/{ticket_id}/comments.json").respond(
        json=load_fixture("zendesk", "ticket_comments.json")
    )
    mock.get(f"/api/v2/tickets/{ticket_id}/audits.json").respond(
        json=load_fixture("zendesk", "ticket_audits.json")
    )


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE, assert_all_called=False) as mock:
        yield mock


def _recorded(status: str = "open") -> list[ZendeskRecord]:
    """Records parsed from the recorded fixtures, through the real fetch path."""
    with respx.mock(base_url=BASE, assert_all_called=False) as mock:
        page = load_fixture("zendesk", "incremental_tickets_cursor.json")
        page["tickets"][0]["status"] = status
        mock.get(EXPORT).respond(json=page)
        _mock_ticket_children(mock, 35436)
        return Harness().fetch()


class TestZendeskConformance(ConnectorConformanceSuite[ZendeskRecord]):
    status = "open"

    def test_deletions_are_reported_and_nothing_else(self, api: respx.MockRouter) -> None:
        def export(request: httpx.Request) -> httpx.Response:
            page = load_fixture("zendesk", "incremental_tickets_cursor.json")
            page["tickets"][0]["status"] = self.status
            return httpx.Response(200, json=page)

        api.get(EXPORT).mock(side_effect=export)
        _mock_ticket_children(api, 35436)
        super().test_deletions_are_reported_and_nothing_else()

    def make_connector(self) -> ZendeskConnector:
        return ZendeskConnector(_config())

    def recorded_records(self) -> Sequence[ZendeskRecord]:
        return _recorded()

    def edited_records(self) -> Sequence[ZendeskRecord]:
        return [r for r in _recorded(status="solved") if isinstance(r, ZendeskTicket)]

    def deletion_scenario(self) -> DeletionScenario:
        def remove() -> str:
            self.status = "deleted"
            return "zendesk:acme:ticket:35436"

        return DeletionScenario(read=self.make_connector, remove=remove, window=WINDOW)


def test_a_deleted_ticket_is_a_tombstone_for_it_and_all_below_it(api: respx.MockRouter) -> None:
    page = load_fixture("zendesk", "incremental_tickets_cursor.json")
    page["tickets"][0]["status"] = "deleted"
    api.get(EXPORT).respond(json=page)
    comments = api.get("/api/v2/tickets/35436/comments.json")

    assert Harness().fetch() == [Tombstone("zendesk:acme:ticket:35436", with_children=True)]
    assert not comments.called


def test_fixture_copies_match_the_shared_set() -> None:
    if not SHARED_FIXTURES.is_dir():
        pytest.skip("the shared fixture set is not beside the repository")
    for copy in sorted((LOCAL_FIXTURES / "zendesk").glob("*.json")):
        shared = SHARED_FIXTURES / "zendesk" / copy.name
        assert copy.read_bytes() == shared.read_bytes(), copy.name


def test_fixtures_map_to_ticket_comment_and_status_change(api: respx.MockRouter) -> None:
    api.get(EXPORT).respond(json=load_fixture("zendesk", "incremental_tickets_cursor.json"))
    _mock_ticket_children(api, 35436)
    harness = Harness()
    records = harness.fetch()
    connector = harness.connector
    assert [connector.idempotency_key(r) for r in records] == [
        "zendesk:acme:ticket:35436",
        "zendesk:acme:ticket:35436:comment:1274",
        "zendesk:acme:ticket:35436:audit:2127301143:status",
    ]
    ticket, comment, change = (connector.to_episode(r) for r in records)
    assert {ticket.subject_id, comment.subject_id, change.subject_id} == {"org:509974"}
    assert ticket.payload["subject"] == "Help, my printer is on fire!"
    assert "generated_timestamp" not in ticket.payload
    assert comment.payload["body"] == "Thanks for your help!"
    assert "metadata" not in comment.payload
    assert (change.payload["from"], change.payload["to"]) == ("new", "open")
    assert change.occurred_at == datetime(2011, 9, 25, 22, 35, 44, tzinfo=UTC)
    request = api.calls[0].request
    assert request.url.params["start_time"] == str(int(WINDOW.start.timestamp()))  # type: ignore[union-attr]
    assert request.headers["authorization"].startswith("Basic ")


def test_export_and_comments_are_paginated_to_the_end(api: respx.MockRouter) -> None:
    export = api.get(EXPORT)
    export.side_effect = [
        httpx.Response(200, json=_ticket_page(35436, end=False, after="CURSOR1")),
        httpx.Response(200, json=_ticket_page(35437, end=True, after="CURSOR2")),
    ]
    comments = api.get("/api/v2/tickets/35436/comments.json")
    second_comment_page = load_fixture("zendesk", "ticket_comments.json")
    second_comment_page["comments"][0]["id"] = 1275
    comments.side_effect = [
        httpx.Response(
            200, json=load_fixture("zendesk", "ticket_comments_cursor_page.variant.json")
        ),
        httpx.Response(200, json=second_comment_page),
    ]
    api.get("/api/v2/tickets/35437/comments.json").respond(json={"comments": []})
    for ticket_id in (35436, 35437):
        api.get(f"/api/v2/tickets/{ticket_id}/audits.json").respond(json={"audits": []})

    records = Harness().fetch()

    assert [type(r).__name__ for r in records] == [
        "ZendeskTicket",
        "ZendeskComment",
        "ZendeskComment",
        "ZendeskTicket",
    ]
    assert [r.comment_id for r in records if isinstance(r, ZendeskComment)] == [1274, 1275]
    assert export.calls[1].request.url.params["cursor"] == "CURSOR1"
    assert comments.calls[1].request.url.params["page[after]"] == "xxx"
    assert comments.calls[1].request.url.host == "acme.zendesk.com"


def test_tickets_updated_after_the_window_are_left_for_the_next_run(
    api: respx.MockRouter,
) -> None:
    api.get(EXPORT).respond(json=load_fixture("zendesk", "incremental_tickets_cursor.json"))
    window = Window(start=None, end=datetime(2011, 1, 1, tzinfo=UTC))
    assert Harness().fetch(window) == []


def test_429_with_retry_after_is_waited_out_then_succeeds(api: respx.MockRouter) -> None:
    api.get(EXPORT).side_effect = [
        fixture_response("zendesk", "error_rate_limited.response.json"),
        httpx.Response(200, json=load_fixture("zendesk", "incremental_tickets_cursor.json")),
    ]
    _mock_ticket_children(api, 35436)
    harness = Harness()
    assert len(harness.fetch()) == 3
    assert harness.sleeper.waits == [93]


def test_rate_limit_beyond_the_cap_is_exhausted(api: respx.MockRouter) -> None:
    api.get(EXPORT).mock(
        side_effect=lambda request: fixture_response(
            "zendesk", "error_rate_limited_account.response.json"
        )
    )
    harness = Harness()
    with pytest.raises(RateLimitExhausted) as caught:
        harness.fetch()
    assert harness.sleeper.waits == [1, 1, 1]
    assert caught.value.attempts == 4
    assert "Number of allowed API requests per minute exceeded" in str(caught.value)


def test_total_wait_cap_ends_retrying_before_a_long_wait(api: respx.MockRouter) -> None:
    api.get(EXPORT).mock(
        side_effect=lambda request: fixture_response("zendesk", "error_rate_limited.response.json")
    )
    harness = Harness(retry={"max_attempts": 10, "max_wait": "1m"})
    with pytest.raises(RateLimitExhausted, match="next wait would be 93s"):
        harness.fetch()
    assert harness.sleeper.waits == []


def test_server_errors_and_timeouts_are_retried_with_backoff(api: respx.MockRouter) -> None:
    api.get(EXPORT).side_effect = [
        httpx.Response(503, text="upstream unavailable"),
        httpx.ReadTimeout("slow"),
        httpx.Response(200, json={"tickets": [], "end_of_stream": True}),
    ]
    harness = Harness()
    assert harness.fetch() == []
    assert harness.sleeper.waits == [1, 2]


def test_server_errors_beyond_the_cap_stay_retryable(api: respx.MockRouter) -> None:
    api.get(EXPORT).respond(502, text="bad gateway")
    with pytest.raises(RetryableError, match="gave up after 4 attempt"):
        Harness().fetch()


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_stop_the_run_without_leaking_the_token(
    api: respx.MockRouter, status: int
) -> None:
    api.get(EXPORT).respond(status, json={"error": "Couldn't authenticate you"})
    harness = Harness()
    with pytest.raises(StopRun) as caught:
        harness.fetch()
    message = str(caught.value)
    assert f"HTTP {status}: Zendesk refused the credentials of agent@acme.test" in message
    assert "s3cret-token" not in message
    assert "s3cret-token" not in repr(harness.connector.config)
    assert harness.sleeper.waits == []


def test_malformed_json_body_is_a_clear_error(api: respx.MockRouter) -> None:
    api.get(EXPORT).respond(200, text="<html>Maintenance</html>", content_type="text/html")
    with pytest.raises(StopRun) as caught:
        Harness().fetch()
    assert str(caught.value) == (
        f"zendesk 'support': GET {EXPORT}: HTTP 200 with a body that is not a JSON object "
        "(content-type 'text/html'): '<html>Maintenance</html>'. Is base_url pointing at a "
        "Zendesk API?"
    )


def test_export_page_without_tickets_is_a_clear_error(api: respx.MockRouter) -> None:
    api.get(EXPORT).respond(json={"end_of_stream": True})
    with pytest.raises(StopRun, match="unexpected response shape: no 'tickets' list"):
        Harness().fetch()


def test_a_ticket_deleted_while_reading_has_no_comments(api: respx.MockRouter) -> None:
    api.get(EXPORT).respond(json=load_fixture("zendesk", "incremental_tickets_cursor.json"))
    api.get("/api/v2/tickets/35436/comments.json").respond(404, json={"error": "RecordNotFound"})
    api.get("/api/v2/tickets/35436/audits.json").respond(404, json={"error": "RecordNotFound"})
    assert [type(r) for r in Harness().fetch()] == [ZendeskTicket]


def test_unknown_account_stops_the_run(api: respx.MockRouter) -> None:
    api.get(EXPORT).respond(404, json={"error": "InvalidEndpoint"})
    with pytest.raises(StopRun, match=r"not found\. Check subdomain 'acme'"):
        Harness().fetch()


def test_base_url_override_is_used_for_every_request() -> None:
    with respx.mock(base_url="http://127.0.0.1:8080", assert_all_called=True) as mock:
        mock.get(EXPORT).respond(json={"tickets": [], "end_of_stream": True})
        assert Harness(base_url="http://127.0.0.1:8080/").fetch() == []


ids = st.integers(min_value=1, max_value=2**53)
REF = TicketRef(subdomain="acme", id=1, updated_at=NOW)


@given(ids, ids, ids)
def test_keys_are_built_from_ids_only_and_never_collide(
    ticket: int, child: int, other: int
) -> None:
    connector = ZendeskConnector(_config())
    ref = TicketRef(subdomain="acme", id=ticket, updated_at=NOW)
    comment = ZendeskComment(ticket=ref, comment_id=child, created_at=NOW, data={"body": "a"})
    edited = ZendeskComment(ticket=ref, comment_id=child, created_at=NOW, data={"body": "b"})
    change = ZendeskStatusChange(
        ticket=ref,
        audit_id=child,
        created_at=NOW,
        previous=None,
        value="open",
        author_id=None,
        channel=None,
    )
    keys = {
        connector.idempotency_key(ZendeskTicket(ticket=ref, data={})),
        connector.idempotency_key(comment),
        connector.idempotency_key(change),
    }
    assert len(keys) == 3
    assert connector.idempotency_key(edited) == connector.idempotency_key(comment)
    if other != child:
        moved = ZendeskComment(ticket=ref, comment_id=other, created_at=NOW, data={})
        assert connector.idempotency_key(moved) != connector.idempotency_key(comment)


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("new", ResolutionStatus.OPEN),
        ("open", ResolutionStatus.OPEN),
        ("pending", ResolutionStatus.OPEN),
        ("hold", ResolutionStatus.OPEN),
        ("solved", ResolutionStatus.RESOLVED),
        ("closed", ResolutionStatus.RESOLVED),
    ],
)
def test_every_record_of_a_ticket_is_in_its_session_and_the_ticket_says_how_it_stands(
    status: str, expected: ResolutionStatus
) -> None:
    connector = Harness().connector
    ticket, comment, change = _recorded(status)
    sessions = {connector.to_episode(record).session_id for record in (ticket, comment, change)}
    assert sessions == {"zendesk:acme:ticket:35436"}
    resolution = connector.resolution_of(ticket)
    assert resolution is not None
    assert (resolution.status, resolution.source_status) == (expected, status)
    assert resolution.summary == f"Help, my printer is on fire! ({status})"
    assert resolution.as_of == connector.record_cursor(ticket)
    # Comments and status changes belong to the session; only the ticket says how it stands.
    assert connector.resolution_of(comment) is None
    assert connector.resolution_of(change) is None
