"""Episodes as they travel into the store, and the rules that make ingest idempotent.

An *episode draft* is what a connector, the API or the CLI hands to ingest. Its
``idempotency_key`` is derived from the source record and never expires; its
``content_hash`` is the SHA-256 of the payload's canonical JSON, so the order of keys
in a dict never matters. Ingest compares the two to decide the outcome:

============================  ==========  =============================================
key seen before?              same hash?  outcome
============================  ==========  =============================================
no (or the draft has no key)  --          ``created``: a new episode, revision 1
yes                           yes         ``duplicate``: nothing is written
yes                           no          ``revised``: revision n+1, revision n is kept
============================  ==========  =============================================
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = [
    "EpisodeDraft",
    "IngestStatus",
    "JSONObject",
    "canonical_json",
    "classify",
    "content_hash",
]

JSONObject = dict[str, Any]


def canonical_json(value: Any) -> str:
    """Serialise ``value`` the one way: sorted keys, no spaces, UTF-8 kept as is.

    Two payloads that are equal as JSON values always give the same string.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def content_hash(payload: JSONObject) -> str:
    """Return the hex SHA-256 of the canonical JSON of ``payload``."""
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


class IngestStatus(enum.StrEnum):
    """What ingest did with one episode draft."""

    CREATED = "created"
    DUPLICATE = "duplicate"
    REVISED = "revised"


def classify(stored_hash: str | None, incoming_hash: str) -> IngestStatus:
    """Decide the outcome for a keyed draft given the stored episode's hash, if any.

    ``stored_hash`` is ``None`` when no episode with the draft's key exists yet.
    """
    if stored_hash is None:
        return IngestStatus.CREATED
    if stored_hash == incoming_hash:
        return IngestStatus.DUPLICATE
    return IngestStatus.REVISED


@dataclass(frozen=True, slots=True)
class EpisodeDraft:
    """An episode to ingest. Immutable; ``content_hash`` is computed from the payload.

    ``occurred_at`` is when the source event happened (aware datetime); ``None`` means
    "when it was ingested". ``idempotency_key`` ``None`` means the episode always
    inserts: there is nothing to recognise it by.
    """

    subject_id: str
    source: str
    type: str
    payload: JSONObject
    idempotency_key: str | None = None
    occurred_at: datetime | None = None
    metadata: JSONObject = field(default_factory=dict)
    provenance: JSONObject = field(default_factory=dict)
    session_id: str | None = None
    content_hash: str = field(init=False)
    # The canonical JSON the hash was taken over, kept so the store can write the
    # payload without serialising it a second time.
    payload_json: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        payload_json = canonical_json(self.payload)
        object.__setattr__(self, "payload_json", payload_json)
        object.__setattr__(
            self, "content_hash", hashlib.sha256(payload_json.encode("utf-8")).hexdigest()
        )
