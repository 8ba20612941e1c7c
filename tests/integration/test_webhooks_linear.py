"""Linear webhook deliveries through ``POST /v1/webhooks/{name}`` into a real store
(SQLite or PostgreSQL), beside the scheduled re-read of the same workspace from
FakeLinear: one episode per record whichever comes first, an edit pushed is not undone
by an older re-read, removals become tombstones, and every refusal stores nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.connectors import Window
from memsync.connectors.linear.fake_api import FakeIssue, FakeLinear
from memsync.episode import IngestStatus
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunRecord
from tests.helpers import LOOPBACK
from tests.unit.connectors.fixtures import linear_signed

from .webhook_support import accepted, counted, every_key, read_now, refused, stored

START = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TOKEN = "lin_api_test"
SECRET = "lin_wh_3f9c2a7e51b04d6c8e1f"
HOOK = "/v1/webhooks/lin"


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


def signed(body: bytes, *, secret: str = SECRET) -> dict[str, str]:
    """The headers Linear sends with ``body`` as a delivery of its own (a fresh id)."""
    return linear_signed(body, secret)


def deliver(client: TestClient, body: bytes, **headers: str) -> dict[str, Any]:
    """The answer of connector ``lin`` to the delivery ``body``, taken (200)."""
    return accepted(client, HOOK, body, signed(body) | headers)


def push_then_re_read(
    client: TestClient, services: Services, *bodies: bytes, wait: timedelta = timedelta(0)
) -> tuple[list[dict[str, Any]], RunRecord]:
    """The answers to ``bodies`` delivered in turn, then the record of the scheduled
    re-read of connector ``lin`` run ``wait`` after them (on the services' fake clock)."""
    answers = [deliver(client, body) for body in bodies]
    if wait:
        assert isinstance(services.clock, FakeClock)
        services.clock.advance(wait)
    return answers, services.run_sync(services.connector("lin"))


def issue_key(fake: FakeLinear, issue: FakeIssue) -> str:
    return f"linear:{fake.workspace_id}:issue:{issue.id}"


def test_an_issue_pushed_then_redelivered_then_re_read_is_one_episode(
    client: TestClient, services: Services, fake: FakeLinear, issue: FakeIssue, store: Store
) -> None:
    body = fake.webhook_body("Issue", "create", issue.id)
    headers = signed(body)

    first = client.post(HOOK, content=body, headers=headers).json()
    again = client.post(HOOK, content=body, headers=headers).json()
    # Linear's retry of a delivery it thinks failed, under a new id: the key holds.
    [other_id], run = push_then_re_read(client, services, body)

    assert (first["outcome"], first["event"]) == ("stored", "Issue.create")
    assert (again["outcome"], again["episodes"]) == ("duplicate", [])
    assert (other_id["outcome"], len(other_id["episodes"])) == ("duplicate", 1)
    assert (run.created, run.revised) == (0, 0)
    [(revision, payload, deleted_at)] = stored(store, issue_key(fake, issue))
    assert (revision, payload["title"], deleted_at) == (1, "Checkout times out", None)
    assert counted(services, "lin", "stored") == 1
    assert counted(services, "lin", "duplicate") == 2


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

    [edited, commented], run = push_then_re_read(
        client,
        services,
        fake.webhook_body("Issue", "update", issue.id),
        fake.webhook_body("Comment", "create", comment.id),
        wait=timedelta(minutes=15),
    )

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
    read_before = read_now(services, config, Window(start=START, end=NOW))
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
    read_before = read_now(services, config, Window(start=START, end=NOW))
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
    unsigned = {k: v for k, v in good.items() if k != "linear-signature"}
    no_data = json.dumps({**json.loads(body), "data": None}).encode()
    typo = fake.add_comment(issue.id, "Typo, deleted at once.")
    purged = fake.webhook_body("Comment", "create", typo.id)
    fake.delete_comment(typo.id)

    outcomes = [
        refused(client, HOOK, body, unsigned, 401),
        refused(client, HOOK, body, signed(body, secret="guess"), 401),
        refused(client, HOOK, body + b" ", good, 401),  # body changed after signing
        refused(client, HOOK, b"{not json", signed(b"{not json"), 400),
        refused(client, HOOK, no_data, signed(no_data), 400),
        refused(client, HOOK, purged, signed(purged), 422),
    ]
    fake.script_rate_limit(times=1)
    outcomes.append(refused(client, HOOK, body, signed(body), 503))
    clock.advance(timedelta(seconds=61))  # the same delivery, replayed later
    outcomes.append(refused(client, HOOK, body, signed(body), 401))

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
    assert counted(services, "lin", "bad_signature") == 2
    assert counted(services, "lin", "source_unavailable") == 1
