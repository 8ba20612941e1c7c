"""Tombstones: deleted records, run counts of them, and provenance that says which
revision of an episode supports a memory.

- ``episodes.deleted_at`` / ``episode_revisions.deleted_at``: set while a revision is
  a tombstone (the source showed the record deleted);
- ``sync_runs.tombstoned``: how many records a run found deleted;
- ``memory_sources.episode_revision`` becomes the latest revision of the episode that
  asserted the memory. Compiles before this revision wrote the first such revision and
  never moved it, so every row is brought to its episode's compiled revision: what
  was compiled is taken to still assert what it asserted, as compiles assumed until
  now. The migration reports how many rows it moved.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.migrate import note
from memsync.runtime.storage.types import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_BEHIND = (
    "FROM episodes AS e WHERE e.tenant_id = memory_sources.tenant_id "
    "AND e.id = memory_sources.episode_id AND e.subject_id = memory_sources.subject_id "
    "AND e.compiled_revision > memory_sources.episode_revision"
)


def upgrade() -> None:
    for table in ("episodes", "episode_revisions"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column("deleted_at", UTCDateTime(), nullable=True))
    with op.batch_alter_table("sync_runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("tombstoned", sa.Integer(), server_default=sa.text("0"), nullable=False)
        )
    moved = op.get_bind().execute(
        sa.text(
            f"UPDATE memory_sources SET episode_revision = (SELECT e.compiled_revision {_BEHIND}) "
            f"WHERE EXISTS (SELECT 1 {_BEHIND})"
        )
    )
    if moved.rowcount > 0:
        note(
            f"0011 tombstones: {moved.rowcount} memory provenance rows now name the "
            "revision their episode was last compiled at"
        )


def downgrade() -> None:
    with op.batch_alter_table("sync_runs", schema=None) as batch_op:
        batch_op.drop_column("tombstoned")
    for table in ("episode_revisions", "episodes"):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_column("deleted_at")
