"""Slack Events API deliveries through ``POST /v1/webhooks/{name}`` into a real store
(SQLite or PostgreSQL), beside the scheduled re-read of the channel from FakeSlack:
the url_verification handshake, one episode per message whichever comes first, edits
and deletions pushed, and the five-minute replay window."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.connectors import Window
from memsync.connectors.slack.fake_api import FakeSlack
from memsync.episode import IngestStatus
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK

from .webhook_support import accepted, read_now, stored

START = datetime(2023, 11, 14, tzinfo=UTC)
NOW = datetime(2023, 11, 15, tzinfo=UTC)
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"  # the signing secret of Slack's example


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack(token="xoxb-test") as server:
        server.add_channel("C1", "incidents")
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def services(store: Store, fake: FakeSlack, clock: FakeClock) -> Services:
    settings = Settings.model_validate(
        {
            "store": str(store.engine.url),
            "connectors": [
                {
                    "name": "sl",
                    "type": "slack",
                    "token": "xoxb-test",
                    "channels": ["C1"],
                    "base_url": fake.base_url + "/api",
                    "subject": "slack:{channel}",
                    "start": START.isoformat(),
                    "webhook": {"secret": SECRET},
                }
            ],
        }
    )
    return Services(settings, store, clock)


@pytest.fixture
def client(services: Services) -> TestClient:
    return TestClient(create_app(services), base_url=LOOPBACK)


def signed(body: bytes, at: datetime, *, secret: str = SECRET) -> dict[str, str]:
    """The headers Slack sends (https://api.slack.com/authentication/verifying-requests-
    from-slack): v0= hex HMAC-SHA256 of ``v0:{timestamp}:{body}``."""
    stamp = str(int(at.timestamp()))
    base = b"v0:" + stamp.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Signature": f"v0={digest}",
        "X-Slack-Request-Timestamp": stamp,
        "Content-Type": "application/json",
    }


def deliver(client: TestClient, body: bytes, at: datetime = NOW) -> dict[str, Any]:
    """The answer of connector ``sl`` to ``body`` signed at ``at``, taken (200)."""
    return accepted(client, "/v1/webhooks/sl", body, signed(body, at))


def test_the_url_verification_handshake_answers_the_challenge(client: TestClient) -> None:
    # The example of https://api.slack.com/events/url_verification
    body = (
        b'{"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "challenge": '
        b'"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}'
    )

    answer = deliver(client, body)

    assert answer == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}


def test_a_message_pushed_then_edited_then_re_read_is_one_episode_at_the_edit(
    client: TestClient, services: Services, fake: FakeSlack, store: Store
) -> None:
    message = fake.post_message("C1", "The queue is on fire")
    key = f"slack:{fake.team_id}:C1:{message.ts}"
    posted = deliver(client, fake.event_body("C1", message.ts))
    fake.edit_message("C1", message.ts, "The queue was on fire; fixed")
    changed = deliver(client, fake.event_body("C1", message.ts, "message_changed"))
    run = services.run_sync(services.connector("sl"))

    assert (posted["outcome"], changed["outcome"]) == ("stored", "revised")
    assert (run.created, run.revised) == (0, 0)
    [(revision, payload, _)] = stored(store, key)
    assert (revision, payload["text"]) == (2, "The queue was on fire; fixed")


def test_a_re_read_first_then_the_same_message_pushed_stores_nothing(
    client: TestClient, services: Services, fake: FakeSlack, store: Store
) -> None:
    message = fake.post_message("C1", "Deploy at noon")
    services.run_sync(services.connector("sl"))

    answer = deliver(client, fake.event_body("C1", message.ts))

    assert answer["outcome"] == "duplicate"
    assert len(stored(store, f"slack:{fake.team_id}:C1:{message.ts}")) == 1


def test_a_deletion_pushed_is_a_tombstone(
    client: TestClient, services: Services, fake: FakeSlack, store: Store
) -> None:
    message = fake.post_message("C1", "Wrong channel, sorry")
    services.run_sync(services.connector("sl"))
    fake.delete_message("C1", message.ts)

    answer = deliver(client, fake.event_body("C1", message.ts, "message_deleted"))

    assert answer["outcome"] == "revised"
    [(revision, _, deleted_at)] = stored(store, f"slack:{fake.team_id}:C1:{message.ts}")
    assert (revision, deleted_at is not None) == (2, True)


def test_a_deletion_pushed_is_not_undone_by_an_older_re_read_ingested_after_it(
    client: TestClient, services: Services, fake: FakeSlack, store: Store
) -> None:
    message = fake.post_message("C1", "Wrong channel, sorry")
    fake.edit_message("C1", message.ts, "Wrong channel, sorry!")
    config = services.connector("sl")
    # A re-read that reads the message now, before the deletion, and is ingested after it.
    read_before = read_now(services, config, Window(start=START, end=NOW))
    deliver(client, fake.event_body("C1", message.ts))
    fake.delete_message("C1", message.ts)

    gone = deliver(client, fake.event_body("C1", message.ts, "message_deleted"))
    [late] = services.ingest.ingest(config.tenant, read_before)

    assert gone["outcome"] == "revised"
    assert late.status is IngestStatus.DUPLICATE  # read before the deletion: nothing
    [(revision, payload, deleted_at)] = stored(store, f"slack:{fake.team_id}:C1:{message.ts}")
    assert (revision, payload["text"], deleted_at is not None) == (
        2,
        "Wrong channel, sorry!",
        True,
    )


def test_stale_or_forged_deliveries_are_refused_and_store_nothing(
    client: TestClient, fake: FakeSlack, store: Store
) -> None:
    message = fake.post_message("C1", "Replayed")
    body = fake.event_body("C1", message.ts)
    statuses = [
        client.post("/v1/webhooks/sl", content=body, headers=headers).status_code
        for headers in (
            signed(body, NOW - timedelta(minutes=6)),  # a replay of an old delivery
            signed(body, NOW + timedelta(minutes=6)),
            signed(body, NOW, secret="guess"),
            {"X-Slack-Signature": "v0=00"},
        )
    ]
    malformed = [
        client.post("/v1/webhooks/sl", content=odd, headers=signed(odd, NOW)).status_code
        for odd in (b"[]", body.replace(fake.team_id.encode(), b"T1:../x", 1))
    ]

    assert statuses == [401, 401, 401, 401]
    assert malformed == [400, 400]
    assert stored(store, f"slack:{fake.team_id}:C1:{message.ts}") == []


def test_a_message_of_a_channel_not_read_is_acknowledged_and_ignored(
    client: TestClient, fake: FakeSlack, store: Store
) -> None:
    fake.add_channel("C2", "random")
    message = fake.post_message("C2", "Lunch?")

    answer = deliver(client, fake.event_body("C2", message.ts))

    assert answer["outcome"] == "ignored"
    assert stored(store, f"slack:{fake.team_id}:C2:{message.ts}") == []
