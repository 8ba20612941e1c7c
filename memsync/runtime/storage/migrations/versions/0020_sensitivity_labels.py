"""Sensitivity labels: those set on a memory (``memory_labels``: by hand, and by the
compile rules) and those a connector's rules gave an episode (``episode_labels``).
Keys lead with ``tenant_id``, and each has a foreign key to its memory or episode on
(tenant, id), so on Citus the tables are distributed by tenant and colocated with
``episodes`` as they are created.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_labels",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("memory_id", sa.Uuid, nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("labels", JSONDocument, nullable=False),
        sa.Column("rule_labels", JSONDocument, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "memory_id", name="pk_memory_labels"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "memory_id"],
            ["memories.tenant_id", "memories.id"],
            name="fk_memory_labels_tenant_id_memory_id_memories",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_memory_labels_subject", "memory_labels", ["tenant_id", "subject_id"])
    op.create_table(
        "episode_labels",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("episode_id", sa.Uuid, nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("labels", JSONDocument, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "episode_id", name="pk_episode_labels"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "episode_id"],
            ["episodes.tenant_id", "episodes.id"],
            name="fk_episode_labels_tenant_id_episode_id_episodes",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_episode_labels_subject", "episode_labels", ["tenant_id", "subject_id"])


def downgrade() -> None:
    op.drop_index("ix_episode_labels_subject", table_name="episode_labels")
    op.drop_table("episode_labels")
    op.drop_index("ix_memory_labels_subject", table_name="memory_labels")
    op.drop_table("memory_labels")
