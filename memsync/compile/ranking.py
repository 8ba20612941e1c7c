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
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby

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
    return (-item[0], str(item[1].id))


def rank_all(
    entries: Iterable[RankingEntry], task_tokens: frozenset[str], as_of: datetime
) -> list[Scored]:
    """Every entry valid at ``as_of`` with its score, best first: the reference order."""
    scored = [(score(e, task_tokens, as_of), e) for e in entries if holds_at(e, as_of)]
    return sorted(scored, key=_order)


class RankingIndex:
    """Active memories of one subject, arranged so a ranking can be read lazily.

    Build it once per store state (it holds no time: ``as_of`` and the task are given per
    call); :meth:`ranked` then costs the entries that share a token with the task plus
    the prefix actually read, not the whole subject.
    """

    def __init__(self, entries: Iterable[RankingEntry]) -> None:
        self._entries: list[RankingEntry] = sorted(
            entries, key=lambda e: e.last_asserted, reverse=True
        )
        # Within a kind, entries newest first: with no shared token, that is score order.
        self._by_kind: dict[MemoryKind, list[int]] = {}
        self._postings: dict[str, list[int]] = {}
        for position, entry in enumerate(self._entries):
            self._by_kind.setdefault(entry.kind, []).append(position)
            for token in entry.tokens:
                self._postings.setdefault(token, []).append(position)

    def __len__(self) -> int:
        return len(self._entries)

    def ranked(self, task_tokens: frozenset[str], as_of: datetime) -> Iterator[Scored]:
        """Entries valid at ``as_of`` with their scores, in :func:`rank_all`'s order."""
        shared: Counter[int] = Counter()
        for token in task_tokens:
            shared.update(self._postings.get(token, ()))
        streams: list[Iterator[Scored]] = [self._sharing(shared, len(task_tokens), as_of)]
        streams.extend(
            _in_id_order_within_ties(
                (_combine(0.0, self._entries[p], as_of), self._entries[p])
                for p in positions
                if p not in shared and holds_at(self._entries[p], as_of)
            )
            for positions in self._by_kind.values()
        )
        return heapq.merge(*streams, key=_order)

    def _sharing(self, shared: Counter[int], task_size: int, as_of: datetime) -> Iterator[Scored]:
        heap = [
            (-scored, str(entry.id), position)
            for position, count in shared.items()
            if holds_at(entry := self._entries[position], as_of)
            for scored in (_combine(count / task_size, entry, as_of),)
        ]
        heapq.heapify(heap)
        while heap:
            negative, _, position = heapq.heappop(heap)
            yield -negative, self._entries[position]


def _in_id_order_within_ties(items: Iterable[Scored]) -> Iterator[Scored]:
    """``items`` come in non-increasing score order; equal scores leave in id order."""
    for _, run in groupby(items, key=lambda item: item[0]):
        yield from sorted(run, key=_order)
