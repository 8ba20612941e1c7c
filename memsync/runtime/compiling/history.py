"""Transaction time: every change to a memory or a conflict appends its new state to
``memory_history`` or ``conflict_history``, in the transaction that makes the change,
so ``as_of`` reads what the store said then (:mod:`memsync.runtime.reading.memories`)
instead of today's rows.

Every writer of a memory's changeable fields (status, status rule, validity,
assertion time, explicit change) calls :func:`record_memory_history` after its
updates, and every writer of a conflict's (opened, resolved, opened again)
:func:`record_conflict_history`, with the ids it touched: one ``INSERT … SELECT`` per
slice of ids, copying the rows as they now stand, so the history can never say other
than the table did.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.runtime.storage import tables
from memsync.runtime.storage.types import UTCDateTime

__all__ = ["record_conflict_history", "record_memory_history"]

_MEMORY_FIELDS = (
    "subject_id",
    "status",
    "status_rule",
    "valid_from",
    "valid_to",
    "asserted_at",
    "explicit_change",
)
_CONFLICT_FIELDS = (
    "subject_id",
    "rule",
    "score",
    "threshold",
    "status",
    "job_id",
    "detected_at",
    "resolved_at",
    "chosen_memory_id",
)


def record_memory_history(
    connection: Connection, tenant_id: str, memory_ids: Collection[uuid.UUID], now: datetime
) -> None:
    """Append the current state of the tenant's memories ``memory_ids`` at ``now``.

    Repeats: recording the same memories again at the same ``now`` (two change sets or
    chunks of one compile) replaces that instant's row with the state as it is now, the
    later one; at another ``now`` it adds a row, the same state again, which reads
    alike. Ids of memories that do not exist (deleted meanwhile) add nothing.
    """
    _record(
        connection,
        tables.memory_history,
        "memory_id",
        _MEMORY_FIELDS,
        tenant_id,
        memory_ids,
        now,
    )


def record_conflict_history(
    connection: Connection, tenant_id: str, conflict_ids: Collection[uuid.UUID], now: datetime
) -> None:
    """Append the current state of the tenant's conflicts ``conflict_ids`` at ``now``;
    repeats as :func:`record_memory_history`."""
    _record(
        connection,
        tables.conflict_history,
        "conflict_id",
        _CONFLICT_FIELDS,
        tenant_id,
        conflict_ids,
        now,
    )


def _record(
    connection: Connection,
    history: sa.Table,
    key: str,
    changeable: tuple[str, ...],
    tenant_id: str,
    ids: Collection[uuid.UUID],
    now: datetime,
) -> None:
    """Copy the rows ``ids`` of the table ``history`` refers to (by ``key``) into it."""
    if not ids:
        return
    postgresql = connection.dialect.name == "postgresql"
    [reference] = history.foreign_key_constraints
    table = reference.referred_table
    names = ["tenant_id", key, "recorded_at", *changeable]
    for some_ids in tables.in_slices(sorted(set(ids))):
        rows = sa.select(
            table.c.tenant_id,
            table.c.id,
            sa.literal(now, UTCDateTime()),
            *(table.c[name] for name in changeable),
        ).where(
            table.c.tenant_id == tenant_id,
            tables.one_of(table.c.id, some_ids, postgresql=postgresql),
        )
        insert = tables.upsert(history, postgresql=postgresql).from_select(names, rows)
        connection.execute(
            insert.on_conflict_do_update(
                index_elements=["tenant_id", key, "recorded_at"],
                set_={name: insert.excluded[name] for name in changeable},
            )
        )
