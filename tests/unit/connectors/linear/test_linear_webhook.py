"""The Linear webhook receiver against FakeLinear (GraphQL on loopback): deliveries signed
as Linear signs them (https://linear.app/developers/webhooks) are read back into the very
records a re-read gives, removals become tombstones without a read-back, and every
delivery that is forged, replayed, malformed or cannot be read back is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memsync.clock import FakeClock
from memsync.connectors import Tombstone, Window
from memsync.connectors.http import HttpRecord
from memsync.connectors.linear import LinearConfig, LinearConnector
from memsync.connectors.linear.fake_api import FakeIssue, FakeLinear
from memsync.connectors.linear.webhook import LinearWebhookReceiver
from memsync.connectors.webhooks import Refusal, WebhookDelivery, WebhookRefused
from memsync.stopping import FakeSleeper
from tests.unit.connectors.fixtures import linear_signed

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
def connector(fake: FakeLinear, clock: FakeClock) -> Iterator[LinearConnector]:
    config = LinearConfig.model_validate(
        {
            "name": "eng-linear",
            "token": TOKEN,
            "base_url": fake.base_url,
            "teams": ["ENG"],
            "webhook": {"secret": SECRET},
            "retry": {"max_attempts": 4, "max_wait": "10m"},
        }
    )
    # A read-back never waits: a wait taken fails the test.
    reader = LinearConnector(config, sleeper=FakeSleeper(clock, max_waits=0), clock=clock)
    yield reader
    reader.close()


@pytest.fixture
def receiver(connector: LinearConnector) -> LinearWebhookReceiver:
    made = connector.webhook_receiver()
    assert isinstance(made, LinearWebhookReceiver)
    return made


@pytest.fixture
def issue(fake: FakeLinear) -> FakeIssue:
    return fake.add_issue("ENG", "Checkout times out", description="Carts over 200 items.")


def signed(body: bytes, *, secret: str = SECRET) -> dict[str, str]:
    """The headers Linear sends with ``body`` as delivery ``d-1`` of an Issue."""
    return linear_signed(body, secret, delivery="d-1")


def receive(
    receiver: LinearWebhookReceiver, body: bytes, now: datetime = NOW, **headers: str
) -> WebhookDelivery[HttpRecord]:
    return receiver.receive(signed(body) | headers, body, now)


def refusal(
    receiver: LinearWebhookReceiver,
    body: bytes,
    headers: dict[str, str] | None = None,
    now: datetime = NOW,
) -> Refusal:
    with pytest.raises(WebhookRefused) as refused:
        receiver.receive(signed(body) if headers is None else headers, body, now)
    assert str(refused.value)  # says why, for the vendor's delivery log
    return refused.value.refusal


def re_read(connector: LinearConnector) -> list[HttpRecord | Tombstone]:
    return [
        item
        for item in connector.fetch(Window(None, NOW + timedelta(days=1)), None)
        if isinstance(item, HttpRecord | Tombstone)
    ]


def with_body(body: bytes, **changes: Any) -> bytes:
    payload = json.loads(body)
    payload.update(changes)
    return json.dumps(payload).encode()


def test_a_pushed_issue_and_comment_are_the_records_a_re_read_gives(
    receiver: LinearWebhookReceiver,
    connector: LinearConnector,
    fake: FakeLinear,
    issue: FakeIssue,
) -> None:
    comment = fake.add_comment(issue.id, "Reproduced with 250 items.")

    pushed_issue = receive(receiver, fake.webhook_body("Issue", "create", issue.id))
    pushed_comment = receive(receiver, fake.webhook_body("Comment", "create", comment.id))

    assert pushed_issue.event == "Issue.create"
    assert pushed_issue.delivery_id == "d-1"
    drafts = [
        connector.to_episode(record) for record in (*pushed_issue.records, *pushed_comment.records)
    ]
    assert drafts == [connector.to_episode(item) for item in re_read(connector)]  # type: ignore[arg-type]


def test_an_update_is_read_back_as_the_record_is_now_not_as_data_says(
    receiver: LinearWebhookReceiver, fake: FakeLinear, clock: FakeClock, issue: FakeIssue
) -> None:
    body = fake.webhook_body("Issue", "update", issue.id)
    clock.advance(timedelta(seconds=10))  # edited again while the delivery was on its way
    fake.edit_issue(issue.id, title="Checkout times out on large carts")

    [record] = receive(receiver, body, clock.now()).records

    assert json.loads(body)["data"]["title"] == "Checkout times out"
    assert record.data["title"] == "Checkout times out on large carts"
    assert record.data["updatedAt"] == clock.now().isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


def test_a_removal_is_a_tombstone_built_from_data_without_a_read_back(
    receiver: LinearWebhookReceiver, connector: LinearConnector, fake: FakeLinear, issue: FakeIssue
) -> None:
    comment = fake.add_comment(issue.id, "Wrong issue, sorry.")
    [issue_record, comment_record] = re_read(connector)
    comment_removed = fake.webhook_body("Comment", "remove", comment.id)
    fake.delete_comment(comment.id)
    issue_removed = fake.webhook_body("Issue", "remove", issue.id)
    requests = fake.list_requests()

    removed = (
        receive(receiver, comment_removed).tombstones + receive(receiver, issue_removed).tombstones
    )

    # Dated by their receipt: no version read before it brings them back.
    assert removed == (
        Tombstone(connector.idempotency_key(comment_record), deleted_at=NOW),  # type: ignore[arg-type]
        Tombstone(connector.idempotency_key(issue_record), with_children=True, deleted_at=NOW),  # type: ignore[arg-type]
    )
    assert fake.list_requests() == requests


def test_an_update_of_an_archived_issue_or_of_a_comment_on_one_is_a_tombstone(
    receiver: LinearWebhookReceiver, connector: LinearConnector, fake: FakeLinear, issue: FakeIssue
) -> None:
    comment = fake.add_comment(issue.id, "Closing as duplicate.")
    [issue_record, comment_record] = re_read(connector)
    fake.archive_issue(issue.id, trash=True)

    issue_gone = receive(receiver, fake.webhook_body("Issue", "update", issue.id))
    comment_gone = receive(receiver, fake.webhook_body("Comment", "update", comment.id))

    assert (issue_gone.records, comment_gone.records) == ((), ())
    assert issue_gone.tombstones == (
        Tombstone(connector.idempotency_key(issue_record), with_children=True),  # type: ignore[arg-type]
    )
    assert comment_gone.tombstones == (Tombstone(connector.idempotency_key(comment_record)),)  # type: ignore[arg-type]


def test_records_the_connector_does_not_read_are_acknowledged_and_ignored(
    receiver: LinearWebhookReceiver, fake: FakeLinear, issue: FakeIssue
) -> None:
    other_team = fake.add_issue("OPS", "Pager rota")
    comment_body = fake.webhook_body("Comment", "create", fake.add_comment(issue.id, "Ok").id)
    on_a_project = json.loads(comment_body)
    on_a_project["data"].update(issueId=None, issue=None, projectUpdateId="5e1d0c9b")
    project = with_body(fake.webhook_body("Issue", "create", issue.id), type="Project")

    deliveries = [
        receive(receiver, fake.webhook_body("Issue", "create", other_team.id)),
        receive(receiver, json.dumps(on_a_project).encode()),
        receive(receiver, project),
        receive(receiver, with_body(project, type="Reaction")),
    ]

    assert [(d.ignored, d.records, d.tombstones) for d in deliveries] == [(True, (), ())] * 4
    assert [d.event for d in deliveries] == [
        "Issue.create",
        "Comment.create",
        "Project.create",
        "Reaction.create",
    ]


def test_a_delivery_within_a_minute_either_way_is_taken_and_one_outside_is_stale(
    receiver: LinearWebhookReceiver, fake: FakeLinear, issue: FakeIssue
) -> None:
    body = fake.webhook_body("Issue", "create", issue.id)

    taken = [receive(receiver, body, NOW + timedelta(seconds=s)).event for s in (-60, 60)]

    assert taken == ["Issue.create", "Issue.create"]
    assert refusal(receiver, body, now=NOW + timedelta(seconds=61)) is Refusal.STALE
    assert refusal(receiver, body, now=NOW - timedelta(seconds=61)) is Refusal.STALE


def test_without_a_webhook_timestamp_the_linear_timestamp_header_is_checked(
    receiver: LinearWebhookReceiver, fake: FakeLinear, issue: FakeIssue
) -> None:
    payload = json.loads(fake.webhook_body("Issue", "create", issue.id))
    del payload["webhookTimestamp"]
    body = json.dumps(payload).encode()
    millis = str(int(NOW.timestamp() * 1000))

    taken = receive(receiver, body, **{"linear-timestamp": millis})

    assert taken.event == "Issue.create"
    assert refusal(receiver, body) is Refusal.UNSIGNED
    old = signed(body) | {"linear-timestamp": str(int(NOW.timestamp() * 1000) - 120_000)}
    assert refusal(receiver, body, old) is Refusal.STALE


def test_forged_altered_or_unsigned_deliveries_are_refused_before_the_body_is_read(
    receiver: LinearWebhookReceiver, fake: FakeLinear, issue: FakeIssue
) -> None:
    body = fake.webhook_body("Issue", "create", issue.id)
    unsigned = {k: v for k, v in signed(body).items() if k != "linear-signature"}
    requests = fake.list_requests()

    refusals = [
        refusal(receiver, body, unsigned),
        refusal(receiver, body, signed(body, secret="guess")),
        refusal(receiver, body + b" ", signed(body)),  # changed after signing
        refusal(receiver, b"{not json", signed(body)),  # not parsed: the signature is wrong
        refusal(receiver, body, signed(body) | {"linear-signature": "sha256=" + "0" * 64}),
    ]

    assert refusals == [
        Refusal.UNSIGNED,
        Refusal.BAD_SIGNATURE,
        Refusal.BAD_SIGNATURE,
        Refusal.BAD_SIGNATURE,
        Refusal.BAD_SIGNATURE,
    ]
    assert fake.list_requests() == requests


def test_bodies_that_are_not_linear_s_envelope_are_malformed(
    receiver: LinearWebhookReceiver, fake: FakeLinear, issue: FakeIssue
) -> None:
    body = fake.webhook_body("Issue", "remove", issue.id)
    payload = json.loads(body)
    injected = dict(payload, data=dict(payload["data"], id=f"{issue.id}:comment:x"))

    malformed = [
        b"{not json",
        b"[]",
        with_body(body, webhookTimestamp="yesterday"),
        with_body(body, data=None),
        with_body(body, action=None),
        with_body(body, organizationId="../other"),
        json.dumps(injected).encode(),  # an id that would add a segment to the key
    ]

    assert [refusal(receiver, odd) for odd in malformed] == [Refusal.MALFORMED] * len(malformed)


def test_a_record_linear_no_longer_has_is_unprocessable(
    receiver: LinearWebhookReceiver, fake: FakeLinear, issue: FakeIssue
) -> None:
    comment = fake.add_comment(issue.id, "Typo.")
    body = fake.webhook_body("Comment", "create", comment.id)
    fake.delete_comment(comment.id)

    assert refusal(receiver, body) is Refusal.UNPROCESSABLE


def test_a_read_back_that_fails_is_refused_as_the_source_unavailable_without_waiting(
    fake: FakeLinear, clock: FakeClock, issue: FakeIssue, receiver: LinearWebhookReceiver
) -> None:
    body = fake.webhook_body("Issue", "create", issue.id)
    fake.script_rate_limit(times=1)
    before = clock.now()

    rate_limited = refusal(receiver, body)
    fake.token = "lin_api_rotated"  # the connector's key is refused
    refused_key = refusal(receiver, body)

    assert (rate_limited, refused_key) == (Refusal.SOURCE_UNAVAILABLE,) * 2
    assert Refusal.SOURCE_UNAVAILABLE.status == 503
    assert clock.now() == before  # one request each, no retry waited for


def test_a_connector_without_webhook_has_no_receiver(fake: FakeLinear) -> None:
    config = LinearConfig.model_validate({"name": "l", "token": TOKEN, "base_url": fake.base_url})

    assert LinearConnector(config).webhook_receiver() is None
