"""Jira webhook deliveries through ``POST /v1/webhooks/{name}`` into a real store (SQLite
or PostgreSQL), beside the scheduled re-read of the same project from FakeJira: one
episode per record whichever comes first (a pushed issue is read back through the REST
API, so its text is the re-read's), edits and deletions pushed, and every refusal stores
nothing and is counted."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.connectors import Window
from memsync.connectors.jira import JiraIssue
from memsync.connectors.jira.fake_api import FakeJira, FakeJiraComment, FakeJiraIssue
from memsync.episode import IngestStatus
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunRecord
from tests.helpers import LOOPBACK

from .webhook_support import accepted, counted, every_key, read_now, refused, stored

NOW = datetime(2026, 2, 1, tzinfo=UTC)
SECRET = "jira-webhook-secret"


@pytest.fixture
def fake() -> Iterator[FakeJira]:
    with FakeJira(time_zone="Europe/Lisbon") as server:
        yield server


@pytest.fixture
def issue(fake: FakeJira) -> FakeJiraIssue:
    return fake.add_issue("ENG", "Checkout fails", "Safari only.")


@pytest.fixture
def comment(fake: FakeJira, issue: FakeJiraIssue) -> FakeJiraComment:
    return fake.add_comment(issue.id, "Reproduced on 17.2")


@pytest.fixture
def services(store: Store, fake: FakeJira) -> Services:
    jira = {
        "type": "jira",
        "site": "acme",
        "base_url": fake.base_url,
        "email": "bot@acme.example",
        "token": "jira-token",
        "projects": ["ENG"],
        "start": "2026-01-01",
        "subject": "project:{project_key}",
        "retry": {"max_attempts": 1},
    }
    settings = Settings.model_validate(
        {
            "store": str(store.engine.url),
            "connectors": [
                {**jira, "name": "jira", "webhook": {"secret": SECRET}},
                {**jira, "name": "unhooked"},
            ],
        }
    )
    return Services(settings, store, FakeClock(NOW))


@pytest.fixture
def client(services: Services) -> TestClient:
    return TestClient(create_app(services), base_url=LOOPBACK)


def signed(body: bytes, *, secret: str = SECRET) -> dict[str, str]:
    """The headers Jira sends with a delivery of a webhook registered with a secret
    (https://developer.atlassian.com/cloud/jira/platform/webhooks/, "Secure admin
    webhooks"): sha256= hex HMAC-SHA256 of the raw body, and the delivery's id."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature": f"sha256={digest}",
        "X-Atlassian-Webhook-Identifier": str(uuid.uuid4()),
        "Content-Type": "application/json",
    }


def deliver(client: TestClient, body: bytes, **headers: str) -> dict[str, Any]:
    """The answer of connector ``jira`` to the delivery ``body``, taken (200)."""
    return accepted(client, "/v1/webhooks/jira", body, signed(body) | headers)


def push_then_re_read(
    client: TestClient, services: Services, *bodies: bytes
) -> tuple[list[dict[str, Any]], RunRecord]:
    """The answers to ``bodies`` delivered in turn, then the record of the scheduled
    re-read of connector ``jira`` run after them."""
    answers = [deliver(client, body) for body in bodies]
    return answers, services.run_sync(services.connector("jira"))


def issue_key(issue: FakeJiraIssue) -> str:
    return f"jira:acme:issue:{issue.id}"


def comment_key(issue: FakeJiraIssue, comment: FakeJiraComment) -> str:
    return f"{issue_key(issue)}:comment:{comment.id}"


def test_an_issue_pushed_then_redelivered_then_re_read_is_one_episode_each(
    client: TestClient,
    services: Services,
    fake: FakeJira,
    store: Store,
    issue: FakeJiraIssue,
    comment: FakeJiraComment,
) -> None:
    body = fake.webhook_body("jira:issue_created", issue.id)
    headers = signed(body)

    first = client.post("/v1/webhooks/jira", content=body, headers=headers).json()
    again = client.post("/v1/webhooks/jira", content=body, headers=headers).json()
    # Another delivery id (a delivery Jira made anew): only the keys recognise it.
    [other_id], run = push_then_re_read(client, services, body)

    assert first["outcome"] == "stored"
    assert (again["outcome"], again["episodes"]) == ("duplicate", [])
    assert (other_id["outcome"], len(other_id["episodes"])) == ("duplicate", 2)
    assert (run.created, run.revised) == (0, 0)
    assert every_key(store) == [issue_key(issue), comment_key(issue, comment)]
    [(revision, payload, deleted_at)] = stored(store, issue_key(issue))
    assert (revision, deleted_at) == (1, None)
    # The text the REST API v3 answers (ADF, made plain), as the re-read stores it.
    assert (payload["title"], payload["description"]) == ("Checkout fails", "Safari only.")
    assert counted(services, "jira", "stored") == 1
    assert counted(services, "jira", "duplicate") == 2


def test_a_re_read_first_then_the_pushed_edits_are_one_revision_each(
    client: TestClient,
    services: Services,
    fake: FakeJira,
    store: Store,
    issue: FakeJiraIssue,
    comment: FakeJiraComment,
) -> None:
    services.run_sync(services.connector("jira"))
    fake.edit_issue(issue.id, summary="Checkout fails on Safari")
    fake.edit_comment(issue.id, comment.id, "Reproduced on 17.2 and 17.3")
    added = fake.add_comment(issue.id, "Fixed in 4.2")

    [edited, commented], run = push_then_re_read(
        client,
        services,
        fake.webhook_body("jira:issue_updated", issue.id),
        fake.webhook_body("comment_created", issue.id, comment_id=added.id),
    )

    # The first read-back already saw the edited comment and the new one.
    assert (edited["outcome"], commented["outcome"]) == ("stored", "duplicate")
    assert (run.created, run.revised) == (0, 0)
    [(revision, payload, _)] = stored(store, issue_key(issue))
    assert (revision, payload["title"]) == (2, "Checkout fails on Safari")
    [(revision, payload, _)] = stored(store, comment_key(issue, comment))
    assert (revision, payload["body"]) == (2, "Reproduced on 17.2 and 17.3")
    assert len(stored(store, comment_key(issue, added))) == 1


def test_an_edit_pushed_is_not_undone_by_an_older_re_read_ingested_after_it(
    client: TestClient,
    services: Services,
    fake: FakeJira,
    store: Store,
    issue: FakeJiraIssue,
    comment: FakeJiraComment,
) -> None:
    services.run_sync(services.connector("jira"))
    config = services.connector("jira")
    # A re-read that reads the issue now, before the edit, and is ingested after it.
    read_before = read_now(services, config, Window(start=None, end=NOW), JiraIssue)
    fake.edit_issue(issue.id, summary="Checkout fails on Safari")

    pushed = deliver(client, fake.webhook_body("jira:issue_updated", issue.id))
    [late] = services.ingest.ingest(config.tenant, read_before)

    assert pushed["outcome"] == "revised"
    assert late.status is IngestStatus.DUPLICATE  # older than what is stored: nothing
    [(revision, payload, _)] = stored(store, issue_key(issue))
    assert (revision, payload["title"]) == (2, "Checkout fails on Safari")


def test_a_replayed_old_delivery_stores_the_issue_as_it_is_now(
    client: TestClient, services: Services, fake: FakeJira, store: Store, issue: FakeJiraIssue
) -> None:
    # Jira signs no timestamp: an old delivery sent again still verifies, but what it
    # stores is read back now, so it cannot bring an older version back.
    old = fake.webhook_body("jira:issue_created", issue.id)
    fake.edit_issue(issue.id, summary="Checkout fails on Safari")
    deliver(client, fake.webhook_body("jira:issue_updated", issue.id))

    replayed = deliver(client, old)

    assert replayed["outcome"] == "duplicate"
    [(revision, payload, _)] = stored(store, issue_key(issue))
    assert (revision, payload["title"]) == (1, "Checkout fails on Safari")


def test_deletions_pushed_are_tombstones_of_the_issue_with_its_comments_and_of_a_comment(
    client: TestClient,
    services: Services,
    fake: FakeJira,
    store: Store,
    issue: FakeJiraIssue,
    comment: FakeJiraComment,
) -> None:
    other = fake.add_issue("ENG", "Search is slow")
    other_comment = fake.add_comment(other.id, "Since 4.1")
    services.run_sync(services.connector("jira"))
    issue_gone = fake.webhook_body("jira:issue_deleted", issue.id)
    comment_gone = fake.webhook_body("comment_deleted", other.id, comment_id=other_comment.id)
    fake.delete_issue(issue.id)
    fake.delete_comment(other.id, other_comment.id)

    answers = [deliver(client, issue_gone), deliver(client, comment_gone)]

    assert [answer["outcome"] for answer in answers] == ["revised", "revised"]
    for key in (issue_key(issue), comment_key(issue, comment), comment_key(other, other_comment)):
        [(revision, _, deleted_at)] = stored(store, key)
        assert (revision, deleted_at is not None) == (2, True)
    [(_, _, deleted_at)] = stored(store, issue_key(other))
    assert deleted_at is None


def test_a_deletion_pushed_is_not_undone_by_an_older_re_read_ingested_after_it(
    client: TestClient,
    services: Services,
    fake: FakeJira,
    store: Store,
    issue: FakeJiraIssue,
    comment: FakeJiraComment,
) -> None:
    config = services.connector("jira")
    services.run_sync(config)
    # A re-read that reads the issue and its comment before the deletion, ingested after.
    read_before = read_now(services, config, Window(None, NOW))
    body = fake.webhook_body("jira:issue_deleted", issue.id)
    fake.delete_issue(issue.id)

    gone = deliver(client, body)
    late = services.ingest.ingest(config.tenant, read_before)

    assert gone["outcome"] == "revised"
    assert [o.status for o in late] == [IngestStatus.DUPLICATE] * 2
    for key in (issue_key(issue), comment_key(issue, comment)):
        [(_, _, deleted_at)] = stored(store, key)
        assert deleted_at is not None, key


def test_a_delivery_whose_issue_cannot_be_read_back_is_left_to_the_re_read(
    client: TestClient,
    services: Services,
    fake: FakeJira,
    store: Store,
    issue: FakeJiraIssue,
) -> None:
    fake.script_rate_limit(times=1)

    [answer], run = push_then_re_read(
        client, services, fake.webhook_body("jira:issue_created", issue.id)
    )

    assert answer["outcome"] == "ignored"
    assert run.created == 1
    assert every_key(store) == [issue_key(issue)]


def test_events_not_read_are_acknowledged_and_store_nothing(
    client: TestClient, store: Store, fake: FakeJira, issue: FakeJiraIssue
) -> None:
    worklog = deliver(client, b'{"timestamp": 1525698237764, "webhookEvent": "worklog_created"}')
    sprint = deliver(client, b'{"timestamp": 1525698237764, "webhookEvent": "sprint_started"}')

    assert (worklog["outcome"], sprint["outcome"]) == ("ignored", "ignored")
    assert every_key(store) == []


def test_refusals_store_nothing_and_are_counted(
    client: TestClient, services: Services, fake: FakeJira, store: Store, issue: FakeJiraIssue
) -> None:
    body = fake.webhook_body("jira:issue_created", issue.id)
    good = signed(body)
    unsigned = {k: v for k, v in good.items() if k != "X-Hub-Signature"}
    forged = signed(body, secret="guess")
    other_project = body.replace(b'"key":"ENG"', b'"key":"OPS"')
    assert other_project != body
    no_issue = b'{"timestamp": 1525698237764, "webhookEvent": "jira:issue_created"}'

    outcomes = [
        refused(client, "/v1/webhooks/jira", body, unsigned, 401),
        refused(client, "/v1/webhooks/jira", body, forged, 401),
        refused(client, "/v1/webhooks/jira", body + b" ", good, 401),  # changed after signing
        refused(client, "/v1/webhooks/jira", b"{not json", signed(b"{not json"), 400),
        refused(client, "/v1/webhooks/jira", no_issue, signed(no_issue), 400),
        refused(client, "/v1/webhooks/jira", other_project, signed(other_project), 422),
        refused(client, "/v1/webhooks/nobody", body, good, 404),
        refused(client, "/v1/webhooks/unhooked", body, good, 404),
    ]

    assert outcomes == [
        "unsigned",
        "bad_signature",
        "bad_signature",
        "malformed",
        "malformed",
        "unprocessable",
        "not_found",
        "not_found",
    ]
    assert every_key(store) == []
    assert counted(services, "jira", "bad_signature") == 2
    assert counted(services, "jira", "unprocessable") == 1
