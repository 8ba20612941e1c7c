"""Content hashes over RFC 8785 canonical JSON.

The content hash used to be taken over ``json.dumps`` with sorted keys, which spells
``1`` and ``1.0`` differently, so a payload re-read with an equal value in another
spelling became a revision. The hash is now taken over the RFC 8785 (JCS) form. This
migration recomputes the hash of every stored episode and of every kept revision from
its stored payload, so the next re-read of an unchanged record is a duplicate. It only
rewrites hashes: no revision is created, archived or dropped.

A stored payload that has no canonical form (an integer beyond ±(2^53 - 1), stored
before such values were refused) keeps its old hash; the migration says how many.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from memsync.episode import content_hash
from memsync.runtime.storage.migrate import note
from memsync.runtime.storage.types import JSONDocument

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_PAGE = 2000


def _rehash(name: str, key_columns: Sequence[str]) -> tuple[int, int, int]:
    """Recompute ``content_hash`` from ``payload`` for every row of ``name``, a page at
    a time in key order; return (rows read, hashes changed, payloads left as they were)."""
    table = sa.table(
        name,
        *(sa.column(column) for column in key_columns),
        sa.column("payload", JSONDocument),
        sa.column("content_hash", sa.String),
    )
    key = sa.tuple_(*(table.c[column] for column in key_columns))
    connection = op.get_bind()
    read = changed = refused = 0
    after: tuple[Any, ...] | None = None
    while True:
        query = sa.select(table).order_by(*(table.c[c] for c in key_columns)).limit(_PAGE)
        if after is not None:
            query = query.where(key > sa.tuple_(*(sa.literal(value) for value in after)))
        rows = list(connection.execute(query))
        if not rows:
            return read, changed, refused
        updates: list[dict[str, Any]] = []
        for row in rows:
            try:
                rehashed = content_hash(row.payload)
            except ValueError:
                refused += 1
                continue
            if rehashed != row.content_hash:
                updates.append(
                    {**{f"b_{c}": getattr(row, c) for c in key_columns}, "hash": rehashed}
                )
        if updates:
            connection.execute(
                table.update()
                .where(*(table.c[c] == sa.bindparam(f"b_{c}") for c in key_columns))
                .values(content_hash=sa.bindparam("hash")),
                updates,
            )
        read += len(rows)
        changed += len(updates)
        after = tuple(getattr(rows[-1], c) for c in key_columns)


def upgrade() -> None:
    for name, key_columns in (
        ("episodes", ("tenant_id", "id")),
        ("episode_revisions", ("tenant_id", "episode_id", "revision")),
    ):
        read, changed, refused = _rehash(name, key_columns)
        if not (changed or refused):
            continue  # nothing to report: an empty store, or hashes already canonical
        message = (
            f"0009 canonical hashes: {name}: {read} rows read, {changed} content hashes "
            f"recomputed over RFC 8785 JSON, {refused} payloads without a canonical form "
            "kept their hash"
        )
        note(message)


def downgrade() -> None:
    # Nothing to undo in the schema. The two serialisations agree on every payload
    # without fractional or exponent numbers, so code of revision 0008 sees the same
    # hashes for those; a payload with such numbers is revised once on its next read.
    pass
