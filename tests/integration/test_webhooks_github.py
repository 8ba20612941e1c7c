"""GitHub webhook deliveries through ``POST /v1/webhooks/{name}`` into a real store
(SQLite or PostgreSQL), beside the scheduled re-read of the same repository from
FakeGitHub: one episode per record whichever comes first, and every refusal stores
nothing and is counted."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.connectors import Window
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.episode import IngestStatus
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.reading.labels import Labels
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK

from .webhook_support import accepted, counted, every_key, read_now, refused, stored

T0 = datetime(2024, 3, 1, tzinfo=UTC)
NOW = datetime(2024, 6, 1, tzinfo=UTC)
SECRET = "It's a Secret to Everybody"
ISSUE_KEY = "github:acme:api:issue:1:opened"
MAX_BODY = 32 * 1024  # a GitHub issue delivery is some 6 KiB


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0) as server:
        server.add_issue("acme", "api", 1, "Webhooks drop retries", body="Seen twice.")
        yield server


@pytest.fixture
def services(store: Store, fake: FakeGitHub, tmp_path: Path) -> Services:
    github = {
        "type": "github",
        "repo": "acme/api",
        "token": "t",
        "base_url": fake.base_url,
        "subject": "repo:{repository}",
        "streams": ["issues", "issue_comments"],
        "start": T0.isoformat(),
        "retry": {"max_attempts": 1},
    }
    settings = Settings.model_validate(
        {
            "store": str(store.engine.url),
            "api": {"max_body_bytes": MAX_BODY},
            "connectors": [
                {
                    **github,
                    "name": "gh",
                    "webhook": {"secret": SECRET},
                    "labels": [{"when": {"payload.title": "Webhooks*"}, "add": ["internal"]}],
                },
                {**github, "name": "unhooked"},
                {
                    **github,
                    "name": "throttled",
                    "webhook": {"secret": SECRET, "rate_limit": 0.5, "burst": 2},
                },
            ],
        }
    )
    return Services(settings, store, FakeClock(NOW))


@pytest.fixture
def client(services: Services) -> TestClient:
    return TestClient(create_app(services), base_url=LOOPBACK)


def signed(event: str, body: bytes, *, secret: str = SECRET) -> dict[str, str]:
    """The headers GitHub sends with a delivery: https://docs.github.com/en/webhooks/
    using-webhooks/validating-webhook-deliveries (sha256= hex HMAC of the raw body)."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "Content-Type": "application/json",
    }


def deliver(client: TestClient, event: str, body: bytes, **headers: str) -> dict[str, Any]:
    """The answer of connector ``gh`` to ``body`` delivered as ``event``, taken (200)."""
    return accepted(client, "/v1/webhooks/gh", body, signed(event, body) | headers)


def test_an_issue_pushed_then_redelivered_then_re_read_is_one_episode(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    body = fake.webhook_body("issues", "opened", "acme", "api", 1)
    headers = signed("issues", body)

    first = client.post("/v1/webhooks/gh", content=body, headers=headers).json()
    again = client.post("/v1/webhooks/gh", content=body, headers=headers).json()
    # Another delivery id (a redelivery GitHub made anew): only the key recognises it.
    other_id = deliver(client, "issues", body)
    run = services.run_sync(services.connector("gh"))

    assert first["outcome"] == "stored"
    assert (again["outcome"], again["episodes"]) == ("duplicate", [])
    assert (other_id["outcome"], len(other_id["episodes"])) == ("duplicate", 1)
    assert (run.created, run.revised) == (0, 0)
    [(revision, payload, deleted_at)] = stored(store, ISSUE_KEY)
    assert (revision, deleted_at) == (1, None)
    assert payload["title"] == "Webhooks drop retries"
    assert counted(services, "gh", "stored") == 1
    assert counted(services, "gh", "duplicate") == 2


def test_a_re_read_first_then_the_pushed_edit_and_comment_are_one_revision_each(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    services.run_sync(services.connector("gh"))
    fake.edit_issue("acme", "api", 1, title="Webhooks drop retries on 429")
    comment = fake.add_comment("acme", "api", 1, "Reproduced on staging.")

    edited = deliver(client, "issues", fake.webhook_body("issues", "edited", "acme", "api", 1))
    commented = deliver(
        client,
        "issue_comment",
        fake.webhook_body("issue_comment", "created", "acme", "api", 1, comment_id=comment.id),
    )
    run = services.run_sync(services.connector("gh"))

    assert (edited["outcome"], commented["outcome"]) == ("revised", "stored")
    assert (run.created, run.revised) == (0, 0)
    [(revision, payload, _)] = stored(store, ISSUE_KEY)
    assert (revision, payload["title"]) == (2, "Webhooks drop retries on 429")
    assert every_key(store) == [
        f"github:acme:api:issue:1:comment:{comment.id}",
        ISSUE_KEY,
    ]


def test_an_edit_pushed_is_not_undone_by_an_older_re_read_ingested_after_it(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    services.run_sync(services.connector("gh"))
    config = services.connector("gh")
    # A re-read that reads the issue now, before the edit, and is ingested after it.
    read_before = read_now(services, config, Window(start=T0, end=NOW))
    fake.edit_issue("acme", "api", 1, title="Webhooks drop retries on 429")

    pushed = deliver(client, "issues", fake.webhook_body("issues", "edited", "acme", "api", 1))
    [late] = services.ingest.ingest(config.tenant, read_before)

    assert pushed["outcome"] == "revised"
    assert late.status is IngestStatus.DUPLICATE  # older than what is stored: nothing
    [(revision, payload, _)] = stored(store, ISSUE_KEY)
    assert (revision, payload["title"]) == (2, "Webhooks drop retries on 429")


def test_a_deletion_pushed_is_a_tombstone_of_the_issue_and_its_comments(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    comment = fake.add_comment("acme", "api", 1, "Reproduced on staging.")
    services.run_sync(services.connector("gh"))
    body = fake.webhook_body("issues", "deleted", "acme", "api", 1)
    fake.delete_issue("acme", "api", 1)

    answer = deliver(client, "issues", body)

    assert answer["outcome"] == "revised"
    for key in (ISSUE_KEY, f"github:acme:api:issue:1:comment:{comment.id}"):
        [(revision, _, deleted_at)] = stored(store, key)
        assert (revision, deleted_at is not None) == (2, True)


def test_a_deletion_pushed_is_not_undone_by_an_older_re_read_ingested_after_it(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    comment = fake.add_comment("acme", "api", 1, "Reproduced on staging.")
    config = services.connector("gh")
    services.run_sync(config)
    # A re-read that reads the issue and its comment before the deletion, ingested after.
    read_before = read_now(services, config, Window(start=T0, end=NOW))
    body = fake.webhook_body("issues", "deleted", "acme", "api", 1)
    fake.delete_issue("acme", "api", 1)

    gone = deliver(client, "issues", body)
    late = services.ingest.ingest(config.tenant, read_before)

    assert gone["outcome"] == "revised"
    comment_key = f"github:acme:api:issue:1:comment:{comment.id}"
    assert [o.status for o in late] == [IngestStatus.DUPLICATE] * len(read_before)
    for key in (ISSUE_KEY, comment_key):
        [(_, _, deleted_at)] = stored(store, key)
        assert deleted_at is not None, key


def test_a_ping_and_events_not_read_are_acknowledged_and_store_nothing(
    client: TestClient, services: Services, store: Store
) -> None:
    ping = deliver(client, "ping", b'{"zen": "Design for failure.", "hook_id": 1}')
    starred = deliver(client, "star", b'{"action": "created"}')

    assert (ping["outcome"], starred["outcome"]) == ("ignored", "ignored")
    assert every_key(store) == []


def test_refusals_store_nothing_and_are_counted(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    body = fake.webhook_body("issues", "opened", "acme", "api", 1)
    good = signed("issues", body)
    unsigned = {k: v for k, v in good.items() if k != "X-Hub-Signature-256"}
    forged = signed("issues", body, secret="guess")
    other_repo = body.replace(b'"full_name":"acme/api"', b'"full_name":"acme/web"')
    too_big = b'{"action":"opened","padding":"' + b"x" * MAX_BODY + b'"}'
    no_issue = b'{"action": "opened", "repository": {"full_name": "acme/api"}}'

    outcomes = [
        refused(client, "/v1/webhooks/gh", body, unsigned, 401),
        refused(client, "/v1/webhooks/gh", body, forged, 401),
        refused(client, "/v1/webhooks/gh", body + b" ", good, 401),  # body changed after signing
        refused(client, "/v1/webhooks/gh", b"{not json", signed("issues", b"{not json"), 400),
        refused(client, "/v1/webhooks/gh", no_issue, signed("issues", no_issue), 400),
        refused(client, "/v1/webhooks/gh", other_repo, signed("issues", other_repo), 422),
        refused(client, "/v1/webhooks/nobody", body, good, 404),
        refused(client, "/v1/webhooks/unhooked", body, good, 404),
        refused(client, "/v1/webhooks/gh", too_big, signed("issues", too_big), 413),
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
        "payload_too_large",
    ]
    assert every_key(store) == []
    assert counted(services, "gh", "bad_signature") == 2
    assert counted(services, "", "not_found") == 2
    assert counted(services, "gh", "too_large") == 1


def test_a_body_over_the_limit_is_counted_once_however_it_arrives(
    client: TestClient, services: Services
) -> None:
    too_big = b'{"padding":"' + b"x" * MAX_BODY + b'"}'

    def chunks() -> Iterator[bytes]:
        # No Content-Length: the limit is found while the route reads the body.
        for start in range(0, len(too_big), 4096):
            yield too_big[start : start + 4096]

    declared = client.post("/v1/webhooks/gh", content=too_big, headers=signed("issues", too_big))
    streamed = client.post("/v1/webhooks/gh", content=chunks(), headers=signed("issues", too_big))
    unknown = client.post("/v1/webhooks/nobody", content=too_big)
    elsewhere = client.post("/v1/episodes", content=too_big)

    statuses = [r.status_code for r in (declared, streamed, unknown, elsewhere)]
    assert statuses == [413, 413, 413, 413]
    assert "content-length" not in streamed.request.headers
    assert counted(services, "gh", "too_large") == 2
    assert counted(services, "", "too_large") == 1  # only the webhook route is counted


def test_deliveries_over_the_connectors_rate_are_refused_429_and_store_nothing(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    ping = b'{"zen": "Keep it logically awesome.", "hook_id": 1}'
    body = fake.webhook_body("issues", "opened", "acme", "api", 1)
    path = "/v1/webhooks/throttled"
    burst = [client.post(path, content=ping, headers=signed("ping", ping)) for _ in range(2)]

    over = client.post(path, content=body, headers=signed("issues", body))
    forged = client.post(path, content=body, headers=signed("issues", body, secret="guess"))
    other = client.post("/v1/webhooks/gh", content=body, headers=signed("issues", body))

    assert [r.status_code for r in burst] == [200, 200]
    assert (over.status_code, over.headers["retry-after"]) == (429, "2")  # 1 token at 0.5/s
    assert over.json()["error"]["code"] == "rate_limited"
    assert forged.status_code == 429  # checked before the signature: a flood costs nothing
    assert other.status_code == 200  # another connector's bucket
    assert counted(services, "throttled", "rate_limited") == 2
    assert isinstance(services.clock, FakeClock)
    services.clock.advance(timedelta(seconds=2))
    assert client.post(path, content=body, headers=signed("issues", body)).status_code == 200


def test_a_delivery_id_is_forgotten_after_its_time_and_the_key_still_holds(
    client: TestClient, services: Services, fake: FakeGitHub
) -> None:
    body = fake.webhook_body("issues", "opened", "acme", "api", 1)
    headers = signed("issues", body)
    client.post("/v1/webhooks/gh", content=body, headers=headers)
    assert isinstance(services.clock, FakeClock)
    services.clock.advance(timedelta(hours=2))

    late = client.post("/v1/webhooks/gh", content=body, headers=headers).json()

    # Past the delivery memory, ingest looked the key up: one episode, unchanged.
    assert (late["outcome"], len(late["episodes"])) == ("duplicate", 1)


def test_a_pushed_record_carries_the_labels_its_connector_rules_give_a_re_read(
    client: TestClient, services: Services, fake: FakeGitHub, store: Store
) -> None:
    body = fake.webhook_body("issues", "opened", "acme", "api", 1)
    assert deliver(client, "issues", body)["outcome"] == "stored"
    labels = Labels(store, FakeClock(NOW))
    pushed = labels.of_subject("default", "repo:acme/api").episodes
    assert list(pushed.values()) == [frozenset({"internal"})]

    run = services.run_sync(services.connector("gh"))

    assert (run.created, run.revised) == (0, 0)
    assert labels.of_subject("default", "repo:acme/api").episodes == pushed
