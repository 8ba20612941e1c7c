"""Durable jobs: a queue with leases, coalescing and schedule-fire deduplication.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("kind", identifier(32), nullable=False),
        sa.Column("target", identifier(255), nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("trigger", identifier(64), nullable=False),
        sa.Column("dedup_key", identifier(255), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=True),
        sa.Column("run_after", UTCDateTime(), nullable=False),
        sa.Column("queued_at", UTCDateTime(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=True),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("result", JSONDocument, nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'completed', 'failed')",
            name=op.f("ck_jobs_status_known"),
        ),
        sa.CheckConstraint(
            "attempts >= 0 AND max_attempts >= 1", name=op.f("ck_jobs_attempts_bounded")
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_jobs")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(
            "uq_jobs_pending_target",
            ["tenant_id", "kind", "target"],
            unique=True,
            sqlite_where=sa.text("status = 'pending'"),
            postgresql_where=sa.text("status = 'pending'"),
        )
        batch_op.create_index(
            "uq_jobs_dedup_key",
            ["tenant_id", "kind", "target", "dedup_key"],
            unique=True,
            sqlite_where=sa.text("dedup_key IS NOT NULL"),
            postgresql_where=sa.text("dedup_key IS NOT NULL"),
        )
        batch_op.create_index(
            "ix_jobs_ready",
            ["run_after"],
            unique=False,
            sqlite_where=sa.text("status = 'pending'"),
            postgresql_where=sa.text("status = 'pending'"),
        )
        batch_op.create_index(
            "ix_jobs_leases",
            ["lease_expires_at"],
            unique=False,
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        )
        batch_op.create_index("ix_jobs_listing", ["tenant_id", "queued_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_listing")
        batch_op.drop_index("ix_jobs_leases")
        batch_op.drop_index("ix_jobs_ready")
        batch_op.drop_index("uq_jobs_dedup_key")
        batch_op.drop_index("uq_jobs_pending_target")

    op.drop_table("jobs")
