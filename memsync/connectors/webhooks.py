"""Pushed deliveries: the narrow interface a connector type receives webhooks through.

A vendor that pushes (GitHub, Slack, …) signs each delivery. A receiver checks the
signature on the raw body with a constant-time compare *before* it parses anything,
refuses a timestamp outside the vendor's window (a replay), and parses the event into
the *same* record type the connector's re-read produces: the runtime then maps it with
the connector's own :meth:`~memsync.connectors.base.Connector.to_episode`, so a pushed
record and the scheduled re-read of it share the idempotency key, subject and payload,
and one of them stores nothing. Receivers are pure: no storage, no clock of their own
(``now`` is handed in), no HTTP framework.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from memsync.episode import JSONObject, Tombstone

__all__ = [
    "Refusal",
    "WebhookDelivery",
    "WebhookReceiver",
    "WebhookRefused",
    "check_hex_signature",
    "hmac_sha256",
    "json_object",
    "signature_matches",
]

RecordT_co = TypeVar("RecordT_co", covariant=True)


class Refusal(enum.Enum):
    """Why a delivery was refused, and the HTTP status that says so."""

    UNSIGNED = "unsigned"  # the signature (or its timestamp) header is missing
    BAD_SIGNATURE = "bad_signature"
    STALE = "stale"  # signed, but outside the vendor's replay window
    MALFORMED = "malformed"  # not JSON, or not the vendor's envelope
    UNPROCESSABLE = "unprocessable"  # well-formed, but not a record this connector reads
    # Verified, but the record could not be read back from the source (a timeout, a 5xx,
    # a rate limit, refused credentials): the vendor's redelivery may succeed.
    SOURCE_UNAVAILABLE = "source_unavailable"

    @property
    def status(self) -> int:
        if self in (Refusal.UNSIGNED, Refusal.BAD_SIGNATURE, Refusal.STALE):
            return 401
        if self is Refusal.SOURCE_UNAVAILABLE:
            return 503
        return 400 if self is Refusal.MALFORMED else 422


class WebhookRefused(Exception):
    """A delivery the receiver will not take; nothing of it may be stored."""

    def __init__(self, refusal: Refusal, message: str) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(frozen=True, slots=True)
class WebhookDelivery(Generic[RecordT_co]):
    """What one verified delivery carries.

    ``delivery_id`` is the vendor's id of this delivery (``None`` if it sends none): a
    redelivery repeats it, so it answers a duplicate fast, but it is never what makes a
    record stored once (the record's key is). ``records`` are the connector's own
    records; ``tombstones`` the deletions the delivery reports; ``reply`` a body the
    vendor expects back instead of a receipt (Slack's ``url_verification``).
    """

    delivery_id: str | None
    records: tuple[RecordT_co, ...] = ()
    tombstones: tuple[Tombstone, ...] = ()
    reply: JSONObject | None = None
    #: What the event was, for logs and the answer (``issues.edited``).
    event: str = ""
    #: Events the connector does not read (a ``ping``) are acknowledged and ignored.
    ignored: bool = field(default=False)


class WebhookReceiver(Protocol[RecordT_co]):
    """Verifies and parses one vendor's deliveries for one configured connector.

    Repeats: receiving the same delivery twice returns the same records (the runtime's
    ingest stores them once). Conflicts: a delivery that fails verification raises
    :class:`WebhookRefused` before its body is parsed; one that verifies but is not a
    record the connector reads raises it with ``MALFORMED`` or ``UNPROCESSABLE``.
    """

    def receive(
        self, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> WebhookDelivery[RecordT_co]:
        """Verify ``body`` against ``headers`` (names lower-cased), then parse it."""
        ...


def hmac_sha256(secret: str, message: bytes) -> bytes:
    """HMAC-SHA256 of ``message`` under ``secret`` (UTF-8), the digest raw."""
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).digest()


def signature_matches(expected: str, given: str | None) -> bool:
    """Whether the signature header ``given`` equals ``expected``, compared in constant
    time so that how much of a forged signature matched cannot be timed."""
    if given is None:
        return False
    return hmac.compare_digest(expected.encode("utf-8"), given.strip().encode("utf-8"))


def check_hex_signature(
    secret: str, signed: bytes, given: str | None, *, prefix: str, header: str
) -> None:
    """Refuse unless ``given`` (the ``header`` value) is ``prefix`` and the hex
    HMAC-SHA256 of ``signed`` under ``secret``: ``UNSIGNED`` when it is missing,
    ``BAD_SIGNATURE`` when it differs (compared in constant time)."""
    if given is None:
        raise WebhookRefused(Refusal.UNSIGNED, f"no {header} header")
    if not signature_matches(prefix + hmac_sha256(secret, signed).hex(), given):
        raise WebhookRefused(Refusal.BAD_SIGNATURE, f"{header} does not match")


def json_object(body: bytes) -> Mapping[str, Any]:
    """The body as a JSON object; :class:`WebhookRefused` (``MALFORMED``) if it is not.
    Called only after the signature verified."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise WebhookRefused(Refusal.MALFORMED, f"body is not JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise WebhookRefused(Refusal.MALFORMED, "body is not a JSON object")
    return parsed
