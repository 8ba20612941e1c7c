"""Memories (a set per subject), their provenance, supersession records, conflicts and
recorded LLM extractions.

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "conflicts",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("kind", identifier(32), nullable=False),
        sa.Column("claim_key", identifier(255), nullable=True),
        sa.Column("rule", identifier(32), nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=True),
        sa.Column("first_memory_id", sa.Uuid(), nullable=False),
        sa.Column("second_memory_id", sa.Uuid(), nullable=False),
        sa.Column("first_memory_key", identifier(64), nullable=False),
        sa.Column("second_memory_key", identifier(64), nullable=False),
        sa.Column("first_content", sa.Text(), nullable=False),
        sa.Column("second_content", sa.Text(), nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("detected_at", UTCDateTime(), nullable=False),
        sa.Column("resolved_at", UTCDateTime(), nullable=True),
        sa.Column("chosen_memory_id", sa.Uuid(), nullable=True),
        sa.CheckConstraint(
            "status IN ('open', 'resolved')", name=op.f("ck_conflicts_status_known")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_conflicts")),
    )
    with op.batch_alter_table("conflicts", schema=None) as batch_op:
        batch_op.create_index(
            "ix_conflicts_subject_status", ["tenant_id", "subject_id", "status"], unique=False
        )

    op.create_table(
        "memories",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("memory_key", identifier(64), nullable=False),
        sa.Column("kind", identifier(32), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("claim_key", identifier(255), nullable=True),
        sa.Column("claim_value", sa.Text(), nullable=True),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("negated", sa.Boolean(), nullable=False),
        sa.Column("explicit_change", sa.Boolean(), nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("status_rule", identifier(32), nullable=True),
        sa.Column("valid_from", UTCDateTime(), nullable=False),
        sa.Column("valid_to", UTCDateTime(), nullable=True),
        sa.Column("asserted_at", UTCDateTime(), nullable=False),
        sa.Column("metadata", JSONDocument, nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("status_changed_at", UTCDateTime(), nullable=False),
        sa.CheckConstraint(
            "status IN ('active', 'superseded', 'tombstoned')",
            name=op.f("ck_memories_status_known"),
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_memories")),
    )
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.create_index(
            "ix_memories_subject_status", ["tenant_id", "subject_id", "status"], unique=False
        )
        batch_op.create_index(
            "uq_memories_memory_key", ["tenant_id", "subject_id", "memory_key"], unique=True
        )

    op.create_table(
        "supersessions",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("rule", identifier(32), nullable=False),
        sa.Column("claim_key", identifier(255), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=True),
        sa.Column("winner_memory_id", sa.Uuid(), nullable=True),
        sa.Column("winner_memory_key", identifier(64), nullable=True),
        sa.Column("loser_memory_id", sa.Uuid(), nullable=True),
        sa.Column("loser_memory_key", identifier(64), nullable=False),
        sa.Column("winner_episode_ids", JSONDocument, nullable=False),
        sa.Column("loser_episode_ids", JSONDocument, nullable=False),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("decided_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_supersessions")),
    )
    with op.batch_alter_table("supersessions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_supersessions_subject", ["tenant_id", "subject_id", "decided_at"], unique=False
        )

    op.create_table(
        "memory_sources",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("memory_id", sa.Uuid(), nullable=False),
        sa.Column("episode_id", sa.Uuid(), nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("episode_revision", sa.Integer(), nullable=False),
        sa.Column("added_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "memory_id"],
            ["memories.tenant_id", "memories.id"],
            name=op.f("fk_memory_sources_tenant_id_memory_id_memories"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "memory_id", "episode_id", name=op.f("pk_memory_sources")
        ),
    )
    with op.batch_alter_table("memory_sources", schema=None) as batch_op:
        batch_op.create_index(
            "ix_memory_sources_episode", ["tenant_id", "episode_id"], unique=False
        )

    op.create_table(
        "llm_extractions",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("extraction_key", identifier(512), nullable=False),
        sa.Column("extraction", sa.Text(), nullable=False),
        sa.Column("recorded_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "extraction_key", name=op.f("pk_llm_extractions")),
    )


def downgrade() -> None:
    op.drop_table("llm_extractions")
    with op.batch_alter_table("memory_sources", schema=None) as batch_op:
        batch_op.drop_index("ix_memory_sources_episode")

    op.drop_table("memory_sources")
    with op.batch_alter_table("supersessions", schema=None) as batch_op:
        batch_op.drop_index("ix_supersessions_subject")

    op.drop_table("supersessions")
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.drop_index("uq_memories_memory_key")
        batch_op.drop_index("ix_memories_subject_status")

    op.drop_table("memories")
    with op.batch_alter_table("conflicts", schema=None) as batch_op:
        batch_op.drop_index("ix_conflicts_subject_status")

    op.drop_table("conflicts")
