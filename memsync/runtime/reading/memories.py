"""Reading memories, supersession records and conflicts (always scoped to a tenant)."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache
from itertools import pairwise
from typing import Annotated, Any, Literal, TypeAlias, TypeVar

import sqlalchemy as sa
from pydantic import Field
from sqlalchemy.engine import Connection

from memsync.clock import IsoDatetime
from memsync.compile.ranking import RankingEntry
from memsync.compile.resolve import OpenConflict
from memsync.compile.similarity import tokens
from memsync.compile.types import (
    ConflictStatus,
    MemoryKind,
    MemoryStatus,
    StoredMemory,
    SupersessionRule,
)
from memsync.runtime.compiling.memories import (
    ConflictRecord,
    conflict_record,
    memories_by_id,
    with_sources,
)
from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store

__all__ = [
    "EarlierVersion",
    "MemoryRepository",
    "MemoryVersion",
    "RankingInputs",
    "SupersessionRecord",
]

_memories = tables.memories
_sources = tables.memory_sources
_supersessions = tables.supersessions
_conflicts = tables.conflicts
_versions = tables.memory_versions
_history = tables.memory_history


@dataclass(frozen=True, slots=True)
class SupersessionRecord:
    """A stored supersession record, as the inspector and the API show it (without the
    subject, which the report names once)."""

    id: uuid.UUID
    subject_id: Annotated[str, Field(exclude=True)]
    rule: str
    claim_key: str | None
    score: float | None
    threshold: float | None
    winner_memory_id: uuid.UUID | None
    loser_memory_id: uuid.UUID | None
    winner_episode_ids: list[str]
    loser_episode_ids: list[str]
    winner_episode_count: int
    loser_episode_count: int
    job_id: str | None
    decided_at: IsoDatetime


@dataclass(frozen=True, slots=True)
class EarlierVersion:
    """A memory as the store held it from ``recorded_at`` until ``replaced_at``, when a
    later change (a supersession, a reinstatement, older evidence) replaced it."""

    memory_id: uuid.UUID
    recorded_at: IsoDatetime
    replaced_at: IsoDatetime
    status: MemoryStatus
    status_rule: SupersessionRule | None
    valid_from: IsoDatetime
    valid_to: IsoDatetime | None
    asserted_at: IsoDatetime


@dataclass(frozen=True, slots=True)
class MemoryVersion:
    """The state a subject's memories are in (a new ``version`` per change) and when
    they last changed."""

    version: str
    changed_at: datetime


@dataclass(frozen=True, slots=True)
class RankingInputs:
    """What the read path precomputes for a subject at one version: its active memories
    as ranking entries and their texts, its open conflicts, and the episodes a bundle
    must not show (the sources of its memories that are not active, or are in an open
    conflict)."""

    version: MemoryVersion | None
    entries: list[RankingEntry]
    texts: dict[uuid.UUID, str]
    """Each entry's text, filed in the order of ``entries``."""
    open_conflicts: list[OpenConflict]
    withheld: frozenset[uuid.UUID]


class MemoryRepository:
    """Tenant-scoped reads of memories, supersession records and conflicts."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def memories(
        self,
        tenant_id: str,
        subject_id: str,
        *,
        statuses: Iterable[MemoryStatus] | None = (MemoryStatus.ACTIVE,),
        kind: MemoryKind | None = None,
        as_of: datetime | None = None,
        limit: int | None = None,
        offset: int = 0,
        newest_first: bool = False,
    ) -> list[StoredMemory]:
        """Memories of a subject ordered by (valid_from, id).

        With ``as_of``, the memories that were active at that moment, as the store held
        them then (their history, and the sources they had).
        """
        if as_of is not None:
            query = _as_it_stood(tenant_id, subject_id, as_of)
            then = query.selected_columns
            query = query.where(then.status == MemoryStatus.ACTIVE.value)
            valid_from = then.valid_from
        else:
            query = sa.select(_memories).where(
                _memories.c.tenant_id == tenant_id, _memories.c.subject_id == subject_id
            )
            valid_from = _memories.c.valid_from
            if statuses is not None:
                query = query.where(_memories.c.status.in_([status.value for status in statuses]))
        if kind is not None:
            query = query.where(_memories.c.kind == kind)
        order = (valid_from, _memories.c.id)
        query = query.order_by(*(c.desc() for c in order) if newest_first else order)
        if limit is not None:
            query = query.limit(limit).offset(offset)
        with self._store.read() as connection:
            rows = connection.execute(query).all()
            return with_sources(connection, tenant_id, rows, as_of=as_of)

    def version(self, tenant_id: str, subject_id: str) -> MemoryVersion | None:
        """The subject's memory version; None if it never had a memory."""
        with self._store.read() as connection:
            return _version(connection, tenant_id, subject_id)

    def ranking_inputs(
        self,
        tenant_id: str,
        subject_id: str,
        *,
        version_read: MemoryVersion | None,
        earlier: RankingInputs | None = None,
    ) -> RankingInputs:
        """The subject's current :class:`RankingInputs`, all read at one version.

        ``earlier`` (the subject's inputs at an earlier version) lends the entries of
        the memories it holds as they still are (same content, kind and times), so only
        what a change touched is tokenised and built again: the inputs are equal with or
        without it.

        Writers commit between statements (PostgreSQL reads each statement's own
        snapshot), so the version is read before and after (the after in the inputs'
        last statement), and the reads repeat until the two agree: what is returned is
        what that version holds.

        ``version_read`` is the version the caller has just read (the one it found its
        index stale at): the first attempt takes it as the version before instead of
        reading it again. A write committed since it was read moves the version, so the
        first attempt's reads then disagree with it and are repeated, as any write
        between would make them.
        """
        for attempt in range(_CONSISTENT_READ_ATTEMPTS):
            with self._store.read() as connection:
                before = (
                    version_read if attempt == 0 else _version(connection, tenant_id, subject_id)
                )
                inputs, after = _ranking_inputs(connection, tenant_id, subject_id, before, earlier)
                if after == before:
                    return inputs
        # The subject changes faster than it can be read; what was read is still a valid
        # recent state, only not one to keep under a version.
        return replace(inputs, version=None)

    def memories_at(self, tenant_id: str, subject_id: str, as_of: datetime) -> list[StoredMemory]:
        """Every memory of the subject created by ``as_of``, as the store held it then:
        its status, validity and assertion time from its history, its sources those
        added by then. Later changes (a supersession, a backfill's older evidence, a
        reinstatement) do not show."""
        query = _as_it_stood(tenant_id, subject_id, as_of)
        query = query.order_by(query.selected_columns.valid_from, _memories.c.id)
        with self._store.read() as connection:
            rows = connection.execute(query).all()
            return with_sources(connection, tenant_id, rows, as_of=as_of)

    def get(
        self, tenant_id: str, memory_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, StoredMemory]:
        with self._store.read() as connection:
            found = memories_by_id(connection, tenant_id, memory_ids)
        return {memory.id: memory for memory in found}

    def search(
        self,
        tenant_id: str,
        subject_id: str,
        *,
        kind: str | None,
        text: str | None,
        limit: int,
    ) -> list[StoredMemory]:
        """Active memories whose content contains every word of ``text`` (case-folded).

        ``kind`` is a plain filter, as in Statewave: a kind memsync never derives
        (``procedure``) matches nothing rather than being an error.
        """
        query = sa.select(_memories).where(
            _memories.c.tenant_id == tenant_id,
            _memories.c.subject_id == subject_id,
            _memories.c.status == MemoryStatus.ACTIVE.value,
        )
        if kind is not None:
            query = query.where(_memories.c.kind == kind)
        for word in (text or "").lower().split():
            escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            query = query.where(
                sa.func.lower(_memories.c.content).like(f"%{escaped}%", escape="\\")
            )
        query = query.order_by(_memories.c.asserted_at.desc(), _memories.c.id).limit(limit)
        with self._store.read() as connection:
            rows = connection.execute(query).all()
            return with_sources(connection, tenant_id, rows)

    def memories_held(
        self,
        tenant_id: str,
        subject_id: str,
        valid_at: datetime,
        *,
        as_of: datetime | None = None,
    ) -> list[StoredMemory]:
        """The subject's memories that held at valid time ``valid_at``, ordered by
        (valid_from, id): not tombstoned, ``valid_from <= valid_at`` and ``valid_at``
        before ``valid_to`` (if any), whatever their status — a memory superseded since
        was still true then. By everything known now, or with ``as_of`` by what the
        store said at that moment (:meth:`memories_at`: the bitemporal question).

        One query (and one for the sources); asking again with the store unchanged gives
        the same list."""
        query = (
            _as_it_stood(tenant_id, subject_id, as_of)
            if as_of is not None
            else sa.select(_memories).where(
                _memories.c.tenant_id == tenant_id, _memories.c.subject_id == subject_id
            )
        )
        row = query.selected_columns
        query = query.where(
            row.status != MemoryStatus.TOMBSTONED.value,
            row.valid_from <= valid_at,
            sa.or_(row.valid_to.is_(None), row.valid_to > valid_at),
        ).order_by(row.valid_from, _memories.c.id)
        with self._store.read() as connection:
            rows = connection.execute(query).all()
            return with_sources(connection, tenant_id, rows, as_of=as_of)

    def search_at(
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
        """:meth:`search` over another set, newest assertion first: with ``as_of``
        alone, the memories active then as the store held them (assertion times and
        sources then); with ``valid_at``, those that held at that valid time
        (:meth:`memories_held`, as of ``as_of`` if given). Repeats give the same list."""
        candidates = (
            self.memories_held(tenant_id, subject_id, valid_at, as_of=as_of)
            if valid_at is not None
            else self.memories(tenant_id, subject_id, as_of=as_of)
        )
        words = (text or "").lower().split()
        found = [
            memory
            for memory in candidates
            if (kind is None or memory.kind == kind)
            and all(word in memory.content.lower() for word in words)
        ]
        found.sort(key=lambda memory: memory.id)
        found.sort(key=lambda memory: memory.last_asserted, reverse=True)
        return found[:limit]

    def count_by_subject(self, tenant_id: str, subject_ids: Collection[str]) -> dict[str, int]:
        """Active memories per subject."""
        if not subject_ids:
            return {}
        query = (
            sa.select(_memories.c.subject_id, sa.func.count())
            .where(
                _memories.c.tenant_id == tenant_id,
                _memories.c.subject_id.in_(list(subject_ids)),
                _memories.c.status == MemoryStatus.ACTIVE.value,
            )
            .group_by(_memories.c.subject_id)
        )
        with self._store.read() as connection:
            return {subject: count for subject, count in connection.execute(query).all()}

    def count_not_asserted_since(self, tenant_id: str, subject_id: str, moment: datetime) -> int:
        """The subject's active memories that nothing has asserted after ``moment`` (one
        count over the index of active memories by assertion time)."""
        query = sa.select(sa.func.count()).where(
            _memories.c.tenant_id == tenant_id,
            _memories.c.subject_id == subject_id,
            _memories.c.status == MemoryStatus.ACTIVE.value,
            _memories.c.asserted_at <= moment,
        )
        with self._store.read() as connection:
            return int(connection.execute(query).scalar_one())

    def conflicts(
        self,
        tenant_id: str,
        subject_id: str | None = None,
        *,
        status: ConflictStatus | None = ConflictStatus.OPEN,
        as_of: datetime | None = None,
    ) -> list[ConflictRecord]:
        """Conflicts in ``status`` (every status: ``None``), oldest first. With
        ``as_of``: those detected by that moment in that status then, as the store held
        them then (from their history: one resolved and opened again since shows as it
        was)."""
        if as_of is not None:
            query = _conflicts_then(tenant_id, subject_id, as_of)
            then = query.selected_columns
            if status is not None:
                query = query.where(then.status == status)
            query = query.order_by(then.detected_at, _conflicts.c.id)
        else:
            query = sa.select(_conflicts).where(_conflicts.c.tenant_id == tenant_id)
            if subject_id is not None:
                query = query.where(_conflicts.c.subject_id == subject_id)
            if status is not None:
                query = query.where(_conflicts.c.status == status)
            query = query.order_by(_conflicts.c.detected_at, _conflicts.c.id)
        with self._store.read() as connection:
            return [conflict_record(row) for row in connection.execute(query).all()]

    def conflict(self, tenant_id: str, conflict_id: uuid.UUID) -> ConflictRecord | None:
        query = sa.select(_conflicts).where(
            _conflicts.c.tenant_id == tenant_id, _conflicts.c.id == conflict_id
        )
        with self._store.read() as connection:
            row = connection.execute(query).first()
        return conflict_record(row) if row is not None else None

    def ids_starting_with(
        self, tenant_id: str, what: Literal["memory", "conflict"], prefix: str
    ) -> list[uuid.UUID]:
        """Ids of the tenant's memories or conflicts that start with ``prefix`` (two at
        most: enough to tell one from several), for shortened ids; ``ValueError`` when
        ``prefix`` is not hex."""
        table = _memories if what == "memory" else _conflicts
        with self._store.read() as connection:
            return tables.ids_starting_with(connection, table, tenant_id, prefix)

    def earlier_versions(
        self, tenant_id: str, subject_id: str, *, as_of: datetime | None = None
    ) -> list[EarlierVersion]:
        """Every version of the subject's memories that a later one replaced, oldest
        first (the current versions are the memories themselves). With ``as_of``, those
        replaced by that moment: the versions current then are :meth:`memories_at`'s."""
        query = sa.select(_history).where(
            _history.c.tenant_id == tenant_id, _history.c.subject_id == subject_id
        )
        if as_of is not None:
            query = query.where(_history.c.recorded_at <= as_of)
        query = query.order_by(_history.c.memory_id, _history.c.recorded_at)
        with self._store.read() as connection:
            rows = connection.execute(query).all()
        versions = [
            EarlierVersion(
                memory_id=row.memory_id,
                recorded_at=row.recorded_at,
                replaced_at=later.recorded_at,
                status=MemoryStatus(row.status),
                status_rule=SupersessionRule(row.status_rule) if row.status_rule else None,
                valid_from=row.valid_from,
                valid_to=row.valid_to,
                asserted_at=row.asserted_at,
            )
            for row, later in pairwise(rows)
            if later.memory_id == row.memory_id
        ]
        return sorted(versions, key=lambda version: (version.recorded_at, version.memory_id))

    def supersessions(
        self, tenant_id: str, subject_id: str, *, as_of: datetime | None = None
    ) -> list[SupersessionRecord]:
        """The subject's supersession records: the current derived set, oldest decision
        first. With ``as_of``, those of the set decided by that moment. A record that a
        later re-decision retracted is not kept (the statuses it set are, in the
        memories' history), so this is not what the store listed then."""
        query = sa.select(_supersessions).where(
            _supersessions.c.tenant_id == tenant_id, _supersessions.c.subject_id == subject_id
        )
        if as_of is not None:
            query = query.where(_supersessions.c.decided_at <= as_of)
        query = query.order_by(_supersessions.c.decided_at, _supersessions.c.id)
        with self._store.read() as connection:
            return [
                SupersessionRecord(
                    id=row.id,
                    subject_id=row.subject_id,
                    rule=row.rule,
                    claim_key=row.claim_key,
                    score=row.score,
                    threshold=row.threshold,
                    winner_memory_id=row.winner_memory_id,
                    loser_memory_id=row.loser_memory_id,
                    winner_episode_ids=list(row.winner_episode_ids),
                    loser_episode_ids=list(row.loser_episode_ids),
                    winner_episode_count=row.winner_episode_count,
                    loser_episode_count=row.loser_episode_count,
                    job_id=row.job_id,
                    decided_at=row.decided_at,
                )
                for row in connection.execute(query).all()
            ]


_CONSISTENT_READ_ATTEMPTS = 3


_T = TypeVar("_T")
Bound: TypeAlias = _T | sa.BindParameter[_T]
"""A value of a statement's, or the parameter it is bound to when the statement is
built once and executed with its values."""


def version_select(
    tenant_id: Bound[str], subject_id: Bound[str]
) -> sa.Select[tuple[str, datetime]]:
    """The subject's memory version as one row of ``memory_version`` and
    ``memory_changed_at`` (none if it never had a memory), for a read to take along with
    what else it reads in the same statement (:func:`version_of_row`)."""
    return sa.select(
        _versions.c.version.label("memory_version"),
        _versions.c.changed_at.label("memory_changed_at"),
    ).where(_versions.c.tenant_id == tenant_id, _versions.c.subject_id == subject_id)


def with_version(
    tenant_id: Bound[str], subject_id: Bound[str], rows: sa.Subquery
) -> sa.Select[Any]:
    """``rows``' columns and the subject's memory version (:func:`version_select`'s
    columns), in one statement: one round trip, and both from one snapshot. Both are
    outer-joined to a one-row anchor, so that neither being empty hides the other: at
    least one row comes back, the version's columns repeated on each of ``rows``
    (``NULL`` in ``rows``' columns when it has none)."""
    anchor = sa.select(sa.literal(1).label("anchor")).subquery("anchor")
    version = version_select(tenant_id, subject_id).subquery("version")
    return sa.select(version, rows).select_from(
        anchor.outerjoin(version, sa.true()).outerjoin(rows, sa.true())
    )


def version_of_row(row: Any) -> MemoryVersion | None:
    """The :class:`MemoryVersion` in a row holding :func:`version_select`'s columns
    (``None``: the subject never had a memory)."""
    version = row.memory_version
    return MemoryVersion(version, row.memory_changed_at) if version is not None else None


def _version(connection: Connection, tenant_id: str, subject_id: str) -> MemoryVersion | None:
    row = connection.execute(version_select(tenant_id, subject_id)).first()
    return version_of_row(row) if row is not None else None


@dataclass(frozen=True, slots=True)
class _RankingStatements:
    """The statements of :func:`_ranking_inputs`, built once with the parameters
    ``tenant_id``, ``subject_id`` and ``contested`` (a list, expanded when executed):
    building and keying them on every rebuild was about a tenth of its CPU."""

    active: sa.Select[Any]
    open_conflicts: sa.Select[Any]
    withheld_and_version: sa.Select[Any]


@cache
def _ranking_statements(*, postgresql: bool) -> _RankingStatements:
    tenant_id: sa.BindParameter[str] = sa.bindparam("tenant_id")
    subject_id: sa.BindParameter[str] = sa.bindparam("subject_id")
    of_subject = (_memories.c.tenant_id == tenant_id, _memories.c.subject_id == subject_id)
    active = sa.select(
        _memories.c.id,
        _memories.c.kind,
        _memories.c.content,
        _memories.c.valid_from,
        _memories.c.valid_to,
        _memories.c.asserted_at,
    ).where(*of_subject, _memories.c.status == MemoryStatus.ACTIVE.value)
    open_conflicts = sa.select(_conflicts).where(
        _conflicts.c.tenant_id == tenant_id,
        _conflicts.c.subject_id == subject_id,
        _conflicts.c.status == ConflictStatus.OPEN.value,
    )
    # Episodes behind a memory that is not shown: not active, or in an open conflict.
    not_shown = sa.select(_memories.c.id).where(
        *of_subject,
        sa.or_(
            _memories.c.status != MemoryStatus.ACTIVE.value,
            _memories.c.id.in_(sa.bindparam("contested", expanding=True)),
        ),
    )
    withheld = (
        sa.select(_sources.c.episode_id)
        .distinct()
        .where(
            _sources.c.tenant_id == tenant_id,
            _sources.c.subject_id == subject_id,
            tables.in_select(_sources.c.memory_id, not_shown, postgresql=postgresql),
        )
        .subquery("withheld")
    )
    return _RankingStatements(active, open_conflicts, with_version(tenant_id, subject_id, withheld))


def _ranking_inputs(
    connection: Connection,
    tenant_id: str,
    subject_id: str,
    version: MemoryVersion | None,
    earlier: RankingInputs | None,
) -> tuple[RankingInputs, MemoryVersion | None]:
    """The inputs, filed under ``version`` (the version read before them), and the
    version read with the last of them (after the others)."""
    statements = _ranking_statements(postgresql=connection.dialect.name == "postgresql")
    of_subject = {"tenant_id": tenant_id, "subject_id": subject_id}
    # Whole results at once, read by position: iterating a result fetches a row a call,
    # and a row's attribute costs SQLAlchemy about 0.8 µs (tables.picked).
    active = connection.execute(statements.active, of_subject).all()
    entries = _entries(active, earlier)
    conflicts = [
        conflict_record(row).conflict
        for row in connection.execute(statements.open_conflicts, of_subject).all()
    ]
    contested = sorted({memory_id for c in conflicts for memory_id in c.memory_ids})
    rows = connection.execute(
        statements.withheld_and_version, {**of_subject, "contested": contested}
    ).all()
    texts = {memory_id: content for memory_id, _kind, content, *_times in active}
    episode_ids = frozenset(row.episode_id for row in rows if row.episode_id is not None)
    inputs = RankingInputs(version, entries, texts, conflicts, episode_ids)
    return inputs, version_of_row(rows[0])


def _entries(active: Sequence[Sequence[Any]], earlier: RankingInputs | None) -> list[RankingEntry]:
    """The ranking entries of the ``active`` rows (id, kind, content, valid from, valid
    to, asserted at). Where ``earlier`` has a memory with the same content, kind and
    times, its entry is taken over, the same object, so that what else was made of it
    can be kept with it (:class:`~memsync.runtime.reading.indexes.SubjectIndex`); same
    text with other times gives a copy with the new times. A compile changes a few of a
    subject's memories, so most entries are taken over rather than built again (token
    set, tie key; docs/benchmarks.md, eleventh round). Looked up by the ids' integers:
    a UUID hashes and compares in Python."""
    lent = (
        # The texts are filed in the entries' order (both made from the same rows).
        {
            entry.id.int: (entry, text)
            for entry, text in zip(earlier.entries, earlier.texts.values(), strict=True)
        }
        if earlier is not None
        else {}
    )
    entries: list[RankingEntry] = []
    for memory_id, kind, content, valid_from, valid_to, asserted_at in active:
        entry, text = lent.get(memory_id.int, (None, None))
        if entry is None or entry.kind != kind or text != content:
            entry = RankingEntry(
                id=memory_id,
                kind=MemoryKind(kind),
                last_asserted=asserted_at,
                valid_from=valid_from,
                valid_to=valid_to,
                tokens=tokens(content),
            )
        elif (entry.last_asserted, entry.valid_from, entry.valid_to) != (
            asserted_at,
            valid_from,
            valid_to,
        ):
            entry = replace(
                entry, last_asserted=asserted_at, valid_from=valid_from, valid_to=valid_to
            )
        entries.append(entry)
    return entries


_CHANGEABLE = frozenset(
    ("status", "status_rule", "valid_from", "valid_to", "asserted_at", "explicit_change")
)


def _as_it_stood(tenant_id: str, subject_id: str, as_of: datetime) -> sa.Select[Any]:
    """The subject's memories created by ``as_of``, with the changeable columns of the
    latest history row recorded by then in place of today's (same names).

    The subject's history rows up to ``as_of`` are numbered per memory, newest first,
    in one pass over ``ix_memory_history_subject``, rather than a correlated "latest
    row" subquery per memory."""
    numbered = (
        sa.select(
            _history,
            sa.func.row_number()
            .over(partition_by=_history.c.memory_id, order_by=_history.c.recorded_at.desc())
            .label("newest"),
        )
        .where(
            _history.c.tenant_id == tenant_id,
            _history.c.subject_id == subject_id,
            _history.c.recorded_at <= as_of,
        )
        .subquery("then")
    )
    columns = [
        numbered.c[column.name] if column.name in _CHANGEABLE else column for column in _memories.c
    ]
    return (
        sa.select(*columns)
        .select_from(
            _memories.join(
                numbered,
                sa.and_(numbered.c.memory_id == _memories.c.id, numbered.c.newest == 1),
            )
        )
        .where(
            _memories.c.tenant_id == tenant_id,
            _memories.c.subject_id == subject_id,
            _memories.c.created_at <= as_of,
        )
    )


# What a conflict's history records of it: every column of ``conflict_history`` but its
# key and the subject (the conflict's own row says where it is filed now).
_CONFLICT_CHANGEABLE = frozenset(column.name for column in tables.conflict_history.c) - {
    "tenant_id",
    "conflict_id",
    "recorded_at",
    "subject_id",
}


def _conflicts_then(tenant_id: str, subject_id: str | None, as_of: datetime) -> sa.Select[Any]:
    """The conflicts detected by ``as_of`` (of the subject, or of every subject), with
    the changeable columns of the latest history row recorded by then (same names)."""
    history = tables.conflict_history
    recorded = [history.c.tenant_id == tenant_id, history.c.recorded_at <= as_of]
    if subject_id is not None:
        recorded.append(history.c.subject_id == subject_id)
    numbered = (
        sa.select(
            history,
            sa.func.row_number()
            .over(partition_by=history.c.conflict_id, order_by=history.c.recorded_at.desc())
            .label("newest"),
        )
        .where(*recorded)
        .subquery("then")
    )
    columns = [
        numbered.c[column.name] if column.name in _CONFLICT_CHANGEABLE else column
        for column in _conflicts.c
    ]
    return (
        sa.select(*columns)
        .select_from(
            _conflicts.join(
                numbered,
                sa.and_(numbered.c.conflict_id == _conflicts.c.id, numbered.c.newest == 1),
            )
        )
        .where(_conflicts.c.tenant_id == tenant_id)
    )
