"""Ticket connectors record resolutions (issue #31 part 3): a Zendesk, Linear or Jira sync
stores each ticket's episodes under the ticket's session and records how the session
stands from the ticket's status, visible through GET /v1/resolutions and the handoff;
a reopened ticket is open again, a re-sync changes nothing, and an older read never
overwrites a newer status. On both databases."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import respx
import sqlalchemy as sa
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.compile.support import ResolutionStatus
from memsync.connectors import Connector
from memsync.connectors.jira import JiraConfig, JiraConnector
from memsync.connectors.jira.fake_api import FakeJira
from memsync.connectors.linear import LinearConfig, LinearConnector
from memsync.connectors.linear.fake_api import FakeLinear
from memsync.connectors.sessions import SessionResolution
from memsync.connectors.tickets import ZendeskConfig, ZendeskConnector
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import episodes
from memsync.runtime.support.resolutions import SourceResolution, record_source_resolutions
from memsync.runtime.sync import RunRecord, SyncRepository, SyncRunner
from memsync.stopping import FakeSleeper
from tests.helpers import API_NOW

ZENDESK = "https://acme.zendesk.com"
AnyConnector = Connector[Any, Any]
T0 = API_NOW - timedelta(days=2)


def runner(store: Store, clock: FakeClock) -> SyncRunner:
    return SyncRunner(
        SyncRepository(store), IngestService(store, clock), clock=clock, heartbeat_every=None
    )


def never_waits(clock: FakeClock) -> FakeSleeper:
    return FakeSleeper(clock, max_waits=0)


def sync_once(store: Store, clock: FakeClock, connector: AnyConnector) -> RunRecord:
    """One sync of ``connector``, closed after."""
    try:
        return runner(store, clock).sync(connector)
    finally:
        connector.close()


def resolutions(client: TestClient, subject: str, **params: Any) -> dict[str, dict[str, Any]]:
    """The subject's resolutions by session id."""
    response = client.get("/v1/resolutions", params={"subject_id": subject, **params})
    assert response.status_code == 200, response.text
    return {item["session_id"]: item for item in response.json()}


def sessions_of(store: Store) -> dict[str, str | None]:
    """Every stored episode's session, by key."""
    with store.read() as connection:
        rows = connection.execute(sa.select(episodes.c.idempotency_key, episodes.c.session_id))
        return {key: session for key, session in rows}


# -- Zendesk ----------------------------------------------------------------------------


class ZendeskDesk:
    """Tickets served by Zendesk's cursor-based incremental ticket export, over respx:
    the tickets updated at or after ``start_time``, in one page (``end_of_stream``),
    shaped as Zendesk documents them (``id``, ``subject``, ``status``,
    ``organization_id``, ``updated_at``):
    https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/#incremental-ticket-export-cursor-based
    and https://developer.zendesk.com/api-reference/ticketing/tickets/tickets/#json-format.
    Comments and audits answer empty lists."""

    def __init__(self) -> None:
        self.tickets: dict[int, dict[str, Any]] = {}

    def put(self, ticket_id: int, subject: str, status: str, at: datetime) -> None:
        self.tickets[ticket_id] = {
            "id": ticket_id,
            "subject": subject,
            "status": status,
            "organization_id": 42,
            "updated_at": at.isoformat().replace("+00:00", "Z"),
        }

    def export(self, request: httpx.Request) -> httpx.Response:
        since = datetime.fromtimestamp(int(request.url.params["start_time"]), UTC)
        page = sorted(
            (t for t in self.tickets.values() if _zulu(t["updated_at"]) >= since),
            key=lambda t: (t["updated_at"], t["id"]),
        )
        return httpx.Response(
            200, json={"tickets": page, "end_of_stream": True, "after_cursor": "end"}
        )

    def sync(self, store: Store, clock: FakeClock) -> RunRecord:
        config = ZendeskConfig(
            name="desk",
            subdomain="acme",
            email="agent@acme.test",
            token="t0ken",
            base_url=ZENDESK,
            subject="org:{organization_id}",
            start=T0 - timedelta(days=1),
            overlap="1h",
        )
        connector = ZendeskConnector(config, sleeper=never_waits(clock), clock=clock)
        with respx.mock(base_url=ZENDESK) as mock:
            mock.get("/api/v2/incremental/tickets/cursor.json").mock(side_effect=self.export)
            mock.get(url__regex=r"/comments\.json").respond(json={"comments": []})
            mock.get(url__regex=r"/audits\.json").respond(json={"audits": []})
            return sync_once(store, clock, connector)


def _zulu(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture
def desk() -> ZendeskDesk:
    return ZendeskDesk()


def test_a_solved_zendesk_ticket_is_a_resolved_session_in_the_api_and_the_handoff(
    store: Store, clock: FakeClock, client: TestClient, desk: ZendeskDesk
) -> None:
    desk.put(1, "Printer on fire", "solved", T0)
    desk.put(2, "Invoice total wrong", "pending", T0 + timedelta(hours=1))
    desk.put(3, "Cannot log in", "closed", T0 + timedelta(hours=2))

    run = desk.sync(store, clock)

    assert run.created == 3
    stored = resolutions(client, "org:42")
    assert {session: item["status"] for session, item in stored.items()} == {
        "zendesk:acme:ticket:1": "resolved",
        "zendesk:acme:ticket:2": "open",
        "zendesk:acme:ticket:3": "resolved",
    }
    solved = stored["zendesk:acme:ticket:1"]
    assert solved["resolution_summary"] == "Printer on fire (solved)"
    assert solved["metadata"] == {"source_status": "solved", "connector": "desk"}
    # Resolved when the ticket was, as Zendesk dates it, not when the sync ran.
    assert _zulu(solved["resolved_at"]) == T0
    assert stored["zendesk:acme:ticket:2"]["resolved_at"] is None
    assert sessions_of(store)["zendesk:acme:ticket:2"] == "zendesk:acme:ticket:2"
    only_resolved = resolutions(client, "org:42", status="resolved")
    assert sorted(only_resolved) == ["zendesk:acme:ticket:1", "zendesk:acme:ticket:3"]

    response = client.post(
        "/v1/handoff",
        json={"subject_id": "org:42", "session_id": "zendesk:acme:ticket:2", "reason": "x"},
    )
    assert response.status_code == 200, response.text
    history = response.json()["resolution_history"]
    assert {(item["session_id"], item["status"]) for item in history} >= {
        ("zendesk:acme:ticket:1", "resolved"),
        ("zendesk:acme:ticket:3", "resolved"),
    }


def test_a_reopened_ticket_is_open_again_and_a_re_sync_changes_nothing(
    store: Store, clock: FakeClock, client: TestClient, desk: ZendeskDesk
) -> None:
    desk.put(1, "Printer on fire", "solved", T0)
    desk.sync(store, clock)
    clock.advance(timedelta(hours=1))
    desk.put(1, "Printer on fire", "open", clock.now() - timedelta(minutes=30))

    reopened = desk.sync(store, clock)

    assert reopened.revised == 1
    [record] = resolutions(client, "org:42").values()
    assert (record["status"], record["resolved_at"]) == ("open", None)
    assert record["resolution_summary"] == "Printer on fire (open)"

    clock.advance(timedelta(hours=1))
    again = desk.sync(store, clock)

    assert (again.created, again.revised, again.duplicates) == (0, 0, 1)
    assert resolutions(client, "org:42") == {"zendesk:acme:ticket:1": record}


def test_forgetting_the_connector_removes_the_resolutions_it_recorded_and_no_others(
    store: Store, clock: FakeClock, client: TestClient, desk: ZendeskDesk
) -> None:
    desk.put(1, "Printer on fire", "solved", T0)
    desk.put(2, "Invoice total wrong", "open", T0)
    desk.sync(store, clock)
    by_hand = {"subject_id": "org:42", "session_id": "chat-7", "status": "resolved"}
    assert client.post("/v1/resolutions", json=by_hand).status_code == 200

    response = client.delete("/v1/connectors/desk/data")

    assert response.status_code == 200, response.text
    assert (response.json()["episodes"], response.json()["resolutions"]) == (2, 2)
    assert list(resolutions(client, "org:42")) == ["chat-7"]
    assert client.delete("/v1/connectors/desk/data").status_code == 404  # nothing left


# -- Linear -----------------------------------------------------------------------------


@pytest.fixture
def linear_fake(clock: FakeClock) -> Iterator[FakeLinear]:
    with FakeLinear(token="lin_api_test", clock=clock) as server:
        server.add_team("ENG")
        yield server


def sync_linear(store: Store, fake: FakeLinear, clock: FakeClock) -> RunRecord:
    config = LinearConfig.model_validate(
        {
            "name": "eng-linear",
            "type": "linear",
            "tenant": "default",
            "token": "lin_api_test",
            "base_url": fake.base_url,
            "subject": "team:{team_key}",
            "overlap": "1h",
            "start": (T0 - timedelta(days=1)).isoformat(),
        }
    )
    return sync_once(store, clock, LinearConnector(config, sleeper=never_waits(clock), clock=clock))


def test_linear_completed_and_canceled_issues_are_resolved_and_unresolved_sessions(
    store: Store, clock: FakeClock, client: TestClient, linear_fake: FakeLinear
) -> None:
    done = linear_fake.add_issue("ENG", "Checkout times out", at=T0)
    dropped = linear_fake.add_issue("ENG", "Dark mode", at=T0)
    linear_fake.add_issue("ENG", "Flaky test", at=T0)
    comment = linear_fake.add_comment(done.id, "Fixed in #12", at=T0 + timedelta(hours=1))
    linear_fake.set_state(done.id, "Done", "completed", at=T0 + timedelta(hours=2))
    linear_fake.set_state(dropped.id, "Canceled", "canceled", at=T0 + timedelta(hours=2))

    sync_linear(store, linear_fake, clock)

    org = linear_fake.workspace_id
    session = f"linear:{org}:issue:{done.id}"
    stored = resolutions(client, "team:ENG")
    assert {key: item["status"] for key, item in stored.items()} == {
        session: "resolved",
        f"linear:{org}:issue:{dropped.id}": "unresolved",
        **{
            f"linear:{org}:issue:{issue.id}": "open"
            for issue in linear_fake.issues.values()
            if issue.title == "Flaky test"
        },
    }
    assert stored[session]["resolution_summary"] == "Checkout times out (completed)"
    # The comment belongs to its issue's session.
    assert sessions_of(store)[f"{session}:comment:{comment.id}"] == session

    clock.advance(timedelta(hours=1))
    linear_fake.set_state(done.id, "In Progress", "started", at=clock.now() - timedelta(minutes=5))
    sync_linear(store, linear_fake, clock)

    assert resolutions(client, "team:ENG")[session]["status"] == "open"


# -- Jira -------------------------------------------------------------------------------


def sync_jira(store: Store, fake: FakeJira, clock: FakeClock) -> RunRecord:
    config = JiraConfig.model_validate(
        {
            "name": "eng-jira",
            "site": "acme",
            "base_url": fake.base_url,
            "email": "bot@acme.example",
            "token": "jira-token",
            "projects": ["ENG"],
            "subject": "project:{project_key}",
            "start": "2026-01-01",
        }
    )
    return sync_once(store, clock, JiraConnector(config, sleeper=never_waits(clock), clock=clock))


def test_a_jira_issue_done_is_resolved_and_reopened_is_open(
    store: Store, clock: FakeClock, client: TestClient
) -> None:
    with FakeJira(start=T0 - timedelta(days=1)) as fake:
        done = fake.add_issue("ENG", "Checkout times out")
        fake.add_issue("ENG", "Flaky test")
        comment = fake.add_comment(done.id, "Fixed in #12")
        fake.edit_issue(done.id, status="Done")
        sync_jira(store, fake, clock)

        session = f"jira:acme:issue:{done.id}"
        stored = resolutions(client, "project:ENG")
        assert {key: item["status"] for key, item in stored.items()} == {
            session: "resolved",
            f"jira:acme:issue:{done.id + 1}": "open",
        }
        assert stored[session]["resolution_summary"] == "Checkout times out (done)"
        assert stored[session]["metadata"] == {"source_status": "done", "connector": "eng-jira"}
        assert sessions_of(store)[f"{session}:comment:{comment.id}"] == session

        clock.advance(timedelta(hours=1))
        fake.edit_issue(done.id, status="In Progress", at=clock.now() - timedelta(minutes=30))
        sync_jira(store, fake, clock)

    assert resolutions(client, "project:ENG")[session]["status"] == "open"


# -- the ordering rule, straight on the statement ------------------------------------------


def read(status: ResolutionStatus, hours: int) -> SourceResolution:
    at = T0 + timedelta(hours=hours)
    return SourceResolution("org:1", "ticket:1", SessionResolution(status, status.value, at, "x"))


def record(store: Store, reads: list[SourceResolution], now: datetime) -> None:
    with store.write() as connection:
        record_source_resolutions(connection, "default", reads, now, connector="desk")


def stored_status(store: Store) -> tuple[str, str]:
    with store.read() as connection:
        row = connection.execute(
            sa.text("SELECT status, resolution_summary FROM resolutions")
        ).one()
        return row.status, row.resolution_summary


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(
        st.lists(st.tuples(st.sampled_from(list(ResolutionStatus)), st.integers(0, 5)), min_size=1),
        min_size=1,
        max_size=4,
    )
)
def test_whatever_order_reads_arrive_in_the_newest_read_stands(
    store: Store, batches: list[list[tuple[ResolutionStatus, int]]]
) -> None:
    with store.write_one_statement() as connection:
        connection.execute(sa.text("DELETE FROM resolutions"))
    for number, batch in enumerate(batches):
        record(store, [read(status, hours) for status, hours in batch], T0 + timedelta(days=number))

    latest = max(hours for batch in batches for _, hours in batch)
    # The first batch that read the latest time wrote it (its last read of that time);
    # later reads of the same time are not newer, so they change nothing.
    first = next(batch for batch in batches if any(hours == latest for _, hours in batch))
    expected = [status for status, hours in first if hours == latest][-1]
    assert stored_status(store) == (expected.value, expected.value)
