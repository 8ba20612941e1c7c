"""Transaction time: every change to a memory appends its new state to
``memory_history``, in the transaction that makes the change, so ``as_of`` reads what
the store said then (:mod:`memsync.runtime.reading.memories`) instead of today's rows.

Every writer of a memory's changeable fields (status, status rule, validity,
assertion time, explicit change) calls :func:`record_memory_history` after its
updates, with the ids it touched: one ``INSERT … SELECT`` per slice of ids, copying
the rows as they now stand, so the history can never say other than the table did.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.runtime.storage import tables
from memsync.runtime.storage.types import UTCDateTime

__all__ = ["record_memory_history"]

_memories = tables.memories
_history = tables.memory_history

_CHANGEABLE = (
    "subject_id",
    "status",
    "status_rule",
    "valid_from",
    "valid_to",
    "asserted_at",
    "explicit_change",
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
    if not memory_ids:
        return
    postgresql = connection.dialect.name == "postgresql"
    names = ["tenant_id", "memory_id", "recorded_at", *_CHANGEABLE]
    for some_ids in tables.in_slices(sorted(set(memory_ids))):
        rows = sa.select(
            _memories.c.tenant_id,
            _memories.c.id,
            sa.literal(now, UTCDateTime()),
            *(_memories.c[name] for name in _CHANGEABLE),
        ).where(
            _memories.c.tenant_id == tenant_id,
            tables.one_of(_memories.c.id, some_ids, postgresql=postgresql),
        )
        insert = tables.upsert(_history, postgresql=postgresql).from_select(names, rows)
        connection.execute(
            insert.on_conflict_do_update(
                index_elements=["tenant_id", "memory_id", "recorded_at"],
                set_={name: insert.excluded[name] for name in _CHANGEABLE},
            )
        )
