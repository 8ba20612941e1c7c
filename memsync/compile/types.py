"""Value types that cross the boundary between the compile engine and its caller.

The storage layer reads rows into ``EpisodeView`` and ``StoredMemory``, hands them to a
compiler and the resolver, and writes back what the resolver's ``ChangeSet`` says. None
of these types knows about SQL; all of them are immutable.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import operator
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Protocol, TypeVar

import orjson

from memsync.compile.layout import BundleLayout
from memsync.episode import canonical_json

__all__ = [
    "CONTESTED",
    "WITHDRAWN",
    "BundleLayout",
    "CandidateMemory",
    "Compiler",
    "ConflictStatus",
    "EpisodeView",
    "MemoryKind",
    "MemoryStatus",
    "StoredMemory",
    "SupersessionRule",
    "evolve",
    "fold",
    "id_number",
    "in_episode_order",
    "memory_key",
    "normalise_text",
    "require_aware",
]


class MemoryKind(enum.StrEnum):
    """What a memory says about its subject; each kind has its own conflict policy."""

    PROFILE_FACT = "profile_fact"
    PREFERENCE = "preference"
    CURRENT_STATE = "current_state"
    DECISION = "decision"
    FACT = "fact"
    EPISODE_SUMMARY = "episode_summary"


class MemoryStatus(enum.StrEnum):
    """Lifecycle of a stored memory. Only ``active`` memories reach a context bundle."""

    ACTIVE = "active"
    SUPERSEDED = "superseded"
    TOMBSTONED = "tombstoned"


class ConflictStatus(enum.StrEnum):
    """An ``open`` conflict keeps both memories active and the bundle abstains on them
    until a person (or a later compile) settles it; then it is ``resolved``."""

    OPEN = "open"
    RESOLVED = "resolved"


class SupersessionRule(enum.StrEnum):
    """Why a supersession record (or a merge) was written."""

    CLAIM_CONTRADICTION = "claim_contradiction"
    CLAIM_DUPLICATE = "claim_duplicate"
    LEXICAL = "lexical"
    POLICY_KEEP_EXISTING = "policy_keep_existing"
    SOURCE_REVISED = "source_revised"
    SOURCE_MOVED = "source_moved"
    SOURCE_DELETED = "source_deleted"
    WINNER_RETIRED = "winner_retired"
    MANUAL = "manual"


WITHDRAWN: frozenset[SupersessionRule] = frozenset(
    {
        SupersessionRule.SOURCE_REVISED,
        SupersessionRule.SOURCE_MOVED,
        SupersessionRule.SOURCE_DELETED,
    }
)
"""The rules that retire a memory because its evidence went away (nothing beat it):
any new evidence for it brings it back."""

CONTESTED: frozenset[SupersessionRule] = frozenset(
    {
        SupersessionRule.CLAIM_CONTRADICTION,
        SupersessionRule.LEXICAL,
        SupersessionRule.POLICY_KEEP_EXISTING,
    }
)
"""The rules by which the resolver supersedes a memory that lost a contest: such a
memory is contested again when what beat it no longer stands (``manual`` is a person's
decision and stays)."""


_Value = TypeVar("_Value")


def evolve(instance: _Value, /, **changes: Any) -> _Value:
    """A copy of the dataclass ``instance`` with ``changes``, as ``dataclasses.replace``
    makes it (every ``init`` field copied, ``__init__`` and ``__post_init__`` run again;
    an unknown or ``init=False`` name raises ``TypeError``), about three times as fast:
    the resolver copies a memory for every assertion it merges and every status it
    changes, and ``replace`` looks the class's fields up again on each call."""
    cls: Any = type(instance)
    names, read = _init_fields(cls)
    values = list(read(instance))
    for name, value in changes.items():
        try:
            values[names[name]] = value
        except KeyError:
            raise TypeError(f"{cls.__name__} has no init field {name!r} to replace") from None
    copy: _Value = cls(*values)
    return copy


@functools.cache
def _init_fields(cls: type) -> tuple[dict[str, int], Callable[[Any], tuple[Any, ...]]]:
    # Positional construction needs the init fields in declaration order; a class whose
    # init fields are all keyword-only takes them by keyword instead.
    init = [item for item in fields(cls) if item.init]
    if any(item.kw_only for item in init):
        raise TypeError(f"evolve() does not copy keyword-only dataclasses ({cls.__name__})")
    names = [item.name for item in init]
    getter = operator.attrgetter(*names)
    read = getter if len(names) > 1 else (lambda instance: (getter(instance),))
    return {name: index for index, name in enumerate(names)}, read


def require_aware(moment: datetime, what: str) -> datetime:
    """Return ``moment`` unchanged, or raise if it is naive: naive times are ambiguous."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{what} must be a timezone-aware datetime, got naive {moment!r}")
    return moment


# Trailing punctuation never changes what a statement means ("Lisbon." == "Lisbon").
_EDGE_PUNCTUATION = " \t\n.,;:!?\"'`()[]{}"


def fold(text: str) -> str:
    """``text`` in NFKC, casefolded: what identity and similarity compare."""
    # ASCII text is its own NFKC form, and casefolds as it lowercases (much faster).
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", text).casefold()


def normalise_text(text: str) -> str:
    """Fold ``text`` to the form used for identity: NFKC, casefolded, single spaces,
    no surrounding punctuation. ``"  Lisbon. "`` and ``"lisbon"`` normalise alike."""
    # str.split() splits at exactly the characters a regular expression's \s matches.
    return " ".join(fold(text).split()).strip(_EDGE_PUNCTUATION)


def memory_key(
    subject_id: str,
    kind: MemoryKind,
    *,
    claim_key: str | None,
    claim_value: str | None,
    content: str,
    negated: bool = False,
) -> str:
    """Deterministic identity of a statement: hex SHA-256 of its canonical parts.

    A claim is identified by its key and normalised value (so "I live in Lisbon" and
    "My home is lisbon." are the same memory); anything else by its normalised content.
    A negation ("no longer works at Acme") is a different statement from its positive.
    The store's unique index on this key turns a re-derivation into "add provenance".
    """
    if claim_key is not None:
        identity: list[Any] = ["claim", claim_key, normalise_text(claim_value or "")]
    else:
        identity = ["content", normalise_text(content)]
    parts = [subject_id, str(kind), identity, negated]
    return hashlib.sha256(_canonical_strings(parts)).hexdigest()


def _canonical_strings(parts: list[Any]) -> bytes:
    # RFC 8785 of nested lists of strings and booleans (no numbers, no keys to sort) is
    # what orjson writes, about fifteen times as fast as the general canonicaliser: a
    # compile derives a key per candidate. orjson refuses lone surrogates; for those
    # the canonicaliser decides, as it always did.
    try:
        return orjson.dumps(parts)
    except orjson.JSONEncodeError:
        return canonical_json(parts).encode("utf-8")


@dataclass(frozen=True, slots=True)
class EpisodeView:
    """What a compiler sees of one stored episode, at its current revision."""

    id: uuid.UUID
    subject_id: str
    source: str
    type: str
    payload: Mapping[str, Any]
    occurred_at: datetime
    revision: int
    content_hash: str

    def __post_init__(self) -> None:
        require_aware(self.occurred_at, "EpisodeView.occurred_at")


id_number: Callable[[uuid.UUID], int] = operator.attrgetter("int")
"""An id's number, the key that orders ``uuid.UUID``s as their own comparison does but
compares (and hashes) in C: a memory asserted by thousands of episodes has as many ids
in its provenance, sorted and looked up whenever it is read or merged."""


def in_episode_order(episodes: Iterable[EpisodeView]) -> list[EpisodeView]:
    """``episodes`` in the order compilers read them: by ``occurred_at``, episodes of one
    moment by id. An id compares by its number, which orders ids as their text does
    (fixed-width lowercase hex) without rendering each one (4,000 ids: about 30 ms)."""
    return sorted(episodes, key=lambda view: (view.occurred_at, view.id.int))


@dataclass(frozen=True, slots=True)
class CandidateMemory:
    """A memory a compiler derived, before the resolver has compared it with the store.

    ``claim_key``/``claim_value`` are set when the statement fills a registered claim
    slot (``location.home_city`` = ``lisbon``); ``claim_value`` is normalised.
    ``negated`` marks a retraction ("I no longer work at Acme"): the resolver ends the
    matching positive claim instead of competing with the slot. ``explicit_change``
    marks "I moved to…", "I now work at…", which lets a newcomer replace a
    ``keep_existing`` claim. ``valid_to`` is set only for statements that already
    ended when they were made (history), so they coexist with what followed.
    ``memory_key`` is computed, never passed.
    """

    subject_id: str
    kind: MemoryKind
    content: str
    claim_key: str | None
    claim_value: str | None
    confidence: float
    valid_from: datetime
    source_episode_ids: tuple[uuid.UUID, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)
    negated: bool = False
    explicit_change: bool = False
    valid_to: datetime | None = None
    memory_key: str = field(init=False)

    def __post_init__(self) -> None:
        require_aware(self.valid_from, "CandidateMemory.valid_from")
        if self.valid_to is not None:
            require_aware(self.valid_to, "CandidateMemory.valid_to")
        if (self.claim_key is None) != (self.claim_value is None):
            raise ValueError("claim_key and claim_value are set together or not at all")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be within [0, 1], got {self.confidence}")
        if self.claim_value is not None:
            object.__setattr__(self, "claim_value", normalise_text(self.claim_value))
        key = memory_key(
            self.subject_id,
            self.kind,
            claim_key=self.claim_key,
            claim_value=self.claim_value,
            content=self.content,
            negated=self.negated,
        )
        object.__setattr__(self, "memory_key", key)


@dataclass(frozen=True, slots=True)
class StoredMemory:
    """What the resolver sees of a memory already in the store.

    ``asserted_at`` is the latest time any supporting episode asserted the statement
    (``valid_from`` is the earliest); recency compares ``asserted_at`` so a claim that
    is re-asserted later is newer than one asserted once in between. ``status_rule`` is
    the rule that last changed the status: a memory superseded ``manual``-ly is never
    reinstated by the resolver. ``source_episode_ids`` are sorted and unique: the store
    reads them so, and the resolver and :func:`~memsync.compile.resolve.apply_changes`
    keep them so (and rely on it).
    """

    id: uuid.UUID
    subject_id: str
    memory_key: str
    kind: MemoryKind
    content: str
    claim_key: str | None
    claim_value: str | None
    valid_from: datetime
    valid_to: datetime | None
    status: MemoryStatus
    source_episode_ids: tuple[uuid.UUID, ...]
    created_at: datetime
    confidence: float = 1.0
    asserted_at: datetime | None = None
    negated: bool = False
    explicit_change: bool = False
    status_rule: SupersessionRule | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def last_asserted(self) -> datetime:
        """The latest assertion time, falling back to ``valid_from``."""
        return self.asserted_at if self.asserted_at is not None else self.valid_from


class Compiler(Protocol):
    """Turns episodes into candidate memories. Pure with respect to the store.

    Repeats: compiling the same episodes again returns equal candidates (the heuristic
    compiler always; the LLM compiler by replaying its recorded extractions), so the
    resolver sees identical ``memory_key``s and only adds provenance. Conflicts are not
    the compiler's business: it may return candidates that contradict each other or the
    store, and the resolver decides.
    """

    prepares_ahead: bool
    """Whether :meth:`prepare` does slow work (model calls) worth doing before the
    compile's write transaction; the caller then compiles only what was prepared."""

    def prepare(self, episodes: Sequence[EpisodeView]) -> None:
        """Do, and record, the slow part of compiling ``episodes`` so that a later
        :meth:`compile` of them replays it. Repeats: preparing prepared episodes again
        does nothing. A compiler with nothing slow to do does nothing here."""
        ...

    def compile(self, episodes: Sequence[EpisodeView]) -> list[CandidateMemory]:
        """Return candidates for ``episodes``, in a deterministic order."""
        ...
