"""Episodes as they travel into the store, and the rules that make ingest idempotent.

An *episode draft* is what a connector, the API or the CLI hands to ingest. Its
``idempotency_key`` is derived from the source record and never expires; its
``content_hash`` is the SHA-256 of the payload's canonical JSON (RFC 8785, the JSON
Canonicalization Scheme), so JSON values that are equal hash alike: the order of keys,
``1`` against ``1.0`` and the way a string is escaped never matter. Ingest compares the
two to decide the outcome:

============================  ==================  =====================================
key seen before?              same hash, subject?  outcome
============================  ==================  =====================================
no (or the draft has no key)  --                  ``created``: a new episode, revision 1
yes                           yes                 ``duplicate``: nothing is written
yes                           no                  ``revised``: revision n+1, revision n
                                                  is kept (a new subject moves it)
yes, deleted                  --                  ``revised``: the record is back
============================  ==================  =====================================

A key names one source record within a tenant, wherever it is filed: the same key
under another subject is the record moving (its subject template used a field that
changed), never a second episode. A :class:`Tombstone` says the source showed a record
deleted: its episode gets a revision marked deleted (outcome ``tombstoned``), and the
content it had is kept.
"""

from __future__ import annotations

import enum
import hashlib
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
import rfc8785

__all__ = [
    "SOURCE_DELETED_AT",
    "SOURCE_UPDATED_AT",
    "EpisodeDraft",
    "IngestStatus",
    "JSONObject",
    "KeyScope",
    "NotCanonicalJSON",
    "Tombstone",
    "canonical_json",
    "classify",
    "content_hash",
]

JSONObject = dict[str, Any]

SOURCE_UPDATED_AT = "source_updated_at"
"""The provenance field (ISO 8601, aware) a connector's draft says when the source last
changed the record in: ingest never lets a draft older than the stored revision replace
it, so a pushed edit is not undone by a re-read that read before it and arrived after."""

SOURCE_DELETED_AT = "source_deleted_at"
"""The provenance field (ISO 8601, aware) ingest writes on a tombstoned revision when
the :class:`Tombstone` said when the source deleted the record (``deleted_at``): a
draft whose ``source_updated_at`` is not after it stores nothing, so a deletion pushed
is not undone by a re-read that read before it and arrived after."""


class NotCanonicalJSON(ValueError):
    """A value JSON cannot hold exactly (see :func:`canonical_json`)."""


def canonical_json(value: Any) -> str:
    """Serialise ``value`` the one way, RFC 8785 (JCS): keys sorted by UTF-16 code
    units, no spaces, numbers in their shortest form (``1.0`` is ``1``), strings with
    only the escapes JSON requires.

    Two values that are equal as JSON values always give the same string. Raises
    ``ValueError`` for what JSON cannot hold exactly: NaN, infinities, integers beyond
    ±(2^53 - 1) (send those as strings) and keys that are not strings.
    """
    try:
        return orjson.dumps(_plain(value), option=orjson.OPT_SORT_KEYS).decode("utf-8")
    except (_NotPlain, orjson.JSONEncodeError, RecursionError):
        pass  # rfc8785 writes it, or says why it cannot be written
    try:
        return rfc8785.dumps(value).decode("utf-8")
    except rfc8785.IntegerDomainError as error:
        raise NotCanonicalJSON(
            f"not representable as canonical JSON (RFC 8785): {error}; send integers "
            "beyond ±(2^53 - 1) as strings"
        ) from error
    except rfc8785.CanonicalizationError as error:
        raise NotCanonicalJSON(
            f"not representable as canonical JSON (RFC 8785): {error}"
        ) from error


_SAFE_INTEGER = 2**53 - 1
_FIRST_ASTRAL = "\U00010000"


class _NotPlain(Exception):
    """A value :func:`_plain` leaves to ``rfc8785``."""


def _plain(value: Any) -> Any:
    """``value`` with its integral floats as integers, if orjson's output with sorted
    keys is then the RFC 8785 form of ``value``; raises :class:`_NotPlain` otherwise.

    orjson escapes strings as RFC 8785 does (only ``"``, ``\\`` and the control
    characters, with the same short forms), sorts keys by code point, which is UTF-16
    order while no key needs a surrogate pair, and writes a non-integral float as
    ECMAScript does but between 1e-6 and 1e-5 (``1e-6`` for ``0.000001``); an integral
    float is written as ECMAScript writes it once it is an ``int`` (``1.0`` is ``1``).
    Left to ``rfc8785`` (which writes or refuses them): such a key or float, an integer
    or integral float past ±(2^53 - 1), NaN and infinities, and any type but exactly
    dict, list, str, int, float, bool and ``None`` (a tuple, a ``datetime``, a ``str``
    subclass). In Python, but a bundle's walk costs a few per cent of ``rfc8785``'s
    pure-Python encoder.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        if -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
            return value
        raise _NotPlain
    if kind is float:
        if value.is_integer():
            if -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
                return int(value)
            raise _NotPlain
        if math.isfinite(value) and not 1e-6 <= abs(value) < 1e-5:
            return value
        raise _NotPlain
    if kind is dict:
        for key in value:
            if type(key) is not str or (not key.isascii() and max(key) >= _FIRST_ASTRAL):
                raise _NotPlain
        return {key: _plain(item) for key, item in value.items()}
    if kind is list:
        return [_plain(item) for item in value]
    raise _NotPlain


def content_hash(payload: JSONObject) -> str:
    """Return the hex SHA-256 of the canonical JSON of ``payload``."""
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()


class IngestStatus(enum.StrEnum):
    """What ingest did with one episode draft."""

    CREATED = "created"
    DUPLICATE = "duplicate"
    REVISED = "revised"
    TOMBSTONED = "tombstoned"


def classify(
    stored_hash: str | None, incoming_hash: str, *, moved: bool = False, deleted: bool = False
) -> IngestStatus:
    """Decide the outcome for a keyed draft given the stored episode's hash, if any.

    ``stored_hash`` is ``None`` when no episode with the draft's key exists yet.
    ``moved`` says the draft names another subject than the stored episode's, and
    ``deleted`` that the stored episode is a tombstone: each is a revision even when
    the content is equal, since where a record is filed and whether it exists are part
    of what is true about it.
    """
    if stored_hash is None:
        return IngestStatus.CREATED
    if stored_hash == incoming_hash and not moved and not deleted:
        return IngestStatus.DUPLICATE
    return IngestStatus.REVISED


@dataclass(frozen=True, slots=True)
class Tombstone:
    """The source shows that the record with ``key`` is gone: deleted, or moved out of
    what its connector reads (a GitHub issue transferred to another repository).

    ``with_children`` also covers every record whose key starts with ``key + ":"`` (a
    deleted ticket's comments and audits). ``deleted_at`` is when the source deleted it,
    on the source's own clock (the clock of its ``source_updated_at``), when the
    connector knows: a version of the record updated no later than that stores nothing
    afterwards, whenever it arrives; one updated after it is the record re-created and
    is stored. Repeats: a tombstone for a record already deleted, or never stored,
    changes nothing (a deletion of a record never stored is not remembered). Conflicts:
    a stored version updated after ``deleted_at`` is left live.
    """

    key: str
    with_children: bool = False
    deleted_at: datetime | None = None

    def __post_init__(self) -> None:
        if self.deleted_at is not None and self.deleted_at.utcoffset() is None:
            raise ValueError(f"tombstone {self.key!r}: deleted_at must be timezone-aware")

    @property
    def children_range(self) -> tuple[str, str]:
        """``[low, high)``: every key below this one (keys separate their parts with
        ``:``)."""
        return KeyScope(f"{self.key}:").key_range


@dataclass(frozen=True, slots=True)
class KeyScope:
    """Stored records selected by key and time: every key that starts with ``prefix``,
    of the ``episode_types`` (all types when empty), that occurred within
    ``[occurred_from, occurred_to]`` (an open end when ``None``)."""

    prefix: str
    occurred_from: datetime | None = None
    occurred_to: datetime | None = None
    episode_types: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.prefix:
            raise ValueError("a key scope needs a non-empty prefix")

    @property
    def key_range(self) -> tuple[str, str]:
        """``[low, high)`` in code-point order (how keys are compared and indexed):
        the prefix, and the prefix with its last character one higher."""
        return self.prefix, self.prefix[:-1] + chr(ord(self.prefix[-1]) + 1)


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
    sensitivity_labels: tuple[str, ...] = field(default=(), compare=False)
    """Labels a connector's rules gave the record (normalised). Not content: they are
    not hashed, so a rule added later revises nothing; ingest stores them by episode."""
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
