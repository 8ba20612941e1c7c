"""Zendesk webhook deliveries (ticket events of a webhook subscribed to Zendesk events)
as the connector's own records.

Zendesk signs every request as https://developer.zendesk.com/documentation/webhooks/verifying/
says: ``X-Zendesk-Webhook-Signature: base64(HMAC-SHA256(timestamp + body))`` under the
webhook's signing secret, where the timestamp is the ``X-Zendesk-Webhook-Signature-Timestamp``
header (ISO 8601, ``2021-03-25T05:09:27Z``); a timestamp more than five minutes from now
(either way) is refused as a replay. ``X-Zendesk-Webhook-Invocation-Id`` names the
delivery and its retries
(https://developer.zendesk.com/documentation/webhooks/anatomy-of-a-webhook-request/);
without it the event's own ``id`` does.

An event arrives in the envelope of
https://developer.zendesk.com/api-reference/webhooks/event-types/webhook-event-types/
(``type``, ``account_id``, ``id``, ``time``, ``subject``, ``detail``, ``event``). A ticket
event (https://developer.zendesk.com/api-reference/webhooks/event-types/ticket-events/)
has ``type`` ``zen:event-type:ticket.*``, ``subject`` ``zen:ticket:{id}`` and the ticket
as it now stands in ``detail``, which is parsed by the re-read's own ticket parser
(:func:`~memsync.connectors.tickets.zendesk.zendesk_ticket`): a pushed ticket gets the
key, subject and payload its re-read gets. ``ticket.soft_deleted``,
``ticket.permanently_deleted`` and ``ticket.marked_as_spam`` are a tombstone of the
ticket and everything below it, dated by when the delivery is received
(``Tombstone.deleted_at``), so no version a re-read read before the deletion brings the
ticket back when it is ingested after it (a restored ticket is stored again once a
version updated after the deletion is read). Its comments and status changes have no
update time (:meth:`ZendeskConnector.source_updated_at`): such a re-read stores them
again, until the next one finds the ticket deleted and tombstones them. Events about
comments and attachments carry the comment in a shape the re-read does not store, so
they are acknowledged and ignored: the next scheduled re-read stores the comment.
Events of other domains (users, organizations, …) are acknowledged and ignored.

The envelope names the account by ``account_id`` only, never by subdomain, so nothing in
it can be checked against the configured ``subdomain``: the webhook's own signing secret
is what ties a delivery to this connector.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from memsync.connectors._parsing import optional_str
from memsync.connectors.errors import StopRun
from memsync.connectors.tickets.zendesk import ZendeskRecord, ticket_key_prefix, zendesk_ticket
from memsync.connectors.webhooks import (
    Refusal,
    WebhookDelivery,
    WebhookRefused,
    hmac_sha256,
    json_object,
    signature_matches,
)
from memsync.episode import Tombstone

__all__ = ["ZendeskWebhookReceiver"]

SIGNATURE_HEADER = "x-zendesk-webhook-signature"
TIMESTAMP_HEADER = "x-zendesk-webhook-signature-timestamp"
INVOCATION_HEADER = "x-zendesk-webhook-invocation-id"
REPLAY_WINDOW = timedelta(minutes=5)

_TICKET_EVENT = "zen:event-type:ticket."
# Zendesk ids are positive integers; bounded so a key never holds an absurd number.
_TICKET_SUBJECT = re.compile(r"zen:ticket:([1-9][0-9]{0,17})")
#: Events after which the ticket is no longer one the re-read finds.
_TICKET_GONE = frozenset({"soft_deleted", "permanently_deleted", "marked_as_spam"})
#: Events about a comment or its attachments: the comment they carry is not the
#: comment the re-read stores, so they are left to the re-read.
_ABOUT_COMMENTS = frozenset(
    {
        "comment_added",
        "comment_made_private",
        "comment_redacted",
        "attachment_linked_to_comment",
        "attachment_redacted_from_comment",
    }
)


class ZendeskWebhookReceiver:
    """Receives one Zendesk connector's ticket-event deliveries (see the module docstring).

    Repeats: the same delivery gives the same records. Conflicts: a ticket event whose
    ``detail`` is not the ticket its ``subject`` names is refused (400), so a delivery
    can never store one ticket under another's key.
    """

    def __init__(self, subdomain: str, secret: str) -> None:
        self._subdomain = subdomain
        self._secret = secret

    def receive(
        self, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> WebhookDelivery[ZendeskRecord]:
        self._verify(headers, body, now)
        payload = json_object(body)
        kind = payload.get("type")
        if not isinstance(kind, str):
            raise WebhookRefused(Refusal.MALFORMED, "the event has no type")
        delivery_id = optional_str(headers.get(INVOCATION_HEADER, "").strip()) or optional_str(
            payload.get("id")
        )
        if not kind.startswith(_TICKET_EVENT):
            return WebhookDelivery(delivery_id, event=kind, ignored=True)
        action = kind.removeprefix(_TICKET_EVENT)
        described = f"ticket.{action}"
        ticket_id = _subject_ticket(payload)
        if action in _TICKET_GONE:
            gone = Tombstone(
                ticket_key_prefix(self._subdomain, ticket_id), with_children=True, deleted_at=now
            )
            return WebhookDelivery(delivery_id, tombstones=(gone,), event=described)
        if action in _ABOUT_COMMENTS:
            return WebhookDelivery(delivery_id, event=described, ignored=True)
        detail = payload.get("detail")
        if not isinstance(detail, dict):
            raise WebhookRefused(Refusal.MALFORMED, f"{described} without a detail object")
        try:
            ticket = zendesk_ticket(self._subdomain, detail)
        except StopRun as error:
            # The re-read's parser says "this is not a ticket" with StopRun.
            raise WebhookRefused(Refusal.UNPROCESSABLE, str(error)) from None
        if ticket.ticket.id != ticket_id:
            raise WebhookRefused(
                Refusal.MALFORMED, f"detail.id {ticket.ticket.id} is not the subject's {ticket_id}"
            )
        if ticket.data.get("status") == "deleted":
            # As the re-read reports a ticket the export shows deleted.
            gone = Tombstone(ticket.ticket.key_prefix, with_children=True, deleted_at=now)
            return WebhookDelivery(delivery_id, tombstones=(gone,), event=described)
        return WebhookDelivery(delivery_id, records=(ticket,), event=described)

    def _verify(self, headers: Mapping[str, str], body: bytes, now: datetime) -> None:
        stamp, given = headers.get(TIMESTAMP_HEADER), headers.get(SIGNATURE_HEADER)
        if stamp is None or given is None:
            missing = TIMESTAMP_HEADER if stamp is None else SIGNATURE_HEADER
            raise WebhookRefused(Refusal.UNSIGNED, f"no {missing} header")
        digest = hmac_sha256(self._secret, stamp.encode("utf-8") + body)
        if not signature_matches(base64.b64encode(digest).decode("ascii"), given):
            raise WebhookRefused(Refusal.BAD_SIGNATURE, f"{SIGNATURE_HEADER} does not match")
        signed_at = _signed_at(stamp)
        if signed_at is None or abs(now - signed_at) > REPLAY_WINDOW:
            raise WebhookRefused(Refusal.STALE, f"{TIMESTAMP_HEADER} {stamp} is outside 5 minutes")


def _signed_at(stamp: str) -> datetime | None:
    """The signature timestamp as an aware time; ``None`` if it is not ISO 8601 with a
    zone (Zendesk sends UTC with ``Z``; a time without a zone cannot be placed)."""
    try:
        moment = datetime.fromisoformat(stamp.strip())
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _subject_ticket(payload: Mapping[str, Any]) -> int:
    subject = payload.get("subject")
    match = _TICKET_SUBJECT.fullmatch(subject) if isinstance(subject, str) else None
    if match is None:
        raise WebhookRefused(Refusal.MALFORMED, f"ticket event subject {subject!r}")
    return int(match.group(1))
