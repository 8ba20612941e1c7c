"""The read path: a version per subject's memories, and search's index.

``memory_versions`` names the state of each subject's memories (a fresh random version
per change set) and keeps the time of the latest change, so context bundles can reuse
what they precomputed for a subject until it changes, and date a bundle by the store
instead of the wall clock. Subjects that already have memories get a version, changed
at their latest ``updated_at``.

``ix_memories_active_asserted`` lets search read a subject's active memories newest
first and stop at its limit.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import UTCDateTime, identifier

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_versions",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("changed_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "subject_id", name=op.f("pk_memory_versions")),
    )
    op.execute(
        "INSERT INTO memory_versions (tenant_id, subject_id, version, changed_at) "
        "SELECT tenant_id, subject_id, 'migrated-0006', MAX(updated_at) FROM memories "
        "GROUP BY tenant_id, subject_id"
    )
    op.create_index(
        "ix_memories_active_asserted",
        "memories",
        ["tenant_id", "subject_id", "asserted_at"],
        unique=False,
        sqlite_where=sa.text("status = 'active'"),
        postgresql_where=sa.text("status = 'active'"),
    )


def downgrade() -> None:
    op.drop_index(
        "ix_memories_active_asserted",
        table_name="memories",
        sqlite_where=sa.text("status = 'active'"),
        postgresql_where=sa.text("status = 'active'"),
    )
    op.drop_table("memory_versions")
