"""A deletion pushed through ``POST /v1/webhooks/{name}`` leaves the agent's bundle at
the next compile (issue #33): the record's facts are in ``POST /v1/context`` after the
compile that follows its delivery, and gone after the compile that follows its
deletion, while what other records say stays. Over the API, on the test's store."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.slack.fake_api import FakeSlack
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK

from .webhook_support import accepted

T0 = datetime(2023, 11, 1, tzinfo=UTC)
NOW = datetime(2023, 11, 15, tzinfo=UTC)
SECRET = "pushed-then-deleted"
DELETED_FACT = "Invoice 1234 is charged twice"
KEPT_FACT = "We refund within 30 days of purchase"


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0) as server:
        yield server


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    with FakeSlack(token="xoxb-test") as server:
        server.add_channel("C1", "billing")
        yield server


@pytest.fixture
def client(store: Store, github: FakeGitHub, slack: FakeSlack) -> Iterator[TestClient]:
    common = {"start": T0.isoformat(), "retry": {"max_attempts": 1}, "webhook": {"secret": SECRET}}
    settings = Settings.model_validate(
        {
            "store": str(store.engine.url),
            "connectors": [
                {
                    **common,
                    "name": "gh",
                    "type": "github",
                    "repo": "acme/api",
                    "token": "t",
                    "base_url": github.base_url,
                    "subject": "repo:{repository}",
                    "streams": ["issues", "issue_comments"],
                },
                {
                    **common,
                    "name": "sl",
                    "type": "slack",
                    "token": "xoxb-test",
                    "channels": ["C1"],
                    "base_url": slack.base_url + "/api",
                    "subject": "slack:{channel}",
                },
            ],
        }
    )
    services = Services(settings, store, FakeClock(NOW))
    with TestClient(create_app(services), base_url=LOOPBACK) as client:
        yield client


def github_delivery(client: TestClient, event: str, body: bytes) -> str:
    # https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "Content-Type": "application/json",
    }
    return str(accepted(client, "/v1/webhooks/gh", body, headers)["outcome"])


def slack_delivery(client: TestClient, body: bytes) -> str:
    # https://api.slack.com/authentication/verifying-requests-from-slack
    stamp = str(int(NOW.timestamp()))
    digest = hmac.new(SECRET.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256)
    headers = {
        "X-Slack-Signature": f"v0={digest.hexdigest()}",
        "X-Slack-Request-Timestamp": stamp,
        "Content-Type": "application/json",
    }
    return str(accepted(client, "/v1/webhooks/sl", body, headers)["outcome"])


def context_after_compile(client: TestClient, subject_id: str) -> str:
    """The subject's bundle text after a compile of what is new."""
    compiled = client.post("/v1/memories/compile", json={"subject_id": subject_id})
    assert compiled.status_code == 200, compiled.text
    context = client.post(
        "/v1/context", json={"subject_id": subject_id, "task": "billing", "max_tokens": 4000}
    )
    assert context.status_code == 200, context.text
    return str(context.json()["assembled_context"])


def test_an_issue_deleted_by_a_push_leaves_the_bundle_with_its_comments(
    client: TestClient, github: FakeGitHub
) -> None:
    github.add_issue("acme", "api", 1, "Billing bug", body=DELETED_FACT)
    github.add_issue("acme", "api", 2, "Refund policy", body=KEPT_FACT)
    comment = github.add_comment("acme", "api", 1, "Customer 77 is on the annual plan")
    pushed = [
        github_delivery(
            client, "issues", github.webhook_body("issues", "opened", "acme", "api", 1)
        ),
        github_delivery(
            client, "issues", github.webhook_body("issues", "opened", "acme", "api", 2)
        ),
        github_delivery(
            client,
            "issue_comment",
            github.webhook_body(
                "issue_comment", "created", "acme", "api", 1, comment_id=comment.id
            ),
        ),
    ]
    before = context_after_compile(client, "repo:acme/api")
    deletion = github.webhook_body("issues", "deleted", "acme", "api", 1)
    github.delete_issue("acme", "api", 1)

    deleted = github_delivery(client, "issues", deletion)
    after = context_after_compile(client, "repo:acme/api")

    assert pushed == ["stored"] * 3
    assert deleted == "revised"
    assert DELETED_FACT in before
    assert "annual plan" in before
    assert DELETED_FACT not in after
    assert "annual plan" not in after
    assert KEPT_FACT in after


def test_a_message_deleted_by_a_push_leaves_the_bundle(
    client: TestClient, slack: FakeSlack
) -> None:
    deleted_message = slack.post_message("C1", DELETED_FACT)
    kept_message = slack.post_message("C1", KEPT_FACT)
    pushed = [
        slack_delivery(client, slack.event_body("C1", deleted_message.ts)),
        slack_delivery(client, slack.event_body("C1", kept_message.ts)),
    ]
    before = context_after_compile(client, "slack:C1")

    deleted = slack_delivery(client, slack.event_body("C1", deleted_message.ts, "message_deleted"))
    after = context_after_compile(client, "slack:C1")

    assert pushed == ["stored", "stored"]
    assert deleted == "revised"
    assert DELETED_FACT in before
    assert DELETED_FACT not in after
    assert KEPT_FACT in after
