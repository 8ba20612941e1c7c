"""Memories in the store: loading them for the resolver, applying change sets, reading.

The compile engine (``memsync.compile``) decides; this module only translates between
its value types and rows. Every statement is scoped to one tenant, and every write of a
change set is a constant number of statements, whatever its size.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, Row

from memsync.compile.resolve import ChangeSet, OpenConflict
from memsync.compile.types import MemoryKind, MemoryStatus, StoredMemory, SupersessionRule
from memsync.runtime.storage.engine import Store
from memsync.runtime.storage.schema import ConflictRow, MemoryRow, MemorySourceRow, SupersessionRow

__all__ = [
    "ConflictRecord",
    "MemoryRepository",
    "SupersessionRecord",
    "apply_change_set",
    "delete_subject_memories",
    "load_for_resolution",
    "memories_citing",
]

_SUPERSESSIONS_PER_STATEMENT = 200
RECORDED_EPISODES_PER_SIDE = 64
"""How many source episode ids a supersession record lists per side (the first, in id
order). Listing all of them made each record as long as a memory's whole evidence, and
a claim that flips often made the table grow with the square of it; the record keeps
the counts, and ``memory_sources`` keeps every id of both memories."""


def _recorded(episode_ids: Sequence[uuid.UUID]) -> list[str]:
    return [str(episode_id) for episode_id in episode_ids[:RECORDED_EPISODES_PER_SIDE]]


_memories: sa.Table = MemoryRow.__table__  # type: ignore[assignment]
_sources: sa.Table = MemorySourceRow.__table__  # type: ignore[assignment]
_supersessions: sa.Table = SupersessionRow.__table__  # type: ignore[assignment]
_conflicts: sa.Table = ConflictRow.__table__  # type: ignore[assignment]


# -- rows <-> engine types ---------------------------------------------------------------


def _stored(row: Row[Any], sources: Sequence[uuid.UUID]) -> StoredMemory:
    return StoredMemory(
        id=row.id,
        subject_id=row.subject_id,
        memory_key=row.memory_key,
        kind=MemoryKind(row.kind),
        content=row.content,
        claim_key=row.claim_key,
        claim_value=row.claim_value,
        valid_from=row.valid_from,
        valid_to=row.valid_to,
        status=MemoryStatus(row.status),
        source_episode_ids=tuple(sorted(sources)),
        created_at=row.created_at,
        confidence=row.confidence,
        asserted_at=row.asserted_at,
        negated=row.negated,
        explicit_change=row.explicit_change,
        status_rule=SupersessionRule(row.status_rule) if row.status_rule else None,
        metadata=row.metadata,
    )


def _with_sources(
    connection: Connection, tenant_id: str, rows: Sequence[Row[Any]]
) -> list[StoredMemory]:
    """Attach each memory's provenance set: one query for all of them."""
    ids = [row.id for row in rows]
    sources: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
    for start in range(0, len(ids), 1000):
        query = sa.select(_sources.c.memory_id, _sources.c.episode_id).where(
            _sources.c.tenant_id == tenant_id, _sources.c.memory_id.in_(ids[start : start + 1000])
        )
        for memory_id, episode_id in connection.execute(query):
            sources[memory_id].append(episode_id)
    return [_stored(row, sources[row.id]) for row in rows]


def load_for_resolution(
    connection: Connection, tenant_id: str, subject_id: str, memory_keys: Collection[str]
) -> list[StoredMemory]:
    """What ``resolve`` needs as ``existing``: the subject's active memories plus any
    memory (of any status) whose key a candidate has."""
    of_subject = sa.and_(_memories.c.tenant_id == tenant_id, _memories.c.subject_id == subject_id)
    wanted = _memories.c.status == MemoryStatus.ACTIVE.value
    if memory_keys:
        wanted = sa.or_(wanted, _memories.c.memory_key.in_(sorted(memory_keys)))
    rows = list(connection.execute(sa.select(_memories).where(of_subject, wanted)))
    return _with_sources(connection, tenant_id, rows)


def memories_citing(
    connection: Connection, tenant_id: str, episode_ids: Collection[uuid.UUID]
) -> list[StoredMemory]:
    """Memories that list any of ``episode_ids`` in their provenance."""
    if not episode_ids:
        return []
    citing = sa.select(_sources.c.memory_id).where(
        _sources.c.tenant_id == tenant_id, _sources.c.episode_id.in_(list(episode_ids))
    )
    rows = list(
        connection.execute(
            sa.select(_memories).where(
                _memories.c.tenant_id == tenant_id, _memories.c.id.in_(citing)
            )
        )
    )
    return _with_sources(connection, tenant_id, rows)


def _insert_ignoring_duplicates(connection: Connection, table: sa.Table) -> Any:
    dialect_insert = postgresql.insert if connection.dialect.name == "postgresql" else sqlite.insert
    return dialect_insert(table).on_conflict_do_nothing()


def apply_change_set(
    connection: Connection,
    tenant_id: str,
    changes: ChangeSet,
    episode_revisions: Mapping[uuid.UUID, int],
    now: datetime,
    job_id: str | None = None,
) -> None:
    """Write ``changes`` in the caller's transaction, as ``compile.apply_changes`` would.

    ``job_id`` is the compile that created the new memories (kept on their rows).

    Repeats: provenance and conflicts are inserted with "on conflict do nothing", and a
    status change only applies to a memory still in its ``from_status``, so applying
    the same change set twice leaves the store as applying it once.
    """
    if changes.memories_to_create:
        connection.execute(
            _memories.insert(),
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
        )
    subject_of = {memory.id: memory.subject_id for memory in changes.memories_to_create}
    provenance = [
        (memory.id, memory.subject_id, episode_id)
        for memory in changes.memories_to_create
        for episode_id in memory.source_episode_ids
    ]
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
        subject_of.update(
            (memory_id, subject_id)
            for memory_id, subject_id in connection.execute(
                sa.select(_memories.c.id, _memories.c.subject_id).where(
                    _memories.c.tenant_id == tenant_id,
                    _memories.c.id.in_([a.memory_id for a in changes.provenance_to_add]),
                )
            )
        )
        provenance.extend(
            (addition.memory_id, subject_of[addition.memory_id], episode_id)
            for addition in changes.provenance_to_add
            for episode_id in addition.episode_ids
        )
    if provenance:
        connection.execute(
            _insert_ignoring_duplicates(connection, _sources),
            [
                {
                    "tenant_id": tenant_id,
                    "memory_id": memory_id,
                    "episode_id": episode_id,
                    "subject_id": subject_id,
                    "episode_revision": episode_revisions.get(episode_id, 0),
                    "added_at": now,
                }
                for memory_id, subject_id, episode_id in provenance
            ],
        )
    if changes.status_changes:
        connection.execute(
            _memories.update()
            .where(
                _memories.c.tenant_id == tenant_id,
                _memories.c.id == sa.bindparam("b_id"),
                _memories.c.status == sa.bindparam("b_from"),
            )
            .values(
                status=sa.bindparam("to_status"),
                valid_to=sa.bindparam("valid_to"),
                status_rule=sa.bindparam("rule"),
                status_changed_at=now,
                updated_at=now,
            ),
            [
                {
                    "b_id": change.memory_id,
                    "b_from": change.from_status.value,
                    "to_status": change.to_status.value,
                    "valid_to": change.valid_to,
                    "rule": change.rule.value if change.rule else None,
                }
                for change in changes.status_changes
            ],
        )
    # Records are written a slice at a time: a compile of many thousand episodes can
    # make as many records, and rendering them all at once costs memory for nothing.
    for start in range(0, len(changes.supersessions), _SUPERSESSIONS_PER_STATEMENT):
        connection.execute(
            _supersessions.insert(),
            [
                {
                    "tenant_id": tenant_id,
                    "id": uuid.uuid4(),
                    "subject_id": record.subject_id,
                    "rule": record.rule.value,
                    "claim_key": record.claim_key,
                    "score": record.score,
                    "threshold": record.threshold,
                    "winner_memory_id": record.winner_memory_id,
                    "winner_memory_key": record.winner_memory_key,
                    "loser_memory_id": record.loser_memory_id,
                    "loser_memory_key": record.loser_memory_key,
                    "winner_episode_ids": _recorded(record.winner_episode_ids),
                    "loser_episode_ids": _recorded(record.loser_episode_ids),
                    "winner_episode_count": len(record.winner_episode_ids),
                    "loser_episode_count": len(record.loser_episode_ids),
                    "job_id": record.job_id,
                    "decided_at": record.decided_at,
                }
                for record in changes.supersessions[start : start + _SUPERSESSIONS_PER_STATEMENT]
            ],
        )
    if changes.open_conflicts:
        connection.execute(
            _insert_ignoring_duplicates(connection, _conflicts),
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
                    "status": "open",
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
                _conflicts.c.id.in_(list(changes.resolved_conflict_ids)),
                _conflicts.c.status == "open",
            )
            .values(
                status="resolved",
                resolved_at=now,
                chosen_memory_id=next(iter(chosen)) if len(chosen) == 1 else None,
            )
        )


# -- the read side -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SupersessionRecord:
    """A stored supersession record, as the inspector and the API show it."""

    id: uuid.UUID
    subject_id: str
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
    decided_at: datetime


@dataclass(frozen=True, slots=True)
class ConflictRecord:
    """A stored conflict: open until a person (or a later compile) resolves it."""

    conflict: OpenConflict
    status: str
    resolved_at: datetime | None
    chosen_memory_id: uuid.UUID | None


def _conflict(row: Row[Any]) -> ConflictRecord:
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
        status=row.status,
        resolved_at=row.resolved_at,
        chosen_memory_id=row.chosen_memory_id,
    )


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

        With ``as_of``, the memories that were active at that moment: created by then,
        and either still active or changed status after it.
        """
        query = sa.select(_memories).where(
            _memories.c.tenant_id == tenant_id, _memories.c.subject_id == subject_id
        )
        if as_of is not None:
            query = query.where(
                _memories.c.created_at <= as_of,
                sa.or_(
                    _memories.c.status == MemoryStatus.ACTIVE.value,
                    _memories.c.status_changed_at > as_of,
                ),
            )
        elif statuses is not None:
            query = query.where(_memories.c.status.in_([status.value for status in statuses]))
        if kind is not None:
            query = query.where(_memories.c.kind == kind.value)
        order = (_memories.c.valid_from, _memories.c.id)
        query = query.order_by(*(c.desc() for c in order) if newest_first else order)
        if limit is not None:
            query = query.limit(limit).offset(offset)
        with self._store.read() as connection:
            rows = list(connection.execute(query))
            memories = _with_sources(connection, tenant_id, rows)
        if as_of is not None:
            # As the store stood then: any later status change had not happened yet.
            return [_as_active(memory) for memory in memories]
        return memories

    def get(
        self, tenant_id: str, memory_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, StoredMemory]:
        query = sa.select(_memories).where(
            _memories.c.tenant_id == tenant_id, _memories.c.id.in_(list(memory_ids))
        )
        with self._store.read() as connection:
            rows = list(connection.execute(query))
            return {memory.id: memory for memory in _with_sources(connection, tenant_id, rows)}

    def search(
        self,
        tenant_id: str,
        subject_id: str,
        *,
        kind: MemoryKind | None,
        text: str | None,
        limit: int,
    ) -> list[StoredMemory]:
        """Active memories whose content contains every word of ``text`` (case-folded)."""
        query = sa.select(_memories).where(
            _memories.c.tenant_id == tenant_id,
            _memories.c.subject_id == subject_id,
            _memories.c.status == MemoryStatus.ACTIVE.value,
        )
        if kind is not None:
            query = query.where(_memories.c.kind == kind.value)
        for word in (text or "").lower().split():
            escaped = word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            query = query.where(
                sa.func.lower(_memories.c.content).like(f"%{escaped}%", escape="\\")
            )
        query = query.order_by(_memories.c.asserted_at.desc(), _memories.c.id).limit(limit)
        with self._store.read() as connection:
            rows = list(connection.execute(query))
            return _with_sources(connection, tenant_id, rows)

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
            return {subject: count for subject, count in connection.execute(query)}

    def conflicts(
        self,
        tenant_id: str,
        subject_id: str | None = None,
        *,
        status: str | None = "open",
        as_of: datetime | None = None,
    ) -> list[ConflictRecord]:
        """Conflicts, oldest first. With ``as_of``: those open at that moment."""
        query = sa.select(_conflicts).where(_conflicts.c.tenant_id == tenant_id)
        if subject_id is not None:
            query = query.where(_conflicts.c.subject_id == subject_id)
        if as_of is not None:
            query = query.where(
                _conflicts.c.detected_at <= as_of,
                sa.or_(_conflicts.c.status == "open", _conflicts.c.resolved_at > as_of),
            )
        elif status is not None:
            query = query.where(_conflicts.c.status == status)
        query = query.order_by(_conflicts.c.detected_at, _conflicts.c.id)
        with self._store.read() as connection:
            return [_conflict(row) for row in connection.execute(query)]

    def conflict(self, tenant_id: str, conflict_id: uuid.UUID) -> ConflictRecord | None:
        query = sa.select(_conflicts).where(
            _conflicts.c.tenant_id == tenant_id, _conflicts.c.id == conflict_id
        )
        with self._store.read() as connection:
            row = connection.execute(query).first()
        return _conflict(row) if row is not None else None

    def supersessions(self, tenant_id: str, subject_id: str) -> list[SupersessionRecord]:
        query = (
            sa.select(_supersessions)
            .where(
                _supersessions.c.tenant_id == tenant_id, _supersessions.c.subject_id == subject_id
            )
            .order_by(_supersessions.c.decided_at, _supersessions.c.id)
        )
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
                for row in connection.execute(query)
            ]


def _as_active(memory: StoredMemory) -> StoredMemory:
    if memory.status is MemoryStatus.ACTIVE:
        return memory
    return replace(memory, status=MemoryStatus.ACTIVE, valid_to=None, status_rule=None)


def delete_subject_memories(connection: Connection, tenant_id: str, subject_id: str) -> int:
    """Delete a subject's memories with their provenance, records and conflicts."""
    for table in (_sources, _supersessions, _conflicts):
        connection.execute(
            table.delete().where(table.c.tenant_id == tenant_id, table.c.subject_id == subject_id)
        )
    result = connection.execute(
        _memories.delete().where(
            _memories.c.tenant_id == tenant_id, _memories.c.subject_id == subject_id
        )
    )
    return result.rowcount
