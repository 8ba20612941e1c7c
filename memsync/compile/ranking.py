"""Ranking memories for a context bundle: one order, computed exhaustively or from an index.

Score (higher first, ties broken by memory id as a string)::

    score = 2.0 * relevance + kind_weight + 0.5 * recency

- relevance: share of the task's tokens (``similarity.tokens``) found in the memory;
- kind_weight: ``KIND_WEIGHTS`` (stable facts about the subject first, summaries last);
- recency: ``1 / (1 + age_days / 30)`` where age is ``as_of`` minus the last assertion
  (never negative).

:func:`rank_all` scores every entry and sorts: the reference. :class:`RankingIndex`
yields the same sequence lazily, so a bundle that needs the first fifty memories of a
subject with fifty thousand does not score them all: entries that share no token with
the task are visited per kind, newest assertion first (within a kind, a newer
assertion never scores lower), and only the entries that share a token with the task
are scored up front, found through an inverted index. Runs of equal scores are put in
id order before they are yielded, so the two agree byte for byte (a property test
compares them).
"""

from __future__ import annotations

import heapq
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from itertools import filterfalse, groupby
from operator import itemgetter

from memsync.compile.similarity import tokens
from memsync.compile.types import MemoryKind, StoredMemory

__all__ = [
    "KIND_WEIGHTS",
    "RANKING",
    "RankingEntry",
    "RankingIndex",
    "holds_at",
    "rank_all",
    "score",
]

KIND_WEIGHTS: Mapping[MemoryKind, float] = {
    MemoryKind.PROFILE_FACT: 1.0,
    MemoryKind.CURRENT_STATE: 0.9,
    MemoryKind.PREFERENCE: 0.8,
    MemoryKind.DECISION: 0.8,
    MemoryKind.FACT: 0.7,
    MemoryKind.EPISODE_SUMMARY: 0.3,
}
RELEVANCE_WEIGHT = 2.0
RECENCY_WEIGHT = 0.5
RECENCY_HALF_LIFE_DAYS = 30.0

RANKING = "relevance*2 + kind_weight + recency*0.5, ties by id"
"""How a bundle ranked its memories, as its provenance says."""

Scored = tuple[float, "RankingEntry"]


@dataclass(frozen=True, slots=True)
class RankingEntry:
    """What ranking needs of an active memory: its kind, times and token set."""

    id: uuid.UUID
    kind: MemoryKind
    last_asserted: datetime
    valid_from: datetime
    valid_to: datetime | None
    tokens: frozenset[str]
    tie_key: str = field(init=False, repr=False, compare=False)
    """The id as a string: equal scores are ordered by it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "tie_key", str(self.id))

    @classmethod
    def of(cls, memory: StoredMemory) -> RankingEntry:
        return cls(
            id=memory.id,
            kind=memory.kind,
            last_asserted=memory.last_asserted,
            valid_from=memory.valid_from,
            valid_to=memory.valid_to,
            tokens=tokens(memory.content),
        )


def holds_at(entry: RankingEntry, as_of: datetime) -> bool:
    """Whether the statement is valid at ``as_of`` (its status is the caller's filter)."""
    return entry.valid_from <= as_of and (entry.valid_to is None or entry.valid_to > as_of)


def _combine(relevance: float, entry: RankingEntry, as_of: datetime) -> float:
    age_days = max((as_of - entry.last_asserted).total_seconds(), 0.0) / 86400
    recency = 1.0 / (1.0 + age_days / RECENCY_HALF_LIFE_DAYS)
    return RELEVANCE_WEIGHT * relevance + KIND_WEIGHTS[entry.kind] + RECENCY_WEIGHT * recency


def score(entry: RankingEntry, task_tokens: frozenset[str], as_of: datetime) -> float:
    """The entry's score for a task at ``as_of``; see the module docstring."""
    shared = len(task_tokens & entry.tokens)
    return _combine(shared / len(task_tokens) if task_tokens else 0.0, entry, as_of)


def _order(item: Scored) -> tuple[float, str]:
    return (-item[0], item[1].tie_key)


def rank_all(
    entries: Iterable[RankingEntry], task_tokens: frozenset[str], as_of: datetime
) -> list[Scored]:
    """Every entry valid at ``as_of`` with its score, best first: the reference order."""
    scored = [(score(e, task_tokens, as_of), e) for e in entries if holds_at(e, as_of)]
    return sorted(scored, key=_order)


class RankingIndex:
    """Active memories of one subject, arranged so a ranking can be read lazily.

    Per kind, entries on a shelf in order of assertion (newest last), and an inverted
    index from token to their places. For a task, every ``(kind, shared token count)``
    group is a stream in which score only falls (relevance and kind weight are fixed,
    recency falls with age), read from the newest place back; merging the streams gives
    the ranking. Only the counting touches every entry that shares a token with the
    task, and only what is read is scored.

    Build it once per store state (it holds no time: ``as_of`` and the task are given per
    call). ``earlier``, the index of an earlier state of the same memories, is extended
    rather than rebuilt where that gives the same ranking: its entries that are gone
    leave empty places, and those that are new are put after the rest when none is
    older than the newest kept (a compile's new memories are its newest). An entry is
    the same entry only as the same object. Otherwise, or when empty places would
    outnumber half the entries, a kind's shelf is built afresh. ``earlier`` is not
    changed: readers may be using it.
    """

    def __init__(
        self, entries: Iterable[RankingEntry], earlier: RankingIndex | None = None
    ) -> None:
        by_kind: dict[MemoryKind, list[RankingEntry]] = {}
        for entry in entries:
            by_kind.setdefault(entry.kind, []).append(entry)
        self._shelves: dict[MemoryKind, _Shelf] = {}
        for kind, of_kind in by_kind.items():
            before = earlier._shelves.get(kind) if earlier is not None else None
            shelf = before.extended(of_kind) if before is not None else None
            self._shelves[kind] = shelf or _Shelf.of(of_kind)

    def __len__(self) -> int:
        return sum(shelf.held for shelf in self._shelves.values())

    def ranked(self, task_tokens: frozenset[str], as_of: datetime) -> Iterator[Scored]:
        """Entries valid at ``as_of`` with their scores, in :func:`rank_all`'s order."""
        streams: list[Iterator[Scored]] = []
        for shelf in self._shelves.values():
            shared: Counter[int] = Counter()
            for token in task_tokens:
                shared.update(shelf.postings.get(token, ()))
            # Grouped by count with C-level sorts: a common task word can be shared by
            # every memory of the subject, and a Python loop per entry would dominate.
            for count, group in groupby(shared.most_common(), key=itemgetter(1)):
                places = sorted(map(itemgetter(0), group), reverse=True)
                streams.append(_stream(shelf.places, places, count / len(task_tokens), as_of))
            streams.append(_stream(shelf.places, _unshared(shelf.places, shared), 0.0, as_of))
        return heapq.merge(*streams, key=_order)


@dataclass(frozen=True, slots=True)
class _Shelf:
    """One kind's entries in order of assertion, oldest first, with None where an entry
    was that an extension left out, and each token's places (ascending)."""

    places: list[RankingEntry | None]
    postings: dict[str, list[int]]
    held: int

    @classmethod
    def of(cls, entries: Iterable[RankingEntry]) -> _Shelf:
        ordered = sorted(entries, key=lambda e: e.last_asserted)
        postings: dict[str, list[int]] = {}
        for place, entry in enumerate(ordered):
            for token in entry.tokens:
                postings.setdefault(token, []).append(place)
        places: list[RankingEntry | None] = list(ordered)
        return cls(places, postings, len(places))

    def extended(self, entries: list[RankingEntry]) -> _Shelf | None:
        """This shelf holding exactly ``entries``: places of entries not among them
        emptied, the others put after the newest; None when that would break the order
        of assertion or leave more empty places than half the entries held."""
        wanted = {id(entry) for entry in entries}
        places = list(self.places)
        newest: RankingEntry | None = None
        kept: set[int] = set()
        for place, entry in enumerate(places):
            if entry is None:
                continue
            if id(entry) in wanted:
                kept.add(id(entry))
                newest = entry
            else:
                places[place] = None
        added = sorted((e for e in entries if id(e) not in kept), key=lambda e: e.last_asserted)
        if added and newest is not None and added[0].last_asserted < newest.last_asserted:
            return None
        if (len(places) + len(added) - len(entries)) * 2 > len(entries):
            return None
        postings = dict(self.postings)
        copied: set[str] = set()
        for place, entry in enumerate(added, start=len(places)):
            for token in entry.tokens:
                if token not in copied:
                    postings[token] = [*postings.get(token, ()), place]
                    copied.add(token)
                else:
                    postings[token].append(place)
        places.extend(added)
        return _Shelf(places, postings, len(entries))


def _unshared(places: list[RankingEntry | None], shared: Counter[int]) -> Iterator[int]:
    return filterfalse(shared.__contains__, range(len(places) - 1, -1, -1))


def _stream(
    places: list[RankingEntry | None], read: Iterable[int], relevance: float, as_of: datetime
) -> Iterator[Scored]:
    """The entries at places ``read`` (newest first) valid at ``as_of``, scored."""
    return _in_id_order_within_ties(
        (_combine(relevance, entry, as_of), entry)
        for place in read
        if (entry := places[place]) is not None and holds_at(entry, as_of)
    )


def _in_id_order_within_ties(items: Iterable[Scored]) -> Iterator[Scored]:
    """``items`` come in non-increasing score order; equal scores leave in id order."""
    for _, run in groupby(items, key=lambda item: item[0]):
        yield from sorted(run, key=_order)
