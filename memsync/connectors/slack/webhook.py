"""Slack Events API deliveries (``message`` and its ``message_changed`` /
``message_deleted`` subtypes, the ``url_verification`` handshake) as the connector's
own records.

Slack signs every request as https://api.slack.com/authentication/verifying-requests-from-slack
says: ``X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:{X-Slack-Request-Timestamp}:{raw
body}" under the signing secret>``, and a timestamp more than five minutes from now is
a replay. Events arrive in the ``event_callback`` envelope
(https://api.slack.com/apis/events-api#callback-field) whose ``event_id`` a retry
repeats; a ``message`` event (https://api.slack.com/events/message) carries the
message as ``conversations.history`` returns it, ``message_changed``
(https://api.slack.com/events/message/message_changed) the new message under
``message``, ``message_deleted`` (https://api.slack.com/events/message/message_deleted)
the ``deleted_ts``. They are parsed by the re-read's own parser, so a pushed message
gets the key, subject and payload its re-read gets.

A deletion is dated by the ``message_deleted`` event's own ``ts`` (``event_ts``, the
same), else the envelope's ``event_time``: when Slack deleted the message, on the clock
its edits' ``edited.ts`` are on, so a re-read that read the message before it was
deleted (any version of it is no later) and arrives after does not bring it back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from memsync.connectors._parsing import optional_str
from memsync.connectors.errors import StopRun
from memsync.connectors.slack.connector import (
    CONTENTLESS_SUBTYPES,
    SlackMessage,
    _Channel,
    _key,
    _message,
    slack_ts_to_datetime,
)
from memsync.connectors.webhooks import (
    Refusal,
    WebhookDelivery,
    WebhookRefused,
    check_hex_signature,
    json_object,
)
from memsync.episode import Tombstone

__all__ = ["SlackWebhookReceiver"]

SIGNATURE_HEADER = "x-slack-signature"
TIMESTAMP_HEADER = "x-slack-request-timestamp"
REPLAY_WINDOW = timedelta(minutes=5)
_TEAM_ID = re.compile(r"[A-Z0-9]{1,32}")


class SlackWebhookReceiver:
    """Receives one Slack connector's Events API deliveries (see the module docstring).

    Repeats: the same delivery gives the same records. A message of a channel the
    connector does not read is acknowledged and ignored: a Slack app hears every
    channel its bot is in, which is not a mistake of the app's configuration.
    """

    def __init__(
        self, secret: str, channels: Callable[[], Mapping[str, _Channel]], include_threads: bool
    ) -> None:
        self._secret = secret
        # The configured channels by stream name (names resolved by the connector, once
        # per instance; configure channel ids to keep a delivery from asking Slack).
        self._channels = channels
        self._include_threads = include_threads

    def receive(
        self, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> WebhookDelivery[SlackMessage]:
        stamp = headers.get(TIMESTAMP_HEADER)
        if stamp is None:
            raise WebhookRefused(Refusal.UNSIGNED, f"no {TIMESTAMP_HEADER} header")
        signed = b"v0:" + stamp.encode("utf-8") + b":" + body
        check_hex_signature(
            self._secret,
            signed,
            headers.get(SIGNATURE_HEADER),
            prefix="v0=",
            header=SIGNATURE_HEADER,
        )
        if not stamp.strip().isdigit() or abs(now.timestamp() - int(stamp)) > (
            REPLAY_WINDOW.total_seconds()
        ):
            raise WebhookRefused(Refusal.STALE, f"{TIMESTAMP_HEADER} {stamp} is outside 5 minutes")
        payload = json_object(body)
        kind = payload.get("type")
        if kind == "url_verification":
            challenge = payload.get("challenge")
            if not isinstance(challenge, str):
                raise WebhookRefused(Refusal.MALFORMED, "url_verification without a challenge")
            return WebhookDelivery(None, reply={"challenge": challenge}, event=kind)
        event = payload.get("event")
        if kind != "event_callback" or not isinstance(event, dict):
            return WebhookDelivery(None, event=str(kind), ignored=True)
        delivery_id = optional_str(payload.get("event_id"))
        team = optional_str(payload.get("team_id"))
        if team is None or not _TEAM_ID.fullmatch(team):
            # The team begins every key: only what Slack's ids look like may go there.
            raise WebhookRefused(Refusal.MALFORMED, f"event_callback team_id {team!r}")
        try:
            return self._message_delivery(delivery_id, team, event, payload.get("event_time"))
        except StopRun as error:
            # The re-read's parser says "this is not a message" with StopRun.
            raise WebhookRefused(Refusal.UNPROCESSABLE, str(error)) from None

    def _message_delivery(
        self,
        delivery_id: str | None,
        team: str,
        event: Mapping[str, Any],
        event_time: object,
    ) -> WebhookDelivery[SlackMessage]:
        subtype = optional_str(event.get("subtype"))
        described = f"{event.get('type')}.{subtype or 'posted'}"
        channel = self._channel(optional_str(event.get("channel")))
        if event.get("type") != "message" or channel is None:
            return WebhookDelivery(delivery_id, event=described, ignored=True)
        if subtype == "message_deleted":
            deleted_ts = optional_str(event.get("deleted_ts"))
            if deleted_ts is None:
                raise WebhookRefused(Refusal.MALFORMED, "message_deleted without deleted_ts")
            gone = Tombstone(
                _key(team, channel.id, deleted_ts), deleted_at=_deleted_at(event, event_time)
            )
            return WebhookDelivery(delivery_id, tombstones=(gone,), event=described)
        raw = event.get("message") if subtype == "message_changed" else event
        if not isinstance(raw, dict):
            raise WebhookRefused(Refusal.MALFORMED, f"{described} without a message")
        message = _message(team, channel, raw)
        if message.subtype in CONTENTLESS_SUBTYPES or (
            message.is_reply and not self._include_threads
        ):
            return WebhookDelivery(delivery_id, event=described, ignored=True)
        return WebhookDelivery(delivery_id, records=(message,), event=described)

    def _channel(self, channel_id: str | None) -> _Channel | None:
        if channel_id is None:
            raise WebhookRefused(Refusal.MALFORMED, "message event without a channel")
        return next((c for c in self._channels().values() if c.id == channel_id), None)


def _deleted_at(event: Mapping[str, Any], event_time: object) -> datetime | None:
    """When Slack deleted the message (see the module docstring); ``None`` if the
    delivery does not say, and the deletion keeps arrival order."""
    ts = optional_str(event.get("event_ts")) or optional_str(event.get("ts"))
    if ts is not None:
        return slack_ts_to_datetime(ts)
    if isinstance(event_time, int) and not isinstance(event_time, bool) and event_time >= 0:
        try:
            return datetime.fromtimestamp(event_time, UTC)
        except (OverflowError, OSError, ValueError):
            raise WebhookRefused(Refusal.MALFORMED, f"event_time {event_time}") from None
    return None
