"""The webhook route fuzzed for every connector type that takes webhooks (issue #33).

Two runs per type, on the test's store (SQLite or PostgreSQL):

- schemathesis generates bodies from the route's own OpenAPI operation; each is sent
  once signed as the vendor signs (so the receiver parses it, not just the 401 path)
  and once with a forged signature;
- hypothesis mutates deliveries the receiver stores (a record, an edit, a deletion;
  a field replaced by any JSON, dropped, or changed deeper down), signed, so the
  parsers meet near-valid input.

Never a 5xx or an undeclared answer; a refusal stores nothing. The types fuzzed must
be exactly the registry's types that declare ``webhooks``: a new receiver fails this
file until it is given a signer and a seed delivery below. Jira and Linear read a
pushed record back by id, so they read from FakeJira and FakeLinear on loopback.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import schemathesis
import sqlalchemy as sa
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core import NOT_SET
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from memsync.clock import FakeClock
from memsync.connectors.fake_http import load_fixture
from memsync.connectors.jira.fake_api import FakeJira
from memsync.connectors.linear.fake_api import FakeLinear
from memsync.connectors.registry import load_registry
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store, tables
from tests.helpers import LOOPBACK, build_app
from tests.unit.connectors.fixtures import load_fixture as load_test_fixture
from tests.unit.connectors.fixtures import zendesk_signed

NOW = datetime(2024, 6, 1, tzinfo=UTC)
SECRET = "fuzzed-but-signed"
FORGED = "not-the-secret"
LINEAR_TOKEN = "lin_api_fuzz"


def _github_headers(body: bytes, now: datetime, secret: str) -> dict[str, str]:
    # https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    # A body with a comment goes to the comment parser, the rest to the issue parser.
    event = "issue_comment" if b'"comment"' in body else "issues"
    return {"X-Hub-Signature-256": f"sha256={digest}", "X-GitHub-Event": event}


def _slack_headers(body: bytes, now: datetime, secret: str) -> dict[str, str]:
    # https://api.slack.com/authentication/verifying-requests-from-slack
    stamp = str(int(now.timestamp()))
    digest = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256)
    return {"X-Slack-Signature": f"v0={digest.hexdigest()}", "X-Slack-Request-Timestamp": stamp}


def _zendesk_headers(body: bytes, now: datetime, secret: str) -> dict[str, str]:
    # https://developer.zendesk.com/documentation/webhooks/verifying/; no invocation id,
    # for the reason the seeds have no event id.
    return zendesk_signed(body, now, secret, invocation_id=None)


def _jira_headers(body: bytes, now: datetime, secret: str) -> dict[str, str]:
    # https://developer.atlassian.com/cloud/jira/platform/webhooks/ ("Secure admin
    # webhooks"); no X-Atlassian-Webhook-Identifier, for the reason the Slack seeds
    # have no event_id.
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature": f"sha256={digest}"}


def _linear_headers(body: bytes, now: datetime, secret: str) -> dict[str, str]:
    # https://linear.app/developers/webhooks: the timestamp is in the (signed) body.
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"Linear-Signature": digest}


@dataclass(frozen=True)
class Sources:
    """The vendors' fakes a receiver reads back from, each holding one issue with one
    comment; nothing the fuzz sends changes them."""

    jira: FakeJira
    jira_issue: int
    jira_comment: int
    linear: FakeLinear
    linear_issue: str
    linear_comment: str


@pytest.fixture(scope="module")
def sources() -> Iterator[Sources]:
    with (
        FakeJira() as jira,
        FakeLinear(token=LINEAR_TOKEN, clock=FakeClock(NOW)) as linear,
    ):
        # Before NOW: a deletion is dated by its receipt, and must be after them.
        before = NOW - timedelta(days=1)
        jira_issue = jira.add_issue("ENG", "Checkout fails", "Safari only.", updated=before)
        jira_comment = jira.add_comment(jira_issue.id, "Reproduced on 17.2", at=before)
        linear.add_team("ENG")
        linear_issue = linear.add_issue("ENG", "Checkout times out", description="Big carts.")
        linear_comment = linear.add_comment(linear_issue.id, "Reproduced with 250 items.")
        yield Sources(
            jira, jira_issue.id, jira_comment.id, linear, linear_issue.id, linear_comment.id
        )


def _github_seeds(sources: Sources) -> list[dict[str, Any]]:
    """``issues.opened``, ``issue_comment.created`` and ``issues.deleted``, as
    https://docs.github.com/en/webhooks/webhook-events-and-payloads#issues shapes
    them, around the REST API's recorded issue and comment (fixtures README)."""
    issue = load_fixture("github", "issue_get.json")
    comment = load_fixture("github", "issue_comments_list.json")[0]
    repository = {"full_name": "octocat/Hello-World"}
    return [
        {"action": "opened", "issue": issue, "repository": repository},
        {"action": "created", "issue": issue, "comment": comment, "repository": repository},
        {"action": "deleted", "issue": issue, "repository": repository},
    ]


def _slack_seeds(sources: Sources) -> list[dict[str, Any]]:
    """A ``message``, its ``message_changed`` and its ``message_deleted``
    (https://api.slack.com/events/message and its subtypes' pages) in the
    ``event_callback`` envelope, around the recorded message (fixtures README)."""
    message = load_fixture("slack", "conversations_history.json")["messages"][0]
    later = "1512085999.000100"
    edited = {**message, "text": "edited", "edited": {"user": "U012AB3CDE", "ts": later}}
    events = [
        {**message, "channel": "C1"},
        {"type": "message", "subtype": "message_changed", "channel": "C1", "message": edited},
        {
            "type": "message",
            "subtype": "message_deleted",
            "channel": "C1",
            "deleted_ts": message["ts"],
            "ts": later,
            "event_ts": later,
        },
    ]
    # No event_id: the delivery-id memory would answer every later mutation of a seed
    # a duplicate, and ingest would never see it.
    return [
        {"type": "event_callback", "team_id": "T0001", "event_time": 1512085999, "event": event}
        for event in events
    ]


def _zendesk_seeds(sources: Sources) -> list[dict[str, Any]]:
    """Zendesk's documented ``ticket.status_changed`` and ``ticket.soft_deleted`` events
    (tests/fixtures/zendesk/README.md). No event ``id``: it would name the delivery, and
    the delivery-id memory would answer every mutation of a seed a duplicate."""
    return [
        {
            key: value
            for key, value in load_test_fixture("zendesk", f"webhooks/{name}.json").items()
            if key != "id"
        }
        for name in ("ticket_status_changed", "ticket_soft_deleted")
    ]


def _jira_seeds(sources: Sources) -> list[dict[str, Any]]:
    """An issue created, a comment deleted, the issue deleted: Atlassian's example
    callback as FakeJira renders it for its issue (fixtures README)."""
    jira, issue = sources.jira, sources.jira_issue
    bodies = [
        jira.webhook_body("jira:issue_created", issue),
        jira.webhook_body("comment_deleted", issue, comment_id=sources.jira_comment),
        jira.webhook_body("jira:issue_deleted", issue),
    ]
    return [json.loads(body) for body in bodies]


def _linear_seeds(sources: Sources) -> list[dict[str, Any]]:
    """Linear's ``EntityWebhookPayload`` (https://linear.app/developers/webhooks) as
    FakeLinear renders it: the issue and its comment created, then removed."""
    linear = sources.linear
    bodies = [
        linear.webhook_body("Issue", "create", sources.linear_issue),
        linear.webhook_body("Comment", "create", sources.linear_comment),
        linear.webhook_body("Comment", "remove", sources.linear_comment),
        linear.webhook_body("Issue", "remove", sources.linear_issue),
    ]
    return [json.loads(body) for body in bodies]


@dataclass(frozen=True)
class Vendor:
    """How to configure a connector of the type, sign a body as its vendor does, and
    deliveries its receiver stores, in an order that stores each. ``refused`` are the
    answers a signed but mutated delivery may get: 400 and 422, and 401 where the
    timestamp checked is inside the signed body (a mutation can make it stale)."""

    config: Callable[[Sources], dict[str, Any]]
    headers: Callable[[bytes, datetime, str], dict[str, str]]
    seeds: Callable[[Sources], list[dict[str, Any]]]
    refused: Sequence[int] = (400, 422)


VENDORS: dict[str, Vendor] = {
    "github": Vendor(
        lambda _: {"repo": "octocat/Hello-World", "token": "t", "subject": "repo:{repository}"},
        _github_headers,
        _github_seeds,
    ),
    "slack": Vendor(
        # Channel ids: a delivery then never asks Slack to resolve a name.
        lambda _: {"token": "xoxb-fuzz", "channels": ["C1"], "subject": "slack:{channel}"},
        _slack_headers,
        _slack_seeds,
    ),
    "zendesk": Vendor(
        lambda _: {
            "subdomain": "acme",
            "email": "agent@acme.test",
            "token": "t0ken",
            "subject": "org:{organization_id}",
        },
        _zendesk_headers,
        _zendesk_seeds,
    ),
    "jira": Vendor(
        lambda sources: {
            "site": "acme",
            "base_url": sources.jira.base_url,
            "email": "bot@acme.example",
            "token": "jira-token",
            "projects": ["ENG"],
            "subject": "project:{project_key}",
            "retry": {"max_attempts": 1},
        },
        _jira_headers,
        _jira_seeds,
    ),
    "linear": Vendor(
        lambda sources: {
            "token": LINEAR_TOKEN,
            "teams": ["ENG"],
            "base_url": sources.linear.base_url,
            "subject": "team:{team_key}",
            "retry": {"max_attempts": 1},
        },
        _linear_headers,
        _linear_seeds,
        refused=(400, 401, 422),
    ),
}


def test_every_type_that_takes_webhooks_is_fuzzed() -> None:
    takes_webhooks = {
        info.type for info in load_registry() if getattr(info.declared, "webhooks", "")
    }
    assert set(VENDORS) == takes_webhooks


@pytest.fixture
def services(store: Store, sources: Sources) -> Services:
    connectors = [
        {
            **vendor.config(sources),
            "name": connector_type,
            "type": connector_type,
            "start": "2024-01-01T00:00:00+00:00",
            # Unlimited here: the fuzz is after the receivers, not the rate limit.
            "webhook": {"secret": SECRET, "rate_limit": 1e6, "burst": 1_000_000},
        }
        for connector_type, vendor in VENDORS.items()
    ]
    settings = Settings.model_validate({"store": str(store.engine.url), "connectors": connectors})
    return Services(settings, store, FakeClock(NOW))


@pytest.fixture
def client(services: Services) -> Iterator[TestClient]:
    with TestClient(create_app(services), base_url=LOOPBACK) as client:
        yield client


def episode_count(store: Store) -> int:
    with store.engine.connect() as connection:
        return int(
            connection.execute(sa.select(sa.func.count()).select_from(tables.episodes)).scalar_one()
        )


def post(client: TestClient, connector_type: str, body: bytes, secret: str) -> httpx.Response:
    """``body`` delivered to the type's connector, signed with ``secret``."""
    headers = VENDORS[connector_type].headers(body, NOW, secret)
    return client.post(
        f"/v1/webhooks/{connector_type}",
        content=body,
        headers={**headers, "Content-Type": "application/json"},
    )


def raw(generated: object) -> bytes:
    """The bytes of a generated body: its JSON, or as generated when schemathesis sends
    no body or one that is not JSON (its coverage phase does both)."""
    if generated is NOT_SET:
        return b""
    if isinstance(generated, bytes):
        return generated
    if isinstance(generated, str):
        return generated.encode("utf-8", "surrogatepass")
    return json.dumps(generated).encode()


def _unconnected_app() -> FastAPI:
    # The document does not depend on the store or the connectors.
    return build_app(Store.from_url("sqlite://"))


schema = schemathesis.openapi.from_asgi(
    "/openapi.json", _unconnected_app(), headers={"host": "127.0.0.1"}
).include(path="/v1/webhooks/{connector_name}", method="POST")

FUZZ = settings(
    max_examples=25,
    derandomize=True,  # the same bodies on both databases
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)


@pytest.mark.parametrize("connector_type", sorted(VENDORS))
@schema.parametrize()
@FUZZ
def test_generated_bodies_signed_or_forged_get_no_5xx_and_refusals_store_nothing(
    case: schemathesis.Case, connector_type: str, client: TestClient, store: Store
) -> None:
    body = raw(case.body)
    before = episode_count(store)

    signed = post(client, connector_type, body, SECRET)
    after_signed = episode_count(store)
    forged = post(client, connector_type, body, FORGED)

    checks = [not_a_server_error, response_schema_conformance, status_code_conformance]
    case.validate_response(signed, checks=checks)
    case.validate_response(forged, checks=checks)
    if signed.status_code != 200:
        assert after_signed == before, signed.text
    assert forged.status_code == 401
    assert episode_count(store) == after_signed


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def mutation_of(draw: st.DrawFn, value: Any) -> Any:
    """``value`` with one part replaced by any JSON, dropped (an object's key), or
    changed deeper down."""
    if isinstance(value, dict) and value:
        key = draw(st.sampled_from(sorted(value)))
        how = draw(st.sampled_from(["deeper", "replace", "drop"]))
        changed = dict(value)
        if how == "drop":
            del changed[key]
        else:
            changed[key] = draw(mutation_of(value[key]) if how == "deeper" else JSON_VALUES)
        return changed
    if isinstance(value, list) and value:
        index = draw(st.integers(min_value=0, max_value=len(value) - 1))
        return [*value[:index], draw(mutation_of(value[index])), *value[index + 1 :]]
    return draw(JSON_VALUES)


@pytest.mark.parametrize("connector_type", sorted(VENDORS))
def test_the_seed_deliveries_are_stored(
    connector_type: str, client: TestClient, store: Store, sources: Sources
) -> None:
    # Else the mutations below would be mutations of refusals, and prove little.
    outcomes = [
        post(client, connector_type, json.dumps(seed).encode(), SECRET).json()["outcome"]
        for seed in VENDORS[connector_type].seeds(sources)
    ]

    assert outcomes[0] == "stored"
    assert set(outcomes[1:]) <= {"stored", "revised"}, outcomes
    assert episode_count(store) >= 1


@pytest.mark.parametrize("connector_type", sorted(VENDORS))
@FUZZ
@given(data=st.data())
def test_mutated_deliveries_signed_get_no_5xx_and_refusals_store_nothing(
    data: st.DataObject, connector_type: str, client: TestClient, store: Store, sources: Sources
) -> None:
    vendor = VENDORS[connector_type]
    seed = data.draw(st.sampled_from(vendor.seeds(sources)))
    body = json.dumps(data.draw(mutation_of(seed)), allow_nan=False).encode()
    before = episode_count(store)

    status = post(client, connector_type, body, SECRET).status_code

    assert status == 200 or status in vendor.refused, body
    if status != 200:
        assert episode_count(store) == before, body
