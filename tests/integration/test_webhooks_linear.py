"""Linear webhook deliveries through ``POST /v1/webhooks/{name}`` into a real store
(SQLite or PostgreSQL), beside the scheduled re-read of the same workspace from
FakeLinear: one episode per record whichever comes first, an edit pushed is not undone
by an older re-read, removals become tombstones, and every refusal stores nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.connectors import Window
from memsync.connectors.http import HttpRecord
from memsync.connectors.linear.fake_api import FakeIssue, FakeLinear
from memsync.episode import IngestStatus
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store, tables
from tests.helpers import LOOPBACK

START = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TOKEN = "lin_api_test"
SECRET = "lin_wh_3f9c2a7e51b04d6c8e1f"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def fake(clock: FakeClock) -> Iterator[FakeLinear]:
    with FakeLinear(token=TOKEN, clock=clock) as server:
        server.add_team("ENG")
        server.add_team("OPS")
        yield server


@pytest.fixture
def issue(fake: FakeLinear) -> FakeIssue:
    return fake.add_issue("ENG", "Checkout times out", description="Carts over 200 items.")


@pytest.fixture
def services(store: Store, fake: FakeLinear, clock: FakeClock) -> Services:
    settings = Settings.model_validate(
        {
            "store": str(store.engine.url),
            "connectors": [
                {
                    "name": "lin",
                    "type": "linear",
                    "token": TOKEN,
                    "teams": ["ENG"],
                    "base_url": fake.base_url,
                    "subject": "team:{team_key}",
                    "start": START.isoformat(),
                    "retry": {"max_attempts": 1},
                    "webhook": {"secret": SECRET},
                }
            ],
        }
    )
    return Services(settings, store, clock)


@pytest.fixture
def client(services: Services) -> TestClient:
    return TestClient(create_app(services), base_url=LOOPBACK)


def signed(body: bytes, *, secret: str = SECRET, delivery: str | None = None) -> dict[str, str]:
    """The headers Linear sends (https://linear.app/developers/webhooks): the hex
    HMAC-SHA256 of the raw body in ``Linear-Signature``, the delivery's UUID, the type."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Linear-Signature": digest,
        "Linear-Delivery": delivery or str(uuid.uuid4()),
        "Linear-Event": "Issue",
        "Content-Type": "application/json; charset=utf-8",
    }


def deliver(client: TestClient, body: bytes, **headers: str) -> dict[str, Any]:
    response = client.post("/v1/webhooks/lin", content=body, headers=signed(body) | headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def issue_key(fake: FakeLinear, issue: FakeIssue) -> str:
    return f"linear:{fake.workspace_id}:issue:{issue.id}"


def stored(store: Store, key: str) -> list[tuple[int, Any, Any]]:
    episodes = tables.episodes
    query = sa.select(episodes.c.revision, episodes.c.payload, episodes.c.deleted_at).where(
        episodes.c.idempotency_key == key
    )
    with store.engine.connect() as connection:
        return [tuple(row) for row in connection.execute(query)]


def every_key(store: Store) -> list[str]:
    with store.engine.connect() as connection:
        return sorted(
            connection.execute(sa.select(tables.episodes.c.idempotency_key)).scalars().all()
        )


def counted(services: Services, outcome: str) -> float:
    value = services.metrics.registry.get_sample_value(
        "memsync_webhook_deliveries_total", {"connector": "lin", "outcome": outcome}
    )
    return value or 0.0


def test_an_issue_pushed_then_redelivered_then_re_read_is_one_episode(
    client: TestClient, services: Services, fake: FakeLinear, issue: FakeIssue, store: Store
) -> None:
    body = fake.webhook_body("Issue", "create", issue.id)
    headers = signed(body)

    first = client.post("/v1/webhooks/lin", content=body, headers=headers).json()
    again = client.post("/v1/webhooks/lin", content=body, headers=headers).json()
    # Linear's retry of a delivery it thinks failed, under a new id: the key holds.
    other_id = deliver(client, body)
    run = services.run_sync(services.connector("lin"))

    assert (first["outcome"], first["event"]) == ("stored", "Issue.create")
    assert (again["outcome"], again["episodes"]) == ("duplicate", [])
    assert (other_id["outcome"], len(other_id["episodes"])) == ("duplicate", 1)
    assert (run.created, run.revised) == (0, 0)
    [(revision, payload, deleted_at)] = stored(store, issue_key(fake, issue))
    assert (revision, payload["title"], deleted_at) == (1, "Checkout times out", None)
    assert counted(services, "stored") == 1
    assert counted(services, "duplicate") == 2


def test_a_re_read_first_then_a_pushed_edit_and_comment_are_one_revision_each(
    client: TestClient,
    services: Services,
    fake: FakeLinear,
    issue: FakeIssue,
    clock: FakeClock,
    store: Store,
) -> None:
    services.run_sync(services.connector("lin"))
    clock.advance(timedelta(minutes=1))
    fake.edit_issue(issue.id, title="Checkout times out on large carts")
    comment = fake.add_comment(issue.id, "Reproduced with 250 items.")

    edited = deliver(client, fake.webhook_body("Issue", "update", issue.id))
    commented = deliver(client, fake.webhook_body("Comment", "create", comment.id))
    clock.advance(timedelta(minutes=15))
    run = services.run_sync(services.connector("lin"))

    assert (edited["outcome"], commented["outcome"]) == ("revised", "stored")
    assert (run.created, run.revised) == (0, 0)
    [(revision, payload, _)] = stored(store, issue_key(fake, issue))
    assert (revision, payload["title"]) == (2, "Checkout times out on large carts")
    assert every_key(store) == [
        issue_key(fake, issue),
        f"{issue_key(fake, issue)}:comment:{comment.id}",
    ]


def test_an_edit_pushed_is_not_undone_by_an_older_re_read_ingested_after_it(
    client: TestClient,
    services: Services,
    fake: FakeLinear,
    issue: FakeIssue,
    clock: FakeClock,
    store: Store,
) -> None:
    services.run_sync(services.connector("lin"))
    config = services.connector("lin")
    # A re-read that reads the issue now, before the edit, and is ingested after it.
    with services.connector_instance(config) as connector:
        read_before = [
            connector.to_episode(item)
            for item in connector.fetch(Window(start=START, end=NOW), None)
            if isinstance(item, HttpRecord)
        ]
    clock.advance(timedelta(minutes=1))
    fake.edit_issue(issue.id, title="Checkout times out on large carts")

    pushed = deliver(client, fake.webhook_body("Issue", "update", issue.id))
    [late] = services.ingest.ingest(config.tenant, read_before)

    assert pushed["outcome"] == "revised"
    assert late.status is IngestStatus.DUPLICATE  # older than what is stored: nothing
    [(revision, payload, _)] = stored(store, issue_key(fake, issue))
    assert (revision, payload["title"]) == (2, "Checkout times out on large carts")


def test_a_removal_pushed_is_a_tombstone_of_the_issue_and_its_comments(
    client: TestClient, services: Services, fake: FakeLinear, issue: FakeIssue, store: Store
) -> None:
    comment = fake.add_comment(issue.id, "Reproduced with 250 items.")
    other = fake.add_comment(issue.id, "Also on mobile.")
    services.run_sync(services.connector("lin"))
    comment_removed = fake.webhook_body("Comment", "remove", other.id)
    fake.delete_comment(other.id)  # Linear deletes a comment outright: no re-read sees it

    one_comment = deliver(client, comment_removed)
    fake.archive_issue(issue.id, trash=True)
    whole_issue = deliver(client, fake.webhook_body("Issue", "remove", issue.id))

    assert (one_comment["outcome"], whole_issue["outcome"]) == ("revised", "revised")
    for key in (
        issue_key(fake, issue),
        f"{issue_key(fake, issue)}:comment:{comment.id}",
        f"{issue_key(fake, issue)}:comment:{other.id}",
    ):
        [(revision, _, deleted_at)] = stored(store, key)
        assert (revision, deleted_at is not None) == (2, True)


def test_a_removal_pushed_is_not_undone_by_an_older_re_read_ingested_after_it(
    client: TestClient, services: Services, fake: FakeLinear, issue: FakeIssue, store: Store
) -> None:
    comment = fake.add_comment(issue.id, "Reproduced with 250 items.")
    config = services.connector("lin")
    services.run_sync(config)
    # A re-read that reads the issue and its comment before the removal, ingested after.
    with services.connector_instance(config) as connector:
        read_before = [
            connector.to_episode(item)
            for item in connector.fetch(Window(start=START, end=NOW), None)
            if isinstance(item, HttpRecord)
        ]
    fake.archive_issue(issue.id, trash=True)

    gone = deliver(client, fake.webhook_body("Issue", "remove", issue.id))
    late = services.ingest.ingest(config.tenant, read_before)

    assert gone["outcome"] == "revised"
    assert [o.status for o in late] == [IngestStatus.DUPLICATE] * 2
    for key in (issue_key(fake, issue), f"{issue_key(fake, issue)}:comment:{comment.id}"):
        [(_, _, deleted_at)] = stored(store, key)
        assert deleted_at is not None, key


def test_records_not_read_are_acknowledged_and_store_nothing(
    client: TestClient, fake: FakeLinear, issue: FakeIssue, store: Store
) -> None:
    other_team = fake.add_issue("OPS", "Pager rota")
    project = json.loads(fake.webhook_body("Issue", "create", issue.id))
    project.update(type="Project")

    answers = [
        deliver(client, fake.webhook_body("Issue", "create", other_team.id)),
        deliver(client, json.dumps(project).encode()),
    ]

    assert [a["outcome"] for a in answers] == ["ignored", "ignored"]
    assert every_key(store) == []


def refused(client: TestClient, body: bytes, headers: dict[str, str], status: int) -> str:
    response = client.post("/v1/webhooks/lin", content=body, headers=headers)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"]  # says why, for the person reading Linear's delivery log
    return str(error.get("details", {}).get("outcome", error["code"]))


def test_refusals_store_nothing_and_are_counted(
    client: TestClient,
    services: Services,
    fake: FakeLinear,
    issue: FakeIssue,
    clock: FakeClock,
    store: Store,
) -> None:
    body = fake.webhook_body("Issue", "create", issue.id)
    good = signed(body)
    unsigned = {k: v for k, v in good.items() if k != "Linear-Signature"}
    no_data = json.dumps({**json.loads(body), "data": None}).encode()
    typo = fake.add_comment(issue.id, "Typo, deleted at once.")
    purged = fake.webhook_body("Comment", "create", typo.id)
    fake.delete_comment(typo.id)

    outcomes = [
        refused(client, body, unsigned, 401),
        refused(client, body, signed(body, secret="guess"), 401),
        refused(client, body + b" ", good, 401),  # body changed after signing
        refused(client, b"{not json", signed(b"{not json"), 400),
        refused(client, no_data, signed(no_data), 400),
        refused(client, purged, signed(purged), 422),
    ]
    fake.script_rate_limit(times=1)
    outcomes.append(refused(client, body, signed(body), 503))
    clock.advance(timedelta(seconds=61))  # the same delivery, replayed later
    outcomes.append(refused(client, body, signed(body), 401))

    assert outcomes == [
        "unsigned",
        "bad_signature",
        "bad_signature",
        "malformed",
        "malformed",
        "unprocessable",
        "source_unavailable",
        "stale",
    ]
    assert every_key(store) == []
    assert counted(services, "bad_signature") == 2
    assert counted(services, "source_unavailable") == 1
