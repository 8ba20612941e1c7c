"""Zendesk webhook deliveries through ``POST /v1/webhooks/{name}`` into a real store
(SQLite or PostgreSQL), beside the scheduled re-read of the same ticket from Zendesk's
incremental export (over respx): one episode per ticket whichever comes first, an edit
pushed is not undone by an older re-read, a deletion pushed is a tombstone of the ticket
and its comments, and every refusal stores nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import respx
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunRecord
from tests.helpers import LOOPBACK
from tests.unit.connectors.fixtures import load_fixture, zendesk_signed

from .webhook_support import accepted, stored

ZENDESK = "https://acme.zendesk.com"
NOW = datetime(2011, 10, 1, tzinfo=UTC)
SECRET = "dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ=="  # the verifying page's example secret
TICKET_KEY = "zendesk:acme:ticket:35436"
COMMENT_KEY = f"{TICKET_KEY}:comment:1274"


class ZendeskAccount:
    """Ticket 35436 as Zendesk's REST API serves it: the recorded export page and
    comments (``incremental_tickets_cursor.json``, ``ticket_comments.json``), plus the
    fields a live ticket has that the recorded example leaves out. ``ticket`` is what
    the next re-read finds; change it to move the ticket on."""

    def __init__(self) -> None:
        page = load_fixture("zendesk", "incremental_tickets_cursor.json")
        self.ticket: dict[str, Any] = page["tickets"][0] | {
            "brand_id": 123,
            "ticket_form_id": 6876543,
            "custom_status_id": 2131,
            "is_public": True,
        }

    def re_read(self, services: Services) -> RunRecord:
        """One scheduled sync of connector ``desk`` against this account."""
        with respx.mock(base_url=ZENDESK, assert_all_called=False) as mock:
            mock.get("/api/v2/incremental/tickets/cursor.json").mock(side_effect=self._export)
            mock.get("/api/v2/tickets/35436/comments.json").respond(
                json=load_fixture("zendesk", "ticket_comments.json")
            )
            mock.get("/api/v2/tickets/35436/audits.json").respond(json={"audits": []})
            return services.run_sync(services.connector("desk"), full_refresh=True)

    def _export(self, request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"tickets": [self.ticket], "end_of_stream": True, "after_cursor": "end"}
        )


@pytest.fixture
def account() -> ZendeskAccount:
    return ZendeskAccount()


@pytest.fixture
def services(store: Store) -> Services:
    settings = Settings.model_validate(
        {
            "store": str(store.engine.url),
            "connectors": [
                {
                    "name": "desk",
                    "type": "zendesk",
                    "subdomain": "acme",
                    "email": "agent@acme.test",
                    "token": "t0ken",
                    "base_url": ZENDESK,
                    "subject": "org:{organization_id}",
                    "start": "2011-01-01T00:00:00Z",
                    "include_status_changes": False,
                    "retry": {"max_attempts": 1},
                    "webhook": {"secret": SECRET},
                }
            ],
        }
    )
    return Services(settings, store, FakeClock(NOW))


@pytest.fixture
def client(services: Services) -> TestClient:
    return TestClient(create_app(services), base_url=LOOPBACK)


def body_of(name: str, **detail: Any) -> bytes:
    """The fixture delivery ``webhooks/NAME.json`` with ``detail`` fields changed."""
    delivery = load_fixture("zendesk", f"webhooks/{name}.json")
    delivery["detail"] |= detail
    return json.dumps(delivery).encode()


def deliver(client: TestClient, body: bytes, invocation_id: str = "8350205582") -> dict[str, Any]:
    """The answer of connector ``desk`` to ``body`` signed now, taken (200)."""
    headers = zendesk_signed(body, NOW, SECRET, invocation_id)
    return accepted(client, "/v1/webhooks/desk", body, headers)


def test_a_ticket_pushed_then_redelivered_then_re_read_is_one_episode(
    client: TestClient, services: Services, account: ZendeskAccount, store: Store
) -> None:
    body = body_of("ticket_status_changed")

    first = deliver(client, body)
    again = deliver(client, body)
    same_event_other_invocation = deliver(client, body, invocation_id="8350205583")
    run = account.re_read(services)

    assert (first["outcome"], again["outcome"]) == ("stored", "duplicate")
    assert same_event_other_invocation["outcome"] == "duplicate"  # the key, not the id
    assert (run.created, run.revised) == (1, 0)  # only the comment, which no event carried
    [(revision, payload, _)] = stored(store, TICKET_KEY)
    assert (revision, payload["status"], payload["subject"]) == (
        1,
        "open",
        "Help, my printer is on fire!",
    )


def test_after_a_re_read_a_push_of_it_is_a_duplicate_and_an_edit_outlives_older_re_reads(
    client: TestClient, services: Services, account: ZendeskAccount, store: Store
) -> None:
    account.re_read(services)
    solved = body_of("ticket_status_changed", status="SOLVED", updated_at="2011-05-06T08:00:00Z")

    same = deliver(client, body_of("ticket_status_changed"))
    pushed = deliver(client, solved, invocation_id="8350205590")
    # A re-read that read the ticket before it was solved, ingested after the push.
    late = account.re_read(services)

    assert (same["outcome"], pushed["outcome"]) == ("duplicate", "revised")
    assert (late.created, late.revised) == (0, 0)
    [(revision, payload, _)] = stored(store, TICKET_KEY)
    assert (revision, payload["status"]) == (2, "solved")
    account.ticket |= {"status": "solved", "updated_at": "2011-05-06T08:00:00Z"}
    caught_up = account.re_read(services)
    assert (caught_up.created, caught_up.revised) == (0, 0)  # the same version as pushed


def test_a_deletion_pushed_is_a_tombstone_of_the_ticket_and_its_comments(
    client: TestClient, services: Services, account: ZendeskAccount, store: Store
) -> None:
    account.re_read(services)

    answer = deliver(client, body_of("ticket_soft_deleted"))

    assert answer["outcome"] == "revised"
    for key in (TICKET_KEY, COMMENT_KEY):
        [(revision, _, deleted_at)] = stored(store, key)
        assert (revision, deleted_at is not None) == (2, True)


def test_a_deletion_pushed_is_not_undone_by_an_older_re_read_after_it(
    client: TestClient, services: Services, account: ZendeskAccount, store: Store
) -> None:
    account.re_read(services)

    deliver(client, body_of("ticket_soft_deleted"))
    # The export has not caught up: it still serves the ticket as it was before.
    late = account.re_read(services)
    ticket_after_late = stored(store, TICKET_KEY)
    comment_after_late = stored(store, COMMENT_KEY)
    account.ticket |= {"status": "deleted", "updated_at": "2011-05-06T09:00:00Z"}
    caught_up = account.re_read(services)

    # The ticket has an update time older than the deletion: it stays deleted.
    [(revision, _, deleted_at)] = ticket_after_late
    assert (revision, deleted_at is not None) == (2, True)
    # Its comment has none (Zendesk comments carry only created_at): the late re-read
    # stores it again, until the export reports the ticket deleted (documented).
    assert late.revised == 1
    [(_, _, comment_deleted_at)] = comment_after_late
    assert comment_deleted_at is None
    assert caught_up.tombstoned == 1
    for key in (TICKET_KEY, COMMENT_KEY):
        [(_, _, deleted_at)] = stored(store, key)
        assert deleted_at is not None, key


def test_a_comment_event_is_acknowledged_and_left_to_the_re_read(
    client: TestClient, services: Services, account: ZendeskAccount, store: Store
) -> None:
    answer = deliver(client, body_of("ticket_comment_added"))
    assert (answer["outcome"], stored(store, COMMENT_KEY)) == ("ignored", [])

    account.re_read(services)

    assert len(stored(store, COMMENT_KEY)) == 1


def test_refusals_store_nothing(client: TestClient, store: Store) -> None:
    body = body_of("ticket_status_changed")
    good = zendesk_signed(body, NOW, SECRET)
    unsigned = {k: v for k, v in good.items() if k != "X-Zendesk-Webhook-Signature"}
    no_id = body_of("ticket_status_changed", id=None)
    other_ticket = body.replace(b'"id": "35436"', b'"id": "35437"')

    statuses = [
        client.post("/v1/webhooks/desk", content=content, headers=headers).status_code
        for content, headers in (
            (body, unsigned),
            (body, zendesk_signed(body, NOW, "guess")),
            (body + b" ", good),  # changed after signing
            (body, zendesk_signed(body, NOW - timedelta(minutes=6), SECRET)),  # a replay
            (body, zendesk_signed(body, NOW + timedelta(minutes=6), SECRET)),
            (b"{not json", zendesk_signed(b"{not json", NOW, SECRET)),
            (other_ticket, zendesk_signed(other_ticket, NOW, SECRET)),
            (no_id, zendesk_signed(no_id, NOW, SECRET)),
        )
    ]

    assert statuses == [401, 401, 401, 401, 401, 400, 400, 422]
    assert stored(store, TICKET_KEY) == []
