"""What the read path precomputes per subject, kept per memory version, and search.

A :class:`SubjectIndex` holds a subject's active memories as the read path needs them:
a :class:`~memsync.compile.ranking.RankingIndex` for context bundles, the case-folded
text of each memory newest first for search, the open conflicts, and the episodes a
bundle must withhold. :class:`SubjectIndexes` keeps them per (tenant, subject) in this
process, checks the subject's memory version (one row) on every use, and rebuilds an
index when the version moved. So a read costs what it returns, not the subject's size;
a rebuild reads the subject's active memories once (the first read after a change), and
takes over from the index it replaces what that made of the memories a change left as
they were (their ranking entries, token places and search texts), so its CPU goes to
what changed.
"""

from __future__ import annotations

import gc
import threading
import uuid
from collections import OrderedDict
from dataclasses import InitVar, dataclass, field
from datetime import datetime

from memsync.compile.ranking import RankingEntry, RankingIndex
from memsync.compile.types import MemoryKind, MemoryStatus, StoredMemory
from memsync.runtime.reading.memories import MemoryRepository, MemoryVersion, RankingInputs

__all__ = [
    "FREEZE_FROM",
    "INDEXED_MEMORIES",
    "RECLAIM_EVERY",
    "MemorySearch",
    "SubjectIndex",
    "SubjectIndexes",
]

INDEXED_MEMORIES = 200_000
"""How many memories, over all subjects, one process keeps indexes for (a few hundred
bytes each, and about a kilobyte more for those whose full row a read has shown); the
least recently used subjects are dropped first."""


@dataclass(frozen=True, slots=True)
class _Searchable:
    id: uuid.UUID
    kind: MemoryKind
    folded: str
    entry: RankingEntry
    """What it was made from: a later index holding the same entry takes it over."""


@dataclass(frozen=True, slots=True)
class SubjectIndex:
    """A subject's active memories at one memory version, arranged for reading, and the
    full rows of those that reads have shown so far (read once per version)."""

    inputs: RankingInputs
    earlier: InitVar[SubjectIndex | None] = None
    """The subject's index at an earlier version, if kept, whose inputs lent ``inputs``
    their unchanged entries: what it made of those is taken over rather than made
    again (it is left as it was; readers may hold it)."""
    ranking: RankingIndex = field(init=False)
    _newest_first: list[_Searchable] = field(init=False)
    _rows: dict[uuid.UUID, StoredMemory] = field(init=False, default_factory=dict)

    def __post_init__(self, earlier: SubjectIndex | None) -> None:
        ranking = RankingIndex(self.inputs.entries, earlier.ranking if earlier else None)
        object.__setattr__(self, "ranking", ranking)
        # Search's order: newest assertion first, then id, as the SQL search sorts.
        ordered = sorted(self.inputs.entries, key=lambda entry: entry.tie_key)
        ordered.sort(key=lambda entry: entry.last_asserted, reverse=True)
        texts = self.inputs.texts
        # An entry taken over from the earlier inputs is the same object, for a memory
        # whose text is unchanged (MemoryRepository.ranking_inputs): so is its item.
        lent = {id(item.entry): item for item in earlier._newest_first} if earlier else {}
        searchable = [
            lent.get(id(e)) or _Searchable(e.id, e.kind, texts[e.id].lower(), e) for e in ordered
        ]
        object.__setattr__(self, "_newest_first", searchable)

    def __len__(self) -> int:
        return len(self._newest_first)

    def rows(
        self, tenant_id: str, ids: list[uuid.UUID], memories: MemoryRepository
    ) -> dict[uuid.UUID, StoredMemory]:
        """The full rows of ``ids``: those read before from this index, the rest read
        now (and kept). Two requests may read the same row at once; either copy is it."""
        missing = [memory_id for memory_id in ids if memory_id not in self._rows]
        if missing:
            self._rows.update(memories.get(tenant_id, missing))
        return {memory_id: self._rows[memory_id] for memory_id in ids if memory_id in self._rows}

    def search(self, words: list[str], kind: MemoryKind | None, limit: int) -> list[uuid.UUID]:
        """Ids of the newest ``limit`` memories (of ``kind``) containing every word."""
        found: list[uuid.UUID] = []
        for item in self._newest_first:
            if (kind is None or item.kind is kind) and all(w in item.folded for w in words):
                found.append(item.id)
                if len(found) == limit:
                    break
        return found


RECLAIM_EVERY = 64
"""After this many indexes were frozen, frozen objects are given back to the collector
once, so that cyclic garbage frozen with them is reclaimed (see :class:`SubjectIndexes`)."""

FREEZE_FROM = 1_000
"""An index of at least this many memories is frozen out of the collector's reach when
kept (see :class:`SubjectIndexes`); a smaller one is not worth the full collection that
freezing takes."""


class SubjectIndexes:
    """:class:`SubjectIndex` per (tenant, subject), current with the store.

    Repeats: equal memory versions give the same index (it is rebuilt only when the
    version moved). Thread-safe: API requests run on a thread pool; two requests that
    find an index stale may both rebuild it, and the later one is kept.

    Kept indexes of ``freeze_from`` memories or more are frozen out of the garbage
    collector's reach (``gc.freeze``): a full collection holds the GIL while it
    traverses every tracked object, and a 50,000-memory index made that 480 ms, stalling
    every request and slowing a compile by a third (13 ms once frozen). Freezing takes a
    full collection first (so as not to freeze garbage), which for the small indexes of
    most subjects cost more than they ever would: it was a twentieth of a busy server's
    CPU, every context request after a compile paying it, so those are left to the
    collector. An index holds no reference cycles, so a dropped one is still freed at
    once; objects of other requests frozen along with one are given back to the
    collector every ``RECLAIM_EVERY`` indexes frozen.
    """

    def __init__(
        self,
        memories: MemoryRepository,
        capacity: int = INDEXED_MEMORIES,
        *,
        freeze_from: int = FREEZE_FROM,
    ) -> None:
        self._memories = memories
        self._capacity = capacity
        self._freeze_from = freeze_from
        self._held = 0
        self._frozen = 0
        self._items: OrderedDict[tuple[str, str], SubjectIndex] = OrderedDict()
        self._lock = threading.Lock()

    def current(self, tenant_id: str, subject_id: str) -> SubjectIndex:
        """The subject's index at its current memory version."""
        return self.at(tenant_id, subject_id, self._memories.version(tenant_id, subject_id))

    def at(self, tenant_id: str, subject_id: str, version: MemoryVersion | None) -> SubjectIndex:
        """The subject's index, given its memory version as the caller has just read it
        (with what else it read in that statement): the kept index if it is at that
        version, else one rebuilt, which may be at a later version (a write committed
        since the caller's read)."""
        key = (tenant_id, subject_id)
        with self._lock:
            cached = self._items.get(key)
            if cached is not None and cached.inputs.version == version:
                self._items.move_to_end(key)
                return cached
        # The stale index lends what is unchanged: a compile touches few memories.
        inputs = self._memories.ranking_inputs(
            tenant_id,
            subject_id,
            version_read=version,
            earlier=cached.inputs if cached is not None else None,
        )
        index = SubjectIndex(inputs, cached)
        if index.inputs.version is not None:
            self._keep(key, index)
        return index

    def _keep(self, key: tuple[str, str], index: SubjectIndex) -> None:
        with self._lock:
            if (previous := self._items.pop(key, None)) is not None:
                self._held -= len(previous)
            self._items[key] = index
            self._held += len(index)
            while self._held > self._capacity and len(self._items) > 1:
                _, dropped = self._items.popitem(last=False)
                self._held -= len(dropped)
            if len(index) < self._freeze_from:
                return
            self._frozen += 1
            reclaim = self._frozen % RECLAIM_EVERY == 0
        if reclaim:
            gc.unfreeze()
        gc.collect()
        gc.freeze()


class MemorySearch:
    """``GET /v1/memories/search``: a subject's active memories containing every word
    of a text (case-folded), newest assertion first, read from the subject's index."""

    def __init__(self, indexes: SubjectIndexes, memories: MemoryRepository) -> None:
        self._indexes = indexes
        self._memories = memories

    def search(
        self,
        tenant_id: str,
        subject_id: str,
        *,
        kind: str | None,
        text: str | None,
        limit: int,
        as_of: datetime | None = None,
        valid_at: datetime | None = None,
    ) -> list[StoredMemory]:
        """As :meth:`MemoryRepository.search` answers (a test compares them). ``kind`` is
        a free filter: a kind memsync does not derive finds nothing. With ``as_of``, the
        memories active then, as the store held them then; with ``valid_at``, those that
        held at that valid time, whatever their status now (both read by
        :meth:`MemoryRepository.search_at`, not from the index)."""
        if kind is not None and kind not in MemoryKind.__members__.values():
            return []
        if as_of is not None or valid_at is not None:
            return self._memories.search_at(
                tenant_id,
                subject_id,
                kind=kind,
                text=text,
                limit=limit,
                as_of=as_of,
                valid_at=valid_at,
            )
        index = self._indexes.current(tenant_id, subject_id)
        wanted = MemoryKind(kind) if kind is not None else None
        ids = index.search((text or "").lower().split(), wanted, limit)
        rows = index.rows(tenant_id, ids, self._memories)
        # A memory that left the active set since the index was built is left out.
        return [
            memory
            for memory_id in ids
            if (memory := rows.get(memory_id)) is not None and memory.status is MemoryStatus.ACTIVE
        ]
