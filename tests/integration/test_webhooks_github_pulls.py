"""GitHub's pull request deliveries (``pull_request``, ``pull_request_review``,
``pull_request_review_comment``) through ``POST /v1/webhooks/{name}`` into a real store
(SQLite or PostgreSQL), beside the scheduled re-read of the same pull request from
FakeGitHub: one episode per record whichever comes first, a pushed change is not undone
by an older re-read ingested after it, a deleted review comment is a tombstone, and a
refusal stores nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.connectors import Window
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.episode import IngestStatus
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK
from tests.integration.test_webhooks_github import SECRET, deliver, signed

from .webhook_support import counted, every_key, read_now, refused, stored

T0 = datetime(2024, 3, 1, tzinfo=UTC)
NOW = datetime(2024, 6, 1, tzinfo=UTC)
PULL = "github:acme:api:pull:7"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0) as server:
        server.add_issue("acme", "api", 7, "Honour Retry-After", "Fixes #1.", is_pull_request=True)
        yield server


@pytest.fixture
def services(store: Store, fake: FakeGitHub) -> Services:
    settings = Settings.model_validate(
        {
            "store": str(store.engine.url),
            "connectors": [
                {
                    "name": "gh",
                    "type": "github",
                    "repo": "acme/api",
                    "token": "t",
                    "base_url": fake.base_url,
                    "subject": "repo:{repository}",
                    "streams": ["pull_requests", "reviews", "review_comments"],
                    "start": T0.isoformat(),
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


def test_a_closed_pull_its_review_and_review_comment_pushed_redelivered_and_re_read_are_one_each(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    review = fake.add_review("acme", "api", 7, "APPROVED", "lgtm")
    comment = fake.add_review_comment("acme", "api", 7, "This sleeps forever.")
    # Closed unmerged: the issues list the re-read reads says state_reason "completed",
    # a pull request object (the delivery) has no state_reason at all.
    fake.edit_issue("acme", "api", 7, state="closed")
    bodies = [
        ("pull_request", fake.webhook_body("pull_request", "closed", "acme", "api", 7)),
        (
            "pull_request_review",
            fake.webhook_body(
                "pull_request_review", "submitted", "acme", "api", 7, review_id=review.id
            ),
        ),
        (
            "pull_request_review_comment",
            fake.webhook_body(
                "pull_request_review_comment", "created", "acme", "api", 7, comment_id=comment.id
            ),
        ),
    ]

    first = [deliver(client, event, body)["outcome"] for event, body in bodies]
    again = [deliver(client, event, body)["outcome"] for event, body in bodies]
    run = services.run_sync(services.connector("gh"))

    assert first == ["stored", "stored", "stored"]
    assert again == ["duplicate", "duplicate", "duplicate"]
    assert (run.created, run.revised) == (0, 0)
    assert every_key(store) == [
        f"{PULL}:opened",
        f"{PULL}:review:{review.id}",
        f"{PULL}:review_comment:{comment.id}",
    ]
    [(revision, payload, _)] = stored(store, f"{PULL}:opened")
    assert (revision, payload["state"], payload["state_reason"]) == (1, "closed", None)
    [(_, review_payload, _)] = stored(store, f"{PULL}:review:{review.id}")
    assert review_payload["state"] == "APPROVED"
    assert counted(services, "gh", "stored") == 3


def test_a_merge_a_dismissal_and_an_edit_pushed_are_not_undone_by_an_older_re_read_after_them(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    review = fake.add_review("acme", "api", 7, "APPROVED", "lgtm")
    comment = fake.add_review_comment("acme", "api", 7, "This sleeps forever.")
    services.run_sync(services.connector("gh"))
    config = services.connector("gh")
    # A re-read that reads before the changes and is ingested after their deliveries.
    read_before = read_now(services, config, Window(start=T0, end=NOW))
    fake.merge_pull("acme", "api", 7)
    fake.edit_review_comment("acme", "api", comment.id, "This sleeps until the cap.")
    fake.edit_review("acme", "api", review.id, state="DISMISSED")

    pushed = [
        deliver(
            client, "pull_request", fake.webhook_body("pull_request", "closed", "acme", "api", 7)
        ),
        deliver(
            client,
            "pull_request_review_comment",
            fake.webhook_body(
                "pull_request_review_comment", "edited", "acme", "api", 7, comment_id=comment.id
            ),
        ),
        deliver(
            client,
            "pull_request_review",
            fake.webhook_body(
                "pull_request_review", "dismissed", "acme", "api", 7, review_id=review.id
            ),
        ),
    ]
    late = services.ingest.ingest(config.tenant, read_before)

    assert [answer["outcome"] for answer in pushed] == ["revised", "revised", "revised"]
    assert len(late) == 3
    assert {outcome.status for outcome in late} == {IngestStatus.DUPLICATE}
    [(revision, pull, _)] = stored(store, f"{PULL}:opened")
    assert (revision, pull["state"], pull["merged_at"] is not None) == (2, "closed", True)
    [(revision, edited, _)] = stored(store, f"{PULL}:review_comment:{comment.id}")
    assert (revision, edited["body"]) == (2, "This sleeps until the cap.")
    [(revision, dismissed, _)] = stored(store, f"{PULL}:review:{review.id}")
    assert (revision, dismissed["state"]) == (2, "DISMISSED")
    # And the re-read of the current state finds them all as pushed.
    run = services.run_sync(services.connector("gh"))
    assert (run.created, run.revised) == (0, 0)


def test_a_review_comment_deleted_pushed_is_a_tombstone_the_re_read_leaves_alone(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    comment = fake.add_review_comment("acme", "api", 7, "This sleeps forever.")
    services.run_sync(services.connector("gh"))
    body = fake.webhook_body(
        "pull_request_review_comment", "deleted", "acme", "api", 7, comment_id=comment.id
    )
    fake.delete_review_comment("acme", "api", comment.id)

    answer = deliver(client, "pull_request_review_comment", body)
    run = services.run_sync(services.connector("gh"))

    assert answer["outcome"] == "revised"
    [(revision, _, deleted_at)] = stored(store, f"{PULL}:review_comment:{comment.id}")
    assert (revision, deleted_at is not None) == (2, True)
    assert (run.created, run.revised) == (0, 0)
    [(_, _, pull_deleted_at)] = stored(store, f"{PULL}:opened")
    assert pull_deleted_at is None  # the comment's tombstone reaches no other key


def test_refused_pull_request_deliveries_store_nothing_and_are_counted(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    body = fake.webhook_body("pull_request", "opened", "acme", "api", 7)
    good = signed("pull_request", body)
    unsigned = {k: v for k, v in good.items() if k != "X-Hub-Signature-256"}
    forged = signed("pull_request", body, secret="guess")
    no_pull = b'{"action": "opened", "repository": {"full_name": "acme/api"}}'
    other_repo = body.replace(b'"full_name":"acme/api"', b'"full_name":"acme/web"')
    no_number = body.replace(b'"number":7,', b"")
    assert b'"number":7' not in no_number

    outcomes = [
        refused(client, "/v1/webhooks/gh", body, unsigned, 401),
        refused(client, "/v1/webhooks/gh", body, forged, 401),
        refused(client, "/v1/webhooks/gh", b"{not json", signed("pull_request", b"{not json"), 400),
        refused(client, "/v1/webhooks/gh", no_pull, signed("pull_request", no_pull), 400),
        refused(client, "/v1/webhooks/gh", other_repo, signed("pull_request", other_repo), 422),
        refused(client, "/v1/webhooks/gh", no_number, signed("pull_request", no_number), 422),
    ]

    assert outcomes == [
        "unsigned",
        "bad_signature",
        "malformed",
        "malformed",
        "unprocessable",
        "unprocessable",
    ]
    assert every_key(store) == []
    assert counted(services, "gh", "unprocessable") == 2
