"""Episodes with never-expiring idempotency keys, and their earlier revisions.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "episodes",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("source", identifier(255), nullable=False),
        sa.Column("type", identifier(255), nullable=False),
        sa.Column("payload", JSONDocument, nullable=False),
        sa.Column("metadata", JSONDocument, nullable=False),
        sa.Column("provenance", JSONDocument, nullable=False),
        sa.Column("session_id", sa.String(255), nullable=True),
        sa.Column("idempotency_key", identifier(512), nullable=True),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("compiled_revision", sa.Integer(), nullable=False),
        sa.Column("occurred_at", UTCDateTime(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("revised_at", UTCDateTime(), nullable=True),
        sa.CheckConstraint("revision >= 1", name="ck_episodes_revision_positive"),
        sa.CheckConstraint("compiled_revision <= revision", name="ck_episodes_compiled_not_ahead"),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_episodes"),
    )
    op.create_index(
        "uq_episodes_idempotency_key",
        "episodes",
        ["tenant_id", "subject_id", "idempotency_key"],
        unique=True,
        sqlite_where=sa.text("idempotency_key IS NOT NULL"),
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_index(
        "ix_episodes_subject_timeline", "episodes", ["tenant_id", "subject_id", "occurred_at"]
    )
    op.create_index(
        "ix_episodes_uncompiled",
        "episodes",
        ["tenant_id", "subject_id"],
        sqlite_where=sa.text("compiled_revision < revision"),
        postgresql_where=sa.text("compiled_revision < revision"),
    )
    op.create_table(
        "episode_revisions",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("episode_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("source", identifier(255), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("payload", JSONDocument, nullable=False),
        sa.Column("metadata", JSONDocument, nullable=False),
        sa.Column("provenance", JSONDocument, nullable=False),
        sa.Column("occurred_at", UTCDateTime(), nullable=False),
        sa.Column("recorded_at", UTCDateTime(), nullable=False),
        sa.Column("replaced_at", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "episode_id"],
            ["episodes.tenant_id", "episodes.id"],
            name="fk_episode_revisions_tenant_id_episode_id_episodes",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "episode_id", "revision", name="pk_episode_revisions"),
    )


def downgrade() -> None:
    op.drop_table("episode_revisions")
    op.drop_index("ix_episodes_uncompiled", table_name="episodes")
    op.drop_index("ix_episodes_subject_timeline", table_name="episodes")
    op.drop_index("uq_episodes_idempotency_key", table_name="episodes")
    op.drop_table("episodes")
