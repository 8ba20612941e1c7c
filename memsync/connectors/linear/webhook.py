"""Linear webhook deliveries (``Issue`` and ``Comment``: create, update, remove) as the
connector's own records.

Linear signs each delivery with ``Linear-Signature: <hex HMAC-SHA256 of the raw body
under the webhook's signing secret>``, names it with ``Linear-Delivery`` (a UUID) and
its resource type with ``Linear-Event``; the body's ``webhookTimestamp`` (milliseconds
since the epoch, signed with the body) more than a minute from now is a replay
(https://linear.app/developers/webhooks; Linear's SDK checks the
same minute, and falls back to a ``Linear-Timestamp`` header when the body has no
timestamp: ``packages/sdk/src/webhooks/client.ts`` of ``linear/linear``). The envelope
is ``EntityWebhookPayload`` (``action``, ``type``, ``data``, ``url``, ``createdAt``,
``updatedFrom``, ``organizationId``, ``webhookTimestamp``, ``webhookId``) and ``data``
an ``IssueWebhookPayload`` or ``CommentWebhookPayload`` (``packages/sdk/src/
schema.graphql`` of ``linear/linear``).

``data`` is not the node the connector's GraphQL documents read, so a pushed ``create``
or ``update`` (or any action other than ``remove``) is read back by id through the
connector's own document and mapping (:meth:`LinearConnector.read_one`; Linear
recommends webhooks over polling, and one query per delivery is what it costs): the
record's key, subject and payload are its re-read's. A ``remove`` becomes a tombstone
built from the ids in ``data`` without a read-back (an issue with its comments), dated
by when the delivery is received (``Tombstone.deleted_at``), so no version a re-read
read before the removal brings the record back when it is ingested after it.

Answers: a record of a team the connector is not configured for is acknowledged and
ignored (a Linear webhook hears all public teams or one team, which need not be the
connector's teams: not a mistake to make Linear retry); so are other resource types
(``Project``, ``Cycle``, ``Reaction``, …) and comments that are not on an issue. A
record Linear no longer has when it is read back is refused as unprocessable (422);
a read-back that fails (a timeout, a 5xx, a rate limit, refused credentials) is
refused as ``source_unavailable`` (503), and Linear delivers it again later.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from memsync.connectors._parsing import optional_str
from memsync.connectors.errors import ConnectorError
from memsync.connectors.http import HttpRecord
from memsync.connectors.webhooks import (
    Refusal,
    WebhookDelivery,
    WebhookRefused,
    check_hex_signature,
    json_object,
)
from memsync.episode import Tombstone

if TYPE_CHECKING:
    from memsync.connectors.linear.connector import LinearConnector

__all__ = ["LinearWebhookReceiver"]

SIGNATURE_HEADER = "linear-signature"
DELIVERY_HEADER = "linear-delivery"
TIMESTAMP_HEADER = "linear-timestamp"
REPLAY_WINDOW = timedelta(minutes=1)

#: The resource types read, and the stream each is read back from.
_STREAMS = {"Issue": "issues", "Comment": "comments"}
# Linear's ids are UUIDs; whatever goes into a key must not be able to add a segment.
_ID = re.compile(r"[A-Za-z0-9-]{1,64}")


class LinearWebhookReceiver:
    """Receives one Linear connector's deliveries (see the module docstring).

    Repeats: the same delivery gives the same records, read back from Linear each time
    (so a late redelivery gives the record as it is now, never older than it was).
    Conflicts: a record of a team the connector does not read is ignored, not refused.
    """

    def __init__(self, connector: LinearConnector, secret: str) -> None:
        self._connector = connector
        self._secret = secret

    def receive(
        self, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> WebhookDelivery[HttpRecord]:
        check_hex_signature(
            self._secret, body, headers.get(SIGNATURE_HEADER), prefix="", header=SIGNATURE_HEADER
        )
        payload = json_object(body)
        _check_fresh(payload.get("webhookTimestamp"), headers.get(TIMESTAMP_HEADER), now)
        delivery_id = headers.get(DELIVERY_HEADER)
        kind, action = payload.get("type"), payload.get("action")
        described = f"{kind}.{action}"
        stream = _STREAMS.get(kind) if isinstance(kind, str) else None
        if stream is None:
            return WebhookDelivery(delivery_id, event=described, ignored=True)
        data = payload.get("data")
        if not isinstance(data, dict) or not isinstance(action, str):
            raise WebhookRefused(Refusal.MALFORMED, f"{kind} delivery without action and data")
        record_id = _id(data.get("id"), "data.id")
        if stream == "comments" and _issue_id(data) is None:
            # A comment on a project update, a document or an initiative: not read.
            return WebhookDelivery(delivery_id, event=described, ignored=True)
        if action == "remove":
            gone = self._removed(stream, record_id, payload, data, now)
            return WebhookDelivery(delivery_id, tombstones=(gone,), event=described)
        return self._read_back(delivery_id, described, stream, record_id)

    def _removed(
        self,
        stream: str,
        record_id: str,
        payload: Mapping[str, Any],
        data: Mapping[str, Any],
        received: datetime,
    ) -> Tombstone:
        # Whatever the team: a key names the record in the workspace, and a tombstone of
        # one never stored deletes nothing.
        organization = {
            "organization": {"id": _id(payload.get("organizationId"), "organizationId")}
        }
        if stream == "issues":
            node: dict[str, Any] = {"id": record_id, "team": organization}
        else:
            issue = {"id": _id(_issue_id(data), "data.issueId"), "team": organization}
            node = {"id": record_id, "issue": issue}
        return self._connector.removed(stream, node, deleted_at=received)

    def _read_back(
        self, delivery_id: str | None, described: str, stream: str, record_id: str
    ) -> WebhookDelivery[HttpRecord]:
        try:
            found = self._connector.read_one(stream, record_id)
        except ConnectorError as error:
            raise WebhookRefused(
                Refusal.SOURCE_UNAVAILABLE, f"reading {stream} {record_id} back failed: {error}"
            ) from None
        if found is None:
            raise WebhookRefused(
                Refusal.UNPROCESSABLE,
                f"Linear has no {stream} {record_id} to read back (removed since, or out of "
                "the API key's sight)",
            )
        if not found:
            return WebhookDelivery(delivery_id, event=described, ignored=True)
        records = tuple(item for item in found if isinstance(item, HttpRecord))
        tombstones = tuple(item for item in found if isinstance(item, Tombstone))
        return WebhookDelivery(delivery_id, records=records, tombstones=tombstones, event=described)


def _check_fresh(signed: object, header: str | None, now: datetime) -> None:
    """Refuse a delivery whose timestamp (the body's ``webhookTimestamp``, else the
    ``Linear-Timestamp`` header, in milliseconds) is missing or more than a minute
    from ``now``."""
    stamp = signed if signed is not None else header
    if stamp is None:
        raise WebhookRefused(Refusal.UNSIGNED, "no webhookTimestamp in the body")
    millis = _milliseconds(stamp)
    if millis is None:
        raise WebhookRefused(Refusal.MALFORMED, f"webhookTimestamp {stamp!r} is not milliseconds")
    if abs(now.timestamp() * 1000 - millis) > REPLAY_WINDOW.total_seconds() * 1000:
        raise WebhookRefused(Refusal.STALE, f"webhookTimestamp {stamp} is outside a minute")


def _milliseconds(value: object) -> float | None:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _issue_id(data: Mapping[str, Any]) -> object:
    """The issue a comment is on (``issueId``, or ``issue.id``); ``None`` if none."""
    issue = data.get("issue")
    return data.get("issueId") or (issue.get("id") if isinstance(issue, dict) else None)


def _id(value: object, what: str) -> str:
    text = optional_str(value)
    if text is None or not _ID.fullmatch(text):
        raise WebhookRefused(Refusal.MALFORMED, f"{what} {value!r} is not a Linear id")
    return text
