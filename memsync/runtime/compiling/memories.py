"""The compile stage's statements on memories: loading them for the resolver, applying
its change sets, and deleting a subject's memories.

The compile engine (``memsync.compile``) decides; this module only translates between
its value types and rows. Every statement is scoped to one tenant, and every write of a
change set is a constant number of statements, whatever its size.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from memsync.compile.resolve import (
    REDECIDED,
    ChangeSet,
    Defeat,
    OpenConflict,
    RecordedDecision,
    SourceEvidence,
    SourceStanding,
    apply_changes,
)
from memsync.compile.sensitivity import LabelRule
from memsync.compile.types import (
    CONTESTED,
    ConflictStatus,
    MemoryKind,
    MemoryStatus,
    StoredMemory,
    SupersessionRule,
    id_number,
)
from memsync.ids import random_uuids
from memsync.runtime.compiling.history import record_conflict_history, record_memory_history
from memsync.runtime.storage import tables

__all__ = [
    "RECORDED_EPISODES_PER_SIDE",
    "ConflictRecord",
    "KnownMemories",
    "KnownSubjects",
    "MemoriesForgotten",
    "active_rivals",
    "apply_change_set",
    "bump_memory_version",
    "conflict_record",
    "contests_around",
    "delete_subject_memories",
    "forget_episodes",
    "load_conflict",
    "load_for_resolution",
    "memories_by_id",
    "memories_citing",
    "memory_version",
    "open_conflicts_of",
    "open_conflicts_of_subject",
    "recorded_decisions",
    "source_standings",
    "subject_memories",
    "subjects_citing",
    "with_sources",
]

RECORDED_EPISODES_PER_SIDE = 64
"""How many source episode ids a supersession record lists per side (the first, in id
order). Listing all of them made each record as long as a memory's whole evidence, and
a claim that flips often made the table grow with the square of it; the record keeps
the counts, and ``memory_sources`` keeps every id of both memories."""


class _RecordedIds:
    """The ids supersession records list of their sides, as text, for one change set.

    A claim that flips often lists the same episodes in record after record, and the
    loser of one record is often the very memory (the same tuple) that won the one
    before: each id is written out as text once (looked up by its number, which hashes
    in C, where a ``UUID`` hashes in Python), and each side's list once per tuple. The
    tuples are held here, so an identity seen again is the same tuple, never a new one
    at a recycled address."""

    def __init__(self) -> None:
        self._texts: dict[int, str] = {}
        self._lists: dict[int, tuple[Sequence[uuid.UUID], list[str]]] = {}

    def of(self, episode_ids: Sequence[uuid.UUID]) -> list[str]:
        """The first ``RECORDED_EPISODES_PER_SIDE`` of ``episode_ids``, as text. The
        same list is answered for the same tuple: its rows only read it."""
        listed = self._lists.get(id(episode_ids))
        if listed is not None and listed[0] is episode_ids:
            return listed[1]
        texts = self._texts
        rendered = []
        for episode_id in episode_ids[:RECORDED_EPISODES_PER_SIDE]:
            number = episode_id.int
            text = texts.get(number)
            if text is None:
                text = texts[number] = str(episode_id)
            rendered.append(text)
        self._lists[id(episode_ids)] = (episode_ids, rendered)
        return rendered


_memories = tables.memories
# The columns of the memories' keys and indexes, all that the plans of lookups and
# foreign-key checks read; the text and metadata columns were most of a whole-table
# ANALYZE's time, in the transaction of a compile's first chunk.
_ANALYZE_MEMORY_KEYS = "ANALYZE memories ({})".format(
    ", ".join(
        column.name
        for column in _memories.columns
        if column.primary_key or any(column.name in index.columns for index in _memories.indexes)
    )
)
_sources = tables.memory_sources
_episodes = tables.episodes
_revisions = tables.episode_revisions
_supersessions = tables.supersessions
_conflicts = tables.conflicts
_versions = tables.memory_versions


_STORED_COLUMNS = (
    "id",
    "subject_id",
    "memory_key",
    "kind",
    "content",
    "claim_key",
    "claim_value",
    "valid_from",
    "valid_to",
    "status",
    "created_at",
    "confidence",
    "asserted_at",
    "negated",
    "explicit_change",
    "status_rule",
    "metadata",
)
"""The columns a :class:`StoredMemory` is built from (:func:`_stored`), in its order."""


def _stored(columns: tuple[Any, ...], sources: Sequence[uuid.UUID]) -> StoredMemory:
    """The memory of the values of :data:`_STORED_COLUMNS`, its provenance ``sources``."""
    (
        memory_id,
        subject_id,
        memory_key,
        kind,
        content,
        claim_key,
        claim_value,
        valid_from,
        valid_to,
        status,
        created_at,
        confidence,
        asserted_at,
        negated,
        explicit_change,
        status_rule,
        metadata,
    ) = columns
    return StoredMemory(
        id=memory_id,
        subject_id=subject_id,
        memory_key=memory_key,
        kind=MemoryKind(kind),
        content=content,
        claim_key=claim_key,
        claim_value=claim_value,
        valid_from=valid_from,
        valid_to=valid_to,
        status=MemoryStatus(status),
        source_episode_ids=tuple(sorted(sources, key=id_number)),
        created_at=created_at,
        confidence=confidence,
        asserted_at=asserted_at,
        negated=negated,
        explicit_change=explicit_change,
        status_rule=SupersessionRule(status_rule) if status_rule else None,
        metadata=metadata,
    )


def with_sources(
    connection: Connection,
    tenant_id: str,
    rows: Sequence[Row[Any]],
    *,
    as_of: datetime | None = None,
) -> list[StoredMemory]:
    """Attach each memory's provenance set: one query for all of them. With ``as_of``,
    the sources it had then (added by that moment). ``rows`` are rows of one select
    (see :func:`~memsync.runtime.storage.tables.picked`) with the memories' columns."""
    values = tables.picked(rows, _STORED_COLUMNS)
    ids = [columns[0] for columns in values]
    sources: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    for some_ids in tables.in_slices(ids):
        query = sa.select(_sources.c.memory_id, _sources.c.episode_id).where(
            _sources.c.tenant_id == tenant_id,
            tables.one_of(_sources.c.memory_id, some_ids, postgresql=_on_postgresql(connection)),
        )
        if as_of is not None:
            query = query.where(_sources.c.added_at <= as_of)
        # One fetch for the slice's rows: iterating a result fetches a row per call.
        for memory_id, episode_id in connection.execute(query).all():
            sources[memory_id].append(episode_id)
    return [_stored(columns, sources[columns[0]]) for columns in values]


def memories_by_id(
    connection: Connection, tenant_id: str, memory_ids: Collection[uuid.UUID]
) -> list[StoredMemory]:
    """The tenant's memories of ``memory_ids`` (those that exist), each with its
    provenance, in one statement: the sources come as a column of each memory's row (an
    array on PostgreSQL, a list of hex ids on SQLite) rather than as a second result of
    one row each: for the 64 memories a context bundle reads after a change, a third
    fewer instructions than two statements, and one round trip instead of two."""
    postgresql = _on_postgresql(connection)
    statement = _by_id_statement(postgresql=postgresql)
    ids = tables.array_text(memory_ids) if postgresql else list(memory_ids)
    rows = connection.execute(statement, {"tenant_id": tenant_id, "ids": ids}).all()
    found: list[StoredMemory] = []
    for *columns, sources in rows:
        if sources is None:
            episode_ids: Sequence[uuid.UUID] = ()
        elif postgresql:
            episode_ids = sources
        else:
            episode_ids = [uuid.UUID(hex=text) for text in sources.split(",")]
        found.append(_stored(tuple(columns), episode_ids))
    return found


@functools.cache
def _by_id_statement(*, postgresql: bool) -> sa.Select[Any]:
    """:func:`memories_by_id`'s statement, built once: ``tenant_id``, and ``ids`` (the
    text of an array on PostgreSQL, an expanding list on SQLite)."""
    tenant_id: sa.BindParameter[str] = sa.bindparam("tenant_id")
    # The tenant as a value, not only as the correlation: Citus routes the statement to
    # one shard only when every distributed table in it is filtered by the tenant.
    of_memory = (_sources.c.tenant_id == tenant_id, _sources.c.memory_id == _memories.c.id)
    sources: sa.ColumnElement[Any]
    if postgresql:
        from sqlalchemy.dialects.postgresql import ARRAY  # loaded already by the engine

        listed = sa.select(_sources.c.episode_id).where(*of_memory).scalar_subquery()
        sources = sa.func.array(listed, type_=sa.types.NullType())
        wanted = _memories.c.id == sa.any_(
            sa.cast(sa.bindparam("ids", type_=sa.types.NullType()), ARRAY(sa.Uuid()))
        )
    else:
        joined = sa.func.group_concat(_sources.c.episode_id, ",")
        sources = sa.select(joined).where(*of_memory).scalar_subquery()
        wanted = _memories.c.id.in_(sa.bindparam("ids", expanding=True))
    columns = [_memories.c[name] for name in _STORED_COLUMNS]
    return sa.select(*columns, sources.label("source_ids")).where(
        _memories.c.tenant_id == tenant_id, wanted
    )


_CONTESTED_KIND = _memories.c.kind != MemoryKind.EPISODE_SUMMARY.value
"""A memory of a kind that can be in a contest: every kind but episode summaries, which
the resolver never indexes or contests (each stands for its episode alone)."""


def load_for_resolution(
    connection: Connection, tenant_id: str, subject_id: str, memory_keys: Collection[str]
) -> list[StoredMemory]:
    """What ``resolve`` needs as ``existing``: the subject's active memories of the kinds
    that can be in a contest (all but episode summaries) plus any memory (of any status
    and kind) whose key a candidate has.

    An episode summary stands for its episode alone: the resolver never indexes or
    contests one, so an active summary no candidate names cannot change what it decides.
    Leaving them out keeps this load, and a compile's chunks, proportional to the
    subject's claims and statements rather than to every episode it ever had."""
    return _load(connection, tenant_id, subject_id, memory_keys, active=True)


def _load(
    connection: Connection,
    tenant_id: str,
    subject_id: str,
    memory_keys: Collection[str],
    *,
    active: bool,
) -> list[StoredMemory]:
    """The subject's memories whose key is one of ``memory_keys``, and with ``active``
    every active one of the kinds that can be in a contest too."""
    of_subject = sa.and_(_memories.c.tenant_id == tenant_id, _memories.c.subject_id == subject_id)
    wanted: list[sa.ColumnElement[bool]] = []
    if active:
        wanted.append(sa.and_(_memories.c.status == MemoryStatus.ACTIVE.value, _CONTESTED_KIND))
    if memory_keys:
        wanted.append(
            tables.one_of(
                _memories.c.memory_key, sorted(memory_keys), postgresql=_on_postgresql(connection)
            )
        )
    if not wanted:
        return []
    rows = connection.execute(sa.select(_memories).where(of_subject, sa.or_(*wanted))).all()
    return with_sources(connection, tenant_id, rows)


def subject_memories(
    connection: Connection, tenant_id: str, subject_id: str, *, contested: bool = False
) -> list[StoredMemory]:
    """Every memory of the subject, in any status, with its provenance; with
    ``contested`` only those of kinds that can be in a contest (not episode summaries)."""
    query = sa.select(_memories).where(
        _memories.c.tenant_id == tenant_id, _memories.c.subject_id == subject_id
    )
    if contested:
        query = query.where(_CONTESTED_KIND)
    rows = connection.execute(query).all()
    return with_sources(connection, tenant_id, rows)


def recorded_decisions(
    connection: Connection, tenant_id: str, subject_id: str
) -> list[RecordedDecision]:
    """The subject's stored supersession records of a rule in ``REDECIDED``, as
    ``rederive`` compares them (the episode lists as stored: their first
    :data:`RECORDED_EPISODES_PER_SIDE` ids, and the counts)."""
    rows = connection.execute(
        sa.select(_supersessions).where(
            _supersessions.c.tenant_id == tenant_id,
            _supersessions.c.subject_id == subject_id,
            _supersessions.c.rule.in_(sorted(rule.value for rule in REDECIDED)),
        )
    ).all()
    return [
        RecordedDecision(
            id=row.id,
            rule=SupersessionRule(row.rule),
            winner_memory_key=row.winner_memory_key,
            loser_memory_key=row.loser_memory_key,
            decision=(
                SupersessionRule(row.rule),
                row.claim_key,
                row.score,
                row.threshold,
                row.winner_memory_key,
                row.loser_memory_key,
                tuple(row.winner_episode_ids),
                tuple(row.loser_episode_ids),
                row.winner_episode_count,
                row.loser_episode_count,
            ),
        )
        for row in rows
    ]


def open_conflicts_of_subject(
    connection: Connection, tenant_id: str, subject_id: str
) -> list[OpenConflict]:
    """The subject's open conflicts, by id."""
    rows = connection.execute(
        sa.select(_conflicts).where(
            _conflicts.c.tenant_id == tenant_id,
            _conflicts.c.subject_id == subject_id,
            _conflicts.c.status == ConflictStatus.OPEN.value,
        )
    ).all()
    return sorted((conflict_record(row).conflict for row in rows), key=lambda c: c.id)


def memory_version(connection: Connection, tenant_id: str, subject_id: str) -> str | None:
    """The subject's memory version (see :func:`bump_memory_version`), or None if its
    memories never changed (or were deleted)."""
    version: str | None = connection.execute(
        sa.select(_versions.c.version).where(
            _versions.c.tenant_id == tenant_id, _versions.c.subject_id == subject_id
        )
    ).scalar_one_or_none()
    return version


@dataclass(frozen=True, slots=True)
class KnownMemories:
    """A subject's memories as one transaction loaded them for the resolver and then
    changed them, with the subject's memory version that transaction left.

    A compile's next chunk starts from these instead of reloading what the chunk before
    it wrote. They hold every memory of the subject that :func:`load_for_resolution`
    loads whatever the candidates (active, of a kind that can be in a contest) or that
    has changed since (a change set changes only memories the resolver was given, and
    creates the rest); any other memory of the subject is inactive or an episode
    summary, and as it was. They stand for the store only while the subject's version
    is still ``version``: every write of a subject's memories bumps it (deleting them
    removes it).
    """

    version: str
    by_key: Mapping[str, StoredMemory]

    @classmethod
    def after(
        cls, version: str, loaded: Sequence[StoredMemory], changes: ChangeSet
    ) -> KnownMemories:
        """``loaded`` (what the resolver was given) once ``changes`` are applied."""
        return cls(version, {m.memory_key: m for m in apply_changes(loaded, changes)})

    def for_resolution(
        self, connection: Connection, tenant_id: str, subject_id: str, memory_keys: Collection[str]
    ) -> list[StoredMemory] | None:
        """:func:`load_for_resolution`'s memories, the same set, read only where these do
        not know them (inactive memories a candidate's key names); None if the subject's
        memories changed since, and they must be loaded whole."""
        if memory_version(connection, tenant_id, subject_id) != self.version:
            return None
        wanted = set(memory_keys)
        unknown = wanted - self.by_key.keys()
        known = [
            memory for key, memory in self.by_key.items() if _contending(memory) or key in wanted
        ]
        return known + _load(connection, tenant_id, subject_id, unknown, active=False)

    def contending_only(self) -> KnownMemories:
        """These without the memories :func:`load_for_resolution` loads only by key
        (inactive ones, episode summaries): still what :meth:`for_resolution` needs, as
        it reads a memory a candidate names from the store when it does not hold it."""
        contending = {k: m for k, m in self.by_key.items() if _contending(m)}
        return KnownMemories(self.version, contending)


def _contending(memory: StoredMemory) -> bool:
    """Whether :func:`load_for_resolution` loads ``memory`` whatever the candidates."""
    return memory.status is MemoryStatus.ACTIVE and memory.kind is not MemoryKind.EPISODE_SUMMARY


class KnownSubjects:
    """The memories each recently compiled subject was left with, as
    :class:`KnownMemories`, so that the next compile of the subject in this process
    starts from them instead of loading every active memory again: a frequent small
    compile (every N episodes, a sync's, the API's) then reads only the memories its
    candidates name.

    Bounded: at most ``capacity`` in all, a subject counting as its active memories
    other than episode summaries (only those are held) plus one, the subject compiled
    least recently dropped first; a subject larger than that is not held. ``0`` holds
    nothing. Safe to share between threads.

    Repeats and conflicts: keeping a subject again replaces what was held. What is held
    is never trusted as it is: :meth:`KnownMemories.for_resolution` compares its version
    with the subject's under the compile's lock, so memories that changed since (a
    compile in another process, an edit, a forgotten subject: every write of a subject's
    memories bumps its version) are loaded from the store as if nothing were held.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be 0 or more, not {capacity}")
        self.capacity = capacity
        self._held: OrderedDict[tuple[str, str], KnownMemories] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """How much is held: the active memories of every subject held, plus one a
        subject."""
        return self._size

    def get(self, tenant_id: str, subject_id: str) -> KnownMemories | None:
        """What the subject's last compile in this process left, if still held."""
        with self._lock:
            known = self._held.get((tenant_id, subject_id))
            if known is not None:
                self._held.move_to_end((tenant_id, subject_id))
            return known

    def keep(self, tenant_id: str, subject_id: str, known: KnownMemories | None) -> None:
        """Hold ``known`` (its active memories) for the subject's next compile, in place
        of what was held; ``None`` drops what was held. Drops the subjects compiled
        least recently while more than ``capacity`` memories are held."""
        kept = known.contending_only() if known is not None else None
        with self._lock:
            dropped = self._held.pop((tenant_id, subject_id), None)
            if dropped is not None:
                self._size -= _held_size(dropped)
            if kept is None or _held_size(kept) > self.capacity:
                return
            self._held[(tenant_id, subject_id)] = kept
            self._size += _held_size(kept)
            while self._size > self.capacity:
                _, evicted = self._held.popitem(last=False)
                self._size -= _held_size(evicted)


def _held_size(known: KnownMemories) -> int:
    return len(known.by_key) + 1


def memories_citing(
    connection: Connection, tenant_id: str, episode_ids: Collection[uuid.UUID]
) -> list[StoredMemory]:
    """Memories that list any of ``episode_ids`` in their provenance."""
    if not episode_ids:
        return []
    citing = sa.select(_sources.c.memory_id).where(
        _sources.c.tenant_id == tenant_id,
        tables.one_of(_sources.c.episode_id, episode_ids, postgresql=_on_postgresql(connection)),
    )
    rows = list(
        connection.execute(
            sa.select(_memories).where(
                _memories.c.tenant_id == tenant_id, _memories.c.id.in_(citing)
            )
        )
    )
    return with_sources(connection, tenant_id, rows)


def contests_around(
    connection: Connection, tenant_id: str, memory_ids: Collection[uuid.UUID]
) -> tuple[list[StoredMemory], list[Defeat]]:
    """The memories in play that contests connect to ``memory_ids``, and how they lost.

    A supersession record between two memories connects them, whichever won; the walk
    goes on through every memory in play (active, or superseded by a contest: rule in
    ``CONTESTED``), so a chain (A beat B beat C) and the memories that beat them are
    found whole. Returns those memories (``memory_ids`` themselves only if in play) and
    every contest record (rule in ``CONTESTED``) one of them lost.

    One recursive statement per slice of ``memory_ids`` (along the records' indexes on
    winner and loser), then one for the memories and one for their defeats per slice
    of what it found; the walk ends where it finds nothing new.
    """
    if not memory_ids:
        return [], []
    records = _supersessions
    reached = _memories.alias("reached")
    contested = [rule.value for rule in sorted(CONTESTED)]
    in_play = sa.and_(
        reached.c.tenant_id == tenant_id,
        sa.or_(
            reached.c.status == MemoryStatus.ACTIVE.value,
            sa.and_(
                reached.c.status == MemoryStatus.SUPERSEDED.value,
                reached.c.status_rule.in_(contested),
            ),
        ),
    )
    found: set[uuid.UUID] = set()
    for some_ids in tables.in_slices(sorted(memory_ids)):
        walk = (
            sa.select(_memories.c.id)
            .where(
                _memories.c.tenant_id == tenant_id,
                tables.one_of(_memories.c.id, some_ids, postgresql=_on_postgresql(connection)),
            )
            .cte("walk", recursive=True)
        )
        other = sa.case(
            (records.c.winner_memory_id == walk.c.id, records.c.loser_memory_id),
            else_=records.c.winner_memory_id,
        )
        walk = walk.union(
            sa.select(other)
            .select_from(records)
            .join(
                walk,
                # Each side whole, tenant included, so that each is a lookup in its own
                # index; a record without a winner or a loser then joins no memory.
                sa.or_(
                    sa.and_(
                        records.c.tenant_id == tenant_id,
                        records.c.winner_memory_id == walk.c.id,
                    ),
                    sa.and_(
                        records.c.tenant_id == tenant_id,
                        records.c.loser_memory_id == walk.c.id,
                    ),
                ),
            )
            .join(reached, reached.c.id == other)
            .where(in_play)
        )
        found.update(connection.execute(sa.select(walk.c.id)).scalars())
    ids = sorted(found)
    rows = [
        row
        for some_ids in tables.in_slices(ids)
        for row in connection.execute(
            sa.select(_memories).where(
                _memories.c.tenant_id == tenant_id,
                tables.one_of(_memories.c.id, some_ids, postgresql=_on_postgresql(connection)),
                _memories.c.status != MemoryStatus.TOMBSTONED.value,
            )
        )
    ]
    memories = [
        memory
        for memory in with_sources(connection, tenant_id, rows)
        if memory.status is MemoryStatus.ACTIVE or memory.status_rule in CONTESTED
    ]
    defeats = [
        Defeat(
            loser_memory_id=row.loser_memory_id,
            winner_memory_id=row.winner_memory_id,
            winner_memory_key=row.winner_memory_key,
            rule=SupersessionRule(row.rule),
            score=row.score,
            threshold=row.threshold,
            decided_at=row.decided_at,
        )
        for some_ids in tables.in_slices([memory.id for memory in memories])
        for row in connection.execute(
            sa.select(records).where(
                records.c.tenant_id == tenant_id,
                tables.one_of(
                    records.c.loser_memory_id, some_ids, postgresql=_on_postgresql(connection)
                ),
                records.c.winner_memory_id.is_not(None),
                records.c.rule.in_(contested),
            )
        )
    ]
    return memories, defeats


def active_rivals(
    connection: Connection, tenant_id: str, subject_id: str, contenders: Sequence[StoredMemory]
) -> list[StoredMemory]:
    """The subject's active memories a contender may meet in a contest: those of its
    claim keys, and those of its kinds without a claim key for unkeyed contenders."""
    claim_keys = sorted({m.claim_key for m in contenders if m.claim_key is not None})
    kinds = sorted({m.kind.value for m in contenders if m.claim_key is None})
    if not claim_keys and not kinds:
        return []
    query = sa.select(_memories).where(
        _memories.c.tenant_id == tenant_id,
        _memories.c.subject_id == subject_id,
        _memories.c.status == MemoryStatus.ACTIVE.value,
        sa.or_(
            tables.one_of(_memories.c.claim_key, claim_keys, postgresql=_on_postgresql(connection)),
            sa.and_(_memories.c.claim_key.is_(None), _memories.c.kind.in_(kinds)),
        ),
    )
    return with_sources(connection, tenant_id, connection.execute(query).all())


def open_conflicts_of(
    connection: Connection, tenant_id: str, memory_ids: Collection[uuid.UUID]
) -> list[OpenConflict]:
    """The open conflicts either side of which is one of ``memory_ids``."""
    found: dict[uuid.UUID, OpenConflict] = {}
    postgresql = _on_postgresql(connection)
    for some_ids in tables.in_slices(sorted(memory_ids)):
        query = sa.select(_conflicts).where(
            _conflicts.c.tenant_id == tenant_id,
            _conflicts.c.status == ConflictStatus.OPEN.value,
            sa.or_(
                tables.one_of(_conflicts.c.first_memory_id, some_ids, postgresql=postgresql),
                tables.one_of(_conflicts.c.second_memory_id, some_ids, postgresql=postgresql),
            ),
        )
        for row in connection.execute(query).all():
            found[row.id] = conflict_record(row).conflict
    return [found[key] for key in sorted(found)]


def bump_memory_version(
    connection: Connection, tenant_id: str, subject_id: str, now: datetime
) -> None:
    """Mark the subject's memories changed: a fresh version, and ``changed_at`` moved
    forward to ``now`` (never back: a clock behind the last change leaves it)."""
    bump_memory_versions(connection, tenant_id, [subject_id], now)


def bump_memory_versions(
    connection: Connection, tenant_id: str, subject_ids: Collection[str], now: datetime
) -> None:
    """:func:`bump_memory_version` for each of ``subject_ids``, in one statement."""
    if not subject_ids:
        return
    insert = tables.upsert(_versions, postgresql=_on_postgresql(connection))
    newer = sa.case(
        (insert.excluded.changed_at > _versions.c.changed_at, insert.excluded.changed_at),
        else_=_versions.c.changed_at,
    )
    connection.execute(
        insert.on_conflict_do_update(
            index_elements=[_versions.c.tenant_id, _versions.c.subject_id],
            set_={"version": insert.excluded.version, "changed_at": newer},
        ),
        [
            {
                "tenant_id": tenant_id,
                "subject_id": subject_id,
                "version": uuid.uuid4().hex,
                "changed_at": now,
            }
            for subject_id in sorted(subject_ids)
        ],
    )


def subjects_citing(
    connection: Connection, tenant_id: str, episode_ids: Collection[uuid.UUID]
) -> set[str]:
    """The subjects of the memories that list any of ``episode_ids`` in their provenance."""
    subjects: set[str] = set()
    for some_ids in tables.in_slices(sorted(episode_ids)):
        query = (
            sa.select(_sources.c.subject_id)
            .where(
                _sources.c.tenant_id == tenant_id,
                tables.one_of(
                    _sources.c.episode_id, some_ids, postgresql=_on_postgresql(connection)
                ),
            )
            .distinct()
        )
        subjects.update(connection.execute(query).scalars())
    return subjects


def source_standings(
    connection: Connection,
    tenant_id: str,
    memories: Sequence[StoredMemory],
    recompiled: Mapping[uuid.UUID, Collection[str]],
) -> SourceEvidence:
    """Where every source episode of each memory stands now, and when it asserted it.

    ``recompiled`` maps the episodes being compiled in the caller's transaction to the
    memory keys their current revisions derive: such an episode still supports a memory
    of its subject only if it derives it again (at its current revision's time). Any
    other episode supports a memory while the revision that last asserted it is the one
    compiled, or while its current revision waits for its own compile to decide; it
    asserted the memory when that revision occurred.
    """
    by_id = {memory.id: memory for memory in memories}
    standings: dict[uuid.UUID, dict[uuid.UUID, SourceStanding]] = defaultdict(dict)
    asserted_at: dict[uuid.UUID, dict[uuid.UUID, datetime]] = defaultdict(dict)
    asserting = _revisions.alias("asserting")
    joined = _sources.outerjoin(
        _episodes,
        sa.and_(
            _episodes.c.tenant_id == _sources.c.tenant_id,
            _episodes.c.id == _sources.c.episode_id,
        ),
    ).outerjoin(
        asserting,
        sa.and_(
            asserting.c.tenant_id == _sources.c.tenant_id,
            asserting.c.episode_id == _sources.c.episode_id,
            asserting.c.revision == _sources.c.episode_revision,
        ),
    )
    columns = sa.select(
        _sources.c.memory_id,
        _sources.c.episode_id,
        _sources.c.episode_revision,
        _episodes.c.revision,
        _episodes.c.compiled_revision,
        _episodes.c.subject_id,
        _episodes.c.deleted_at,
        _episodes.c.occurred_at,
        # An earlier revision is kept in episode_revisions; the current one is the row.
        asserting.c.occurred_at,
    ).select_from(joined)
    for some_ids in tables.in_slices(sorted(by_id)):
        query = columns.where(
            _sources.c.tenant_id == tenant_id,
            tables.one_of(_sources.c.memory_id, some_ids, postgresql=_on_postgresql(connection)),
        )
        for row in connection.execute(query).all():
            source = _Source(*row)
            standing = _standing(source, by_id[source.memory_id], recompiled)
            standings[source.memory_id][source.episode_id] = standing
            if standing is SourceStanding.SUPPORTS and source.occurred_at is not None:
                asserted_at[source.memory_id][source.episode_id] = (
                    source.occurred_at
                    if source.episode_id in recompiled
                    else source.asserting_occurred_at or source.occurred_at
                )
    return SourceEvidence(standings, asserted_at)


class _Source(NamedTuple):
    """One provenance row and the current state of its episode (``None``s: gone)."""

    memory_id: uuid.UUID
    episode_id: uuid.UUID
    episode_revision: int
    revision: int | None
    compiled_revision: int | None
    subject_id: str | None
    deleted_at: datetime | None
    occurred_at: datetime | None
    asserting_occurred_at: datetime | None


def _standing(
    row: _Source,
    memory: StoredMemory,
    recompiled: Mapping[uuid.UUID, Collection[str]],
) -> SourceStanding:
    if row.revision is None or row.compiled_revision is None or row.deleted_at is not None:
        return SourceStanding.DELETED  # a tombstone, or its subject was deleted
    if row.subject_id != memory.subject_id:
        return SourceStanding.MOVED
    if row.episode_id in recompiled:
        rederived = memory.memory_key in recompiled[row.episode_id]
        return SourceStanding.SUPPORTS if rederived else SourceStanding.REVISED_AWAY
    if row.compiled_revision < row.revision or row.episode_revision == row.compiled_revision:
        return SourceStanding.SUPPORTS
    return SourceStanding.REVISED_AWAY


def _insert_provenance(
    connection: Connection,
    tenant_id: str,
    provenance: Sequence[tuple[uuid.UUID, str, uuid.UUID]],
    episode_revisions: Mapping[uuid.UUID, int],
    now: datetime,
    *,
    ignore: bool,
) -> None:
    """Insert ``(memory id, its subject, episode id)`` rows of provenance, each at the
    revision of its episode being compiled (0 for an episode not among them)."""
    tables.insert_rows(
        connection,
        _sources,
        (
            {
                "tenant_id": tenant_id,
                "memory_id": memory_id,
                "episode_id": episode_id,
                "subject_id": subject_id,
                "episode_revision": episode_revisions.get(episode_id, 0),
                "added_at": now,
            }
            for memory_id, subject_id, episode_id in provenance
        ),
        ignore=ignore,
    )


def _label_new_memories(
    connection: Connection,
    tenant_id: str,
    created: Sequence[StoredMemory],
    rules: Sequence[LabelRule],
    now: datetime,
) -> None:
    """The compile rules' labels of the memories just created (new ids: no row yet)."""
    if not rules:
        return
    rows = []
    for memory in created:
        labels = LabelRule.labels_of(
            rules,
            {
                "kind": memory.kind.value,
                "claim_key": memory.claim_key,
                "content": memory.content,
                "metadata": dict(memory.metadata),
            },
        )
        if labels:
            rows.append(
                {
                    "tenant_id": tenant_id,
                    "memory_id": memory.id,
                    "subject_id": memory.subject_id,
                    "labels": [],
                    "rule_labels": list(labels),
                    "updated_at": now,
                }
            )
    tables.insert_rows(connection, tables.memory_labels, rows, ignore=False)


def apply_change_set(
    connection: Connection,
    tenant_id: str,
    changes: ChangeSet,
    episode_revisions: Mapping[uuid.UUID, int],
    now: datetime,
    job_id: str | None = None,
    *,
    subject_id: str,
    analyze_memories: bool = False,
    label_rules: Sequence[LabelRule] = (),
) -> None:
    """Write ``changes`` to ``subject_id``'s memories in the caller's transaction, as
    ``compile.apply_changes`` would, and bump the subject's memory version (unless the
    change set is empty: its reassertions alone are still noted, and change nothing a
    reader sees).

    ``job_id`` is the compile that created the new memories (kept on their rows).
    ``label_rules`` (the compile rules') label the new memories, in the same
    transaction: a memory is never readable before its labels are.
    ``analyze_memories`` (PostgreSQL only) ANALYZEs ``memories`` between the new
    memories and their provenance: the provenance's foreign-key check then plans
    against the grown table, not against a plan cached while it was tiny.

    Repeats: provenance added to existing memories and conflicts are inserted with "on
    conflict do nothing", and a status change only applies to a memory still in its
    ``from_status``, so applying a change set that creates no memory twice leaves the
    store as applying it once (apart from the version, which changes again: readers
    recompute, and find the same state). Conflicts: a memory to create, or its
    provenance, that the store already holds fails on its unique key, and the caller's
    transaction rolls back.
    """
    if not changes.is_empty:
        bump_memory_version(connection, tenant_id, subject_id, now)
    if changes.memories_to_create:
        tables.insert_rows(
            connection,
            _memories,
            [
                {
                    "tenant_id": tenant_id,
                    "id": memory.id,
                    "subject_id": memory.subject_id,
                    "memory_key": memory.memory_key,
                    "kind": memory.kind.value,
                    "content": memory.content,
                    "claim_key": memory.claim_key,
                    "claim_value": memory.claim_value,
                    "confidence": memory.confidence,
                    "negated": memory.negated,
                    "explicit_change": memory.explicit_change,
                    "status": memory.status.value,
                    "status_rule": memory.status_rule.value if memory.status_rule else None,
                    "valid_from": memory.valid_from,
                    "valid_to": memory.valid_to,
                    "asserted_at": memory.last_asserted,
                    "metadata": dict(memory.metadata),
                    "job_id": job_id,
                    "created_at": now,
                    "updated_at": now,
                    "status_changed_at": now,
                }
                for memory in changes.memories_to_create
            ],
            ignore=False,
        )
        _label_new_memories(connection, tenant_id, changes.memories_to_create, label_rules, now)
        if analyze_memories and _on_postgresql(connection):
            # In this transaction: ANALYZE counts its own uncommitted rows as live, and
            # it invalidates the cached plans on the table before the inserts below.
            connection.exec_driver_sql(_ANALYZE_MEMORY_KEYS)
    # A new memory's provenance is as new as the memory: written as the memory is, a
    # repeat failing on its key (on PostgreSQL by COPY, which skips nothing).
    _insert_provenance(
        connection,
        tenant_id,
        [
            (memory.id, memory.subject_id, episode_id)
            for memory in changes.memories_to_create
            for episode_id in memory.source_episode_ids
        ],
        episode_revisions,
        now,
        ignore=False,
    )
    if changes.provenance_to_add:
        connection.execute(
            _memories.update()
            .where(_memories.c.tenant_id == tenant_id, _memories.c.id == sa.bindparam("b_id"))
            .values(
                valid_from=sa.bindparam("valid_from"),
                asserted_at=sa.bindparam("asserted_at"),
                explicit_change=sa.bindparam("explicit_change"),
                updated_at=now,
            ),
            [
                {
                    "b_id": addition.memory_id,
                    "valid_from": addition.valid_from,
                    "asserted_at": addition.asserted_at,
                    "explicit_change": addition.explicit_change,
                }
                for addition in changes.provenance_to_add
            ],
        )
        subject_of = {
            memory_id: subject_id
            for memory_id, subject_id in connection.execute(
                sa.select(_memories.c.id, _memories.c.subject_id).where(
                    _memories.c.tenant_id == tenant_id,
                    tables.one_of(
                        _memories.c.id,
                        [addition.memory_id for addition in changes.provenance_to_add],
                        postgresql=_on_postgresql(connection),
                    ),
                )
            )
        }
        _insert_provenance(
            connection,
            tenant_id,
            [
                (addition.memory_id, subject_of[addition.memory_id], episode_id)
                for addition in changes.provenance_to_add
                for episode_id in addition.episode_ids
            ],
            episode_revisions,
            now,
            ignore=True,
        )
    asserted_again = [
        {"b_memory": again.memory_id, "b_episode": episode_id, "b_revision": revision}
        for again in changes.reassertions
        for episode_id in again.episode_ids
        if (revision := episode_revisions.get(episode_id)) is not None
    ]
    if asserted_again:
        # The episode asserted the memory again, at the revision being compiled.
        connection.execute(
            _sources.update()
            .where(
                _sources.c.tenant_id == tenant_id,
                _sources.c.memory_id == sa.bindparam("b_memory"),
                _sources.c.episode_id == sa.bindparam("b_episode"),
            )
            .values(episode_revision=sa.bindparam("b_revision")),
            asserted_again,
        )
    if changes.status_changes:
        connection.execute(
            tables.update_each_if(_memories, tenant_id, "status").values(
                status=sa.bindparam("to_status"),
                valid_to=sa.bindparam("valid_to"),
                status_rule=sa.bindparam("rule"),
                status_changed_at=now,
                updated_at=now,
            ),
            [
                {
                    "b_id": change.memory_id,
                    "b_guard": change.from_status.value,
                    "to_status": change.to_status.value,
                    "valid_to": change.valid_to,
                    "rule": change.rule.value if change.rule else None,
                }
                for change in changes.status_changes
            ],
        )
    # Transaction time: what changed is appended to the history as it now stands.
    record_memory_history(
        connection,
        tenant_id,
        {
            *(memory.id for memory in changes.memories_to_create),
            *(addition.memory_id for addition in changes.provenance_to_add),
            *(change.memory_id for change in changes.status_changes),
        },
        now,
    )
    # The records' rows are made as they are written, a statement's worth at a time: a
    # compile of many thousand episodes can make as many records, and rendering them all
    # at once costs memory for nothing.
    recorded = _RecordedIds()
    tables.insert_rows(
        connection,
        _supersessions,
        (
            {
                "tenant_id": tenant_id,
                "id": record_id,
                "subject_id": record.subject_id,
                "rule": record.rule.value,
                "claim_key": record.claim_key,
                "score": record.score,
                "threshold": record.threshold,
                "winner_memory_id": record.winner_memory_id,
                "winner_memory_key": record.winner_memory_key,
                "loser_memory_id": record.loser_memory_id,
                "loser_memory_key": record.loser_memory_key,
                "winner_episode_ids": recorded.of(record.winner_episode_ids),
                "loser_episode_ids": recorded.of(record.loser_episode_ids),
                "winner_episode_count": len(record.winner_episode_ids),
                "loser_episode_count": len(record.loser_episode_ids),
                "job_id": record.job_id,
                "decided_at": record.decided_at,
            }
            for record_id, record in zip(
                random_uuids(len(changes.supersessions)), changes.supersessions, strict=True
            )
        ),
        ignore=False,
    )
    if changes.retracted_records:
        # A re-decision found these no longer true of the evidence (see ``rederive``).
        for some_ids in tables.in_slices(changes.retracted_records):
            connection.execute(
                _supersessions.delete().where(
                    _supersessions.c.tenant_id == tenant_id,
                    tables.one_of(
                        _supersessions.c.id, some_ids, postgresql=_on_postgresql(connection)
                    ),
                )
            )
    if changes.open_conflicts:
        insert = tables.upsert(_conflicts, postgresql=_on_postgresql(connection))
        # Found again after it was resolved because a side was retired and came back:
        # open again, as found now. An open one stays as first found.
        reopen = {
            name: insert.excluded[name]
            for name in ("rule", "score", "threshold", "status", "job_id", "detected_at")
        }
        reopen.update(resolved_at=None, chosen_memory_id=None)
        connection.execute(
            insert.on_conflict_do_update(
                index_elements=[_conflicts.c.tenant_id, _conflicts.c.id],
                set_=reopen,
                where=_conflicts.c.status == ConflictStatus.RESOLVED.value,
            ),
            [
                {
                    "tenant_id": tenant_id,
                    "id": conflict.id,
                    "subject_id": conflict.subject_id,
                    "kind": conflict.kind.value,
                    "claim_key": conflict.claim_key,
                    "rule": conflict.rule.value,
                    "score": conflict.score,
                    "threshold": conflict.threshold,
                    "first_memory_id": conflict.memory_ids[0],
                    "second_memory_id": conflict.memory_ids[1],
                    "first_memory_key": conflict.memory_keys[0],
                    "second_memory_key": conflict.memory_keys[1],
                    "first_content": conflict.contents[0],
                    "second_content": conflict.contents[1],
                    "status": ConflictStatus.OPEN.value,
                    "job_id": conflict.job_id,
                    "detected_at": conflict.detected_at,
                    "resolved_at": None,
                    "chosen_memory_id": None,
                }
                for conflict in changes.open_conflicts
            ],
        )
    if changes.resolved_conflict_ids:
        chosen = {
            record.winner_memory_id
            for record in changes.supersessions
            if record.rule is SupersessionRule.MANUAL
        }
        connection.execute(
            _conflicts.update()
            .where(
                _conflicts.c.tenant_id == tenant_id,
                tables.one_of(
                    _conflicts.c.id,
                    changes.resolved_conflict_ids,
                    postgresql=_on_postgresql(connection),
                ),
                _conflicts.c.status == ConflictStatus.OPEN.value,
            )
            .values(
                status=ConflictStatus.RESOLVED.value,
                resolved_at=now,
                chosen_memory_id=next(iter(chosen)) if len(chosen) == 1 else None,
            )
        )
    record_conflict_history(
        connection,
        tenant_id,
        {
            *(conflict.id for conflict in changes.open_conflicts),
            *changes.resolved_conflict_ids,
        },
        now,
    )


@dataclass(frozen=True, slots=True)
class ConflictRecord:
    """A stored conflict: open until a person (or a later compile) resolves it."""

    conflict: OpenConflict
    status: ConflictStatus
    resolved_at: datetime | None
    chosen_memory_id: uuid.UUID | None


def conflict_record(row: Row[Any]) -> ConflictRecord:
    return ConflictRecord(
        conflict=OpenConflict(
            id=row.id,
            subject_id=row.subject_id,
            kind=MemoryKind(row.kind),
            claim_key=row.claim_key,
            rule=SupersessionRule(row.rule),
            score=row.score,
            threshold=row.threshold,
            memory_ids=(row.first_memory_id, row.second_memory_id),
            memory_keys=(row.first_memory_key, row.second_memory_key),
            contents=(row.first_content, row.second_content),
            job_id=row.job_id,
            detected_at=row.detected_at,
        ),
        status=ConflictStatus(row.status),
        resolved_at=row.resolved_at,
        chosen_memory_id=row.chosen_memory_id,
    )


def load_conflict(
    connection: Connection, tenant_id: str, conflict_id: uuid.UUID
) -> ConflictRecord | None:
    """One conflict of the tenant, in any status, or None."""
    query = sa.select(_conflicts).where(
        _conflicts.c.tenant_id == tenant_id, _conflicts.c.id == conflict_id
    )
    row = connection.execute(query).first()
    return conflict_record(row) if row is not None else None


def delete_subject_memories(connection: Connection, tenant_id: str, subject_id: str) -> int:
    """Delete a subject's memories with their provenance, records, conflicts and
    version."""
    for table in (
        _sources,
        tables.memory_history,
        _supersessions,
        tables.conflict_history,
        _conflicts,
        _versions,
    ):
        connection.execute(
            table.delete().where(table.c.tenant_id == tenant_id, table.c.subject_id == subject_id)
        )
    result = connection.execute(
        _memories.delete().where(
            _memories.c.tenant_id == tenant_id, _memories.c.subject_id == subject_id
        )
    )
    return result.rowcount


@dataclass(frozen=True, slots=True)
class MemoriesForgotten:
    """What forgetting episodes did to the memories derived from them."""

    deleted: int
    """Memories every source of which was forgotten: deleted with their provenance."""
    kept: int
    """Memories that lost a source and keep their others (and their status)."""
    reactivated: int
    """Memories a deleted memory had superseded, and nothing else had: active again."""
    supersessions: int
    """Supersession records deleted because one of their memories was."""
    conflicts: int
    """Conflicts (open or resolved) deleted because one of their memories was."""
    subjects: frozenset[str]
    """Subjects whose memories changed (their memory version moved)."""


def forget_episodes(
    connection: Connection, tenant_id: str, episode_ids: Sequence[uuid.UUID], now: datetime
) -> MemoriesForgotten:
    """Take ``episode_ids`` (about to be deleted) out of the memories, in the caller's
    transaction, a constant number of statements per slice of ids.

    Their provenance rows go. A memory left with no source is deleted, and with it the
    supersession records and conflicts it is a side of (a record is a decision between
    two memories; with one gone it decides nothing). A memory it had superseded, and no
    other surviving memory had, is active again: what is left of the evidence no longer
    contradicts it, as a compile of the remaining episodes would find. A memory that
    keeps another source stays as it is; the supersession records it is a side of drop
    the forgotten ids from their episode lists (their counts say what the sides had
    when the decision was made). Every subject whose memories changed gets a new memory
    version. Repeats: forgetting the same episodes again changes nothing.
    """
    forgotten = {str(episode_id) for episode_id in episode_ids}
    touched: dict[uuid.UUID, str] = {}
    for some_ids in tables.in_slices(episode_ids):
        citing = sa.select(_sources.c.memory_id, _sources.c.subject_id).where(
            _sources.c.tenant_id == tenant_id, _sources.c.episode_id.in_(some_ids)
        )
        touched.update((row.memory_id, row.subject_id) for row in connection.execute(citing).all())
        connection.execute(
            _sources.delete().where(
                _sources.c.tenant_id == tenant_id, _sources.c.episode_id.in_(some_ids)
            )
        )
    still_sourced: set[uuid.UUID] = set()
    for some_ids in tables.in_slices(sorted(touched)):
        remaining = sa.select(_sources.c.memory_id).where(
            _sources.c.tenant_id == tenant_id, _sources.c.memory_id.in_(some_ids)
        )
        still_sourced.update(connection.execute(remaining.distinct()).scalars())
    orphans = sorted(set(touched) - still_sourced)
    losers: set[uuid.UUID] = set()
    deleted = supersessions = conflicts = 0
    for some_ids in tables.in_slices(orphans):
        beaten = sa.select(_supersessions.c.loser_memory_id).where(
            _supersessions.c.tenant_id == tenant_id,
            _supersessions.c.winner_memory_id.in_(some_ids),
        )
        losers.update(connection.execute(beaten).scalars())
        sides = _naming(_supersessions, tenant_id, some_ids, "winner", "loser")
        supersessions += connection.execute(_supersessions.delete().where(*sides)).rowcount
        sides = _naming(_conflicts, tenant_id, some_ids, "first", "second")
        conflicts += connection.execute(_conflicts.delete().where(*sides)).rowcount
        deleted += connection.execute(
            _memories.delete().where(
                _memories.c.tenant_id == tenant_id, _memories.c.id.in_(some_ids)
            )
        ).rowcount
    reactivated = 0
    still_beaten = sa.exists().where(
        _supersessions.c.tenant_id == _memories.c.tenant_id,
        _supersessions.c.loser_memory_id == _memories.c.id,
    )
    for some_ids in tables.in_slices(sorted(losers - set(orphans))):
        reactivated += connection.execute(
            _memories.update()
            .where(
                _memories.c.tenant_id == tenant_id,
                _memories.c.id.in_(some_ids),
                _memories.c.status == MemoryStatus.SUPERSEDED.value,
                ~still_beaten,
            )
            .values(
                status=MemoryStatus.ACTIVE.value,
                valid_to=None,
                status_rule=None,
                status_changed_at=now,
                updated_at=now,
            )
        ).rowcount
    record_memory_history(connection, tenant_id, losers - set(orphans), now)
    for some_ids in tables.in_slices(sorted(still_sourced)):
        _drop_from_records(connection, tenant_id, some_ids, forgotten)
    subjects = frozenset(touched.values())
    bump_memory_versions(connection, tenant_id, subjects, now)
    return MemoriesForgotten(
        deleted=deleted,
        kept=len(still_sourced),
        reactivated=reactivated,
        supersessions=supersessions,
        conflicts=conflicts,
        subjects=subjects,
    )


def _naming(
    table: sa.Table, tenant_id: str, memory_ids: Sequence[uuid.UUID], *sides: str
) -> tuple[sa.ColumnElement[bool], ...]:
    """The tenant's rows of ``table`` with one of ``memory_ids`` as its ``{side}_memory_id``
    for any of ``sides``."""
    named = (table.c[f"{side}_memory_id"].in_(memory_ids) for side in sides)
    return table.c.tenant_id == tenant_id, sa.or_(*named)


def _drop_from_records(
    connection: Connection,
    tenant_id: str,
    memory_ids: Sequence[uuid.UUID],
    forgotten: AbstractSet[str],
) -> None:
    """Take the ``forgotten`` episode ids out of the supersession records of which a
    memory in ``memory_ids`` is a side: one read, and one update for those that change."""
    records = sa.select(
        _supersessions.c.id, _supersessions.c.winner_episode_ids, _supersessions.c.loser_episode_ids
    ).where(*_naming(_supersessions, tenant_id, memory_ids, "winner", "loser"))
    changed = [
        {
            "b_id": row.id,
            "winners": [e for e in row.winner_episode_ids if e not in forgotten],
            "losers": [e for e in row.loser_episode_ids if e not in forgotten],
        }
        for row in connection.execute(records)
        if not forgotten.isdisjoint(row.winner_episode_ids)
        or not forgotten.isdisjoint(row.loser_episode_ids)
    ]
    if changed:
        connection.execute(
            _supersessions.update()
            .where(
                _supersessions.c.tenant_id == tenant_id, _supersessions.c.id == sa.bindparam("b_id")
            )
            .values(
                winner_episode_ids=sa.bindparam("winners"), loser_episode_ids=sa.bindparam("losers")
            ),
            changed,
        )


def _on_postgresql(connection: Connection) -> bool:
    return connection.dialect.name == "postgresql"
