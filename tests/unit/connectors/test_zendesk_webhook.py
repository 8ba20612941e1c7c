"""The Zendesk webhook receiver on its own: signature and replay window first, then ticket
events parsed into the very records (key, subject, payload) the re-read produces."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import respx
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memsync.connectors import SkipRecord, Tombstone, Window
from memsync.connectors.tickets import ZendeskConfig, ZendeskConnector, ZendeskTicket
from memsync.connectors.webhooks import Refusal, WebhookDelivery, WebhookRefused
from memsync.episode import NotCanonicalJSON
from tests.unit.connectors.fixtures import load_fixture, zendesk_signed

SECRET = "dGhpc19zZWNyZXRfaXNfZm9yX3Rlc3Rpbmdfb25seQ=="  # the verifying page's example secret
SIGNED_AT = datetime(2011, 5, 5, 10, 39, tzinfo=UTC)
BASE = "https://acme.zendesk.com"
TICKET_KEY = "zendesk:acme:ticket:35436"


def _connector(**fields: object) -> ZendeskConnector:
    config = ZendeskConfig.model_validate(
        {
            "name": "support",
            "subject": "org:{organization_id}",
            "subdomain": "acme",
            "email": "agent@acme.test",
            "token": "s3cret-token",
            **fields,
        }
    )
    return ZendeskConnector(config)


CONNECTOR = _connector(webhook={"secret": SECRET})


def delivery(name: str, **changes: Any) -> dict[str, Any]:
    """A fixture delivery body (``webhooks/NAME.json``) with top-level fields changed."""
    body: dict[str, Any] = load_fixture("zendesk", f"webhooks/{name}.json")
    return body | changes


def receive(
    body: dict[str, Any] | bytes,
    *,
    at: datetime = SIGNED_AT,
    now: datetime = SIGNED_AT,
    secret: str = SECRET,
    connector: ZendeskConnector = CONNECTOR,
    **headers: str | None,
) -> WebhookDelivery[Any]:
    """``body`` signed at ``at`` with ``secret`` (``headers`` replace or, as ``None``,
    remove what Zendesk sends), received at ``now`` by ``connector``'s receiver."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent: dict[str, str | None] = {**zendesk_signed(raw, at, secret), **headers}
    receiver = connector.webhook_receiver()
    assert receiver is not None
    lowered = {name.lower(): value for name, value in sent.items() if value is not None}
    return receiver.receive(lowered, raw, now)


def refusal(body: dict[str, Any] | bytes, **options: Any) -> Refusal:
    with pytest.raises(WebhookRefused) as refused:
        receive(body, **options)
    return refused.value.refusal


def re_read_ticket() -> ZendeskTicket:
    """Ticket 35436 read through the connector's REST path: the recorded export page,
    plus the fields a live ticket has that the recorded example leaves out."""
    page = load_fixture("zendesk", "incremental_tickets_cursor.json")
    page["tickets"][0] |= {
        "brand_id": 123,
        "ticket_form_id": 6876543,
        "custom_status_id": 2131,
        "is_public": True,
    }
    with respx.mock(base_url=BASE, assert_all_called=False) as mock:
        mock.get("/api/v2/incremental/tickets/cursor.json").respond(json=page)
        mock.get(url__regex=r"/(comments|audits)\.json").respond(
            json={"comments": [], "audits": []}
        )
        now = datetime(2024, 6, 1, tzinfo=UTC)
        fetched = list(
            CONNECTOR.fetch(Window(start=datetime(2011, 1, 1, tzinfo=UTC), end=now), None)
        )
    [ticket] = [record for record in fetched if isinstance(record, ZendeskTicket)]
    return ticket


def test_a_connector_without_webhook_settings_has_no_receiver() -> None:
    assert _connector().webhook_receiver() is None


def test_a_pushed_ticket_is_the_record_its_re_read_is() -> None:
    pushed = receive(delivery("ticket_status_changed"))

    [ticket] = pushed.records
    assert (pushed.delivery_id, pushed.event) == ("8350205582", "ticket.status_changed")
    assert ticket == re_read_ticket()
    mapped, re_read = CONNECTOR.to_episode(ticket), CONNECTOR.to_episode(re_read_ticket())
    assert mapped.idempotency_key == re_read.idempotency_key == TICKET_KEY
    assert (mapped.subject_id, mapped.payload) == (re_read.subject_id, re_read.payload)
    assert mapped.payload["status"] == "open"
    assert mapped.payload["ticket_form_id"] == 6876543
    assert CONNECTOR.source_updated_at(ticket) == datetime(2011, 5, 5, 10, 38, 52, tzinfo=UTC)


def test_without_an_invocation_id_the_event_id_names_the_delivery() -> None:
    pushed = receive(delivery("ticket_status_changed"), **{"X-Zendesk-Webhook-Invocation-Id": None})

    assert pushed.delivery_id == "cbe4028c-7239-495d-b020-f22348516046"


@pytest.mark.parametrize("gone", ["soft_deleted", "permanently_deleted", "marked_as_spam"])
def test_a_ticket_gone_is_a_tombstone_of_it_and_all_below_it(gone: str) -> None:
    body = delivery("ticket_soft_deleted", type=f"zen:event-type:ticket.{gone}")

    pushed = receive(body)

    assert pushed.records == ()
    # Dated by its receipt: no version read before it brings the ticket back.
    assert pushed.tombstones == (Tombstone(TICKET_KEY, with_children=True, deleted_at=SIGNED_AT),)


def test_a_ticket_event_showing_the_ticket_deleted_is_a_tombstone() -> None:
    body = delivery("ticket_soft_deleted", type="zen:event-type:ticket.tags_changed")

    assert receive(body).tombstones == (
        Tombstone(TICKET_KEY, with_children=True, deleted_at=SIGNED_AT),
    )


@pytest.mark.parametrize(
    "body",
    [
        delivery("ticket_comment_added"),
        delivery("ticket_status_changed", type="zen:event-type:user.active_changed"),
    ],
    ids=["comment_added", "user_event"],
)
def test_comment_events_and_other_domains_are_acknowledged_and_ignored(
    body: dict[str, Any],
) -> None:
    pushed = receive(body)

    assert (pushed.ignored, pushed.records, pushed.tombstones) == (True, (), ())


def test_the_docs_example_verifies_only_in_the_order_the_current_page_gives() -> None:
    # The example of https://developer.zendesk.com/documentation/event-connectors/webhooks/verifying/
    secret, body, stamp = (
        "HRkRd4BeOAoUkfZr-mhauJT64rvBASlJRoIyPsd3zeA=",
        b'{"say": "hello"}',
        "2021-07-25T10:00:00Z",
    )
    at = datetime(2021, 7, 25, 10, tzinfo=UTC)
    page_signature = "tRDSF7URY8BLCDlaBcQ7FHu051Zk+aAB0NKMP53teMw="  # HMAC of body + timestamp
    ours = base64.b64encode(
        hmac.new(secret.encode(), stamp.encode() + body, hashlib.sha256).digest()
    ).decode()

    connector = _connector(webhook={"secret": secret})
    example = {"at": at, "now": at, "secret": secret, "connector": connector}

    # Verified (then refused as not an event, which it is not).
    assert refusal(body, **example) is Refusal.MALFORMED
    assert zendesk_signed(body, at, secret)["X-Zendesk-Webhook-Signature"] == ours
    forged = {"X-Zendesk-Webhook-Signature": page_signature}
    assert refusal(body, **example, **forged) is Refusal.BAD_SIGNATURE


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"X-Zendesk-Webhook-Signature": None}, Refusal.UNSIGNED),
        ({"X-Zendesk-Webhook-Signature-Timestamp": None}, Refusal.UNSIGNED),
        ({"X-Zendesk-Webhook-Signature": "AAAA"}, Refusal.BAD_SIGNATURE),
        ({"secret": "guess"}, Refusal.BAD_SIGNATURE),
    ],
)
def test_unsigned_or_forged_deliveries_are_refused(
    headers: dict[str, str | None], expected: Refusal
) -> None:
    assert refusal(delivery("ticket_status_changed"), **headers) is expected


@pytest.mark.parametrize(
    ("skew", "accepted"),
    [
        (timedelta(minutes=5), True),
        (-timedelta(minutes=5), True),
        (timedelta(minutes=5, seconds=1), False),
        (-timedelta(minutes=5, seconds=1), False),
    ],
)
def test_the_replay_window_is_five_minutes_either_way(skew: timedelta, accepted: bool) -> None:
    body = delivery("ticket_status_changed")
    if accepted:
        assert receive(body, now=SIGNED_AT + skew).records
    else:
        assert refusal(body, now=SIGNED_AT + skew) is Refusal.STALE


def test_a_timestamp_that_cannot_be_placed_is_stale() -> None:
    raw = json.dumps(delivery("ticket_status_changed")).encode()
    for stamp in ("2011-05-05T10:39:00", "yesterday"):
        digest = hmac.new(SECRET.encode(), stamp.encode() + raw, hashlib.sha256).digest()
        headers = {
            "X-Zendesk-Webhook-Signature": base64.b64encode(digest).decode(),
            "X-Zendesk-Webhook-Signature-Timestamp": stamp,
        }
        assert refusal(raw, **headers) is Refusal.STALE


def _without(name: str) -> dict[str, Any]:
    body = delivery("ticket_status_changed")
    del body["detail"][name]
    return body


def _with_detail(**fields: Any) -> dict[str, Any]:
    body = delivery("ticket_status_changed")
    body["detail"] |= fields
    return body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"{not json", Refusal.MALFORMED),
        (b"[]", Refusal.MALFORMED),
        (delivery("ticket_status_changed", type=None), Refusal.MALFORMED),
        (delivery("ticket_status_changed", subject="zen:ticket:../x"), Refusal.MALFORMED),
        (delivery("ticket_status_changed", subject="zen:ticket:35437"), Refusal.MALFORMED),
        (delivery("ticket_status_changed", detail=None), Refusal.MALFORMED),
        (_without("updated_at"), Refusal.UNPROCESSABLE),
        (_without("id"), Refusal.UNPROCESSABLE),
        (_with_detail(id="\u00b2"), Refusal.UNPROCESSABLE),  # a digit to isdigit(), not to int()
        (_with_detail(updated_at="0001-01-01T00:00:00+05:00"), Refusal.UNPROCESSABLE),
    ],
    ids=[
        "not_json",
        "not_an_object",
        "no_type",
        "odd_subject",
        "detail_of_another_ticket",
        "no_detail",
        "no_updated_at",
        "no_id",
        "superscript_id",
        "updated_before_the_calendar",
    ],
)
def test_malformed_deliveries_are_refused(body: dict[str, Any] | bytes, expected: Refusal) -> None:
    assert refusal(body) is expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=6,
)
odd_times = st.datetimes(timezones=st.timezones()).map(datetime.isoformat) | st.text(max_size=30)
detail_fields = st.sampled_from(
    ["id", "updated_at", "created_at", "status", "tags", "via", "organization_id", "form_id"]
)


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(detail_fields, json_values | odd_times, max_size=4))
@example({"organization_id": 2**53})  # no canonical JSON: the intake's 422
def test_whatever_a_signed_detail_holds_it_is_a_record_or_a_refusal(
    changes: dict[str, Any],
) -> None:
    body = delivery("ticket_status_changed")
    body["detail"] |= changes

    try:
        pushed = receive(body)
    except WebhookRefused:
        return
    for record in pushed.records:
        # Maps as any re-read record does; SkipRecord (an empty subject field) and
        # NotCanonicalJSON (an integer past 2^53 in the ticket) are what the intake
        # answers 422 for.
        try:
            episode = CONNECTOR.to_episode(record)
        except (SkipRecord, NotCanonicalJSON):
            continue
        assert episode.idempotency_key == TICKET_KEY
