"""Sync runs, connector cursors and backfill checkpoints.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "connector_cursors",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("connector", identifier(64), nullable=False),
        sa.Column("position", UTCDateTime(), nullable=False),
        sa.Column("cursor", JSONDocument, nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "connector", name="pk_connector_cursors"),
    )
    op.create_table(
        "sync_runs",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("connector", identifier(64), nullable=False),
        sa.Column("connector_type", identifier(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("window_start", UTCDateTime(), nullable=True),
        sa.Column("window_end", UTCDateTime(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("fetched", sa.Integer(), nullable=False),
        sa.Column("created", sa.Integer(), nullable=False),
        sa.Column("duplicates", sa.Integer(), nullable=False),
        sa.Column("revised", sa.Integer(), nullable=False),
        sa.Column("skipped", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("skipped_reasons", JSONDocument, nullable=False),
        sa.Column("backfill_id", sa.Uuid(), nullable=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.Column("duration_seconds", sa.Float(), nullable=True),
        sa.CheckConstraint("kind IN ('incremental', 'backfill')", name="ck_sync_runs_kind_known"),
        sa.CheckConstraint(
            "status IN ('running', 'succeeded', 'partial', 'failed')",
            name="ck_sync_runs_status_known",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_sync_runs"),
    )
    op.create_index(
        "uq_sync_runs_one_running",
        "sync_runs",
        ["tenant_id", "connector"],
        unique=True,
        sqlite_where=sa.text("status = 'running'"),
        postgresql_where=sa.text("status = 'running'"),
    )
    op.create_index(
        "ix_sync_runs_connector_started", "sync_runs", ["tenant_id", "connector", "started_at"]
    )
    op.create_table(
        "backfills",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("connector", identifier(64), nullable=False),
        sa.Column("since", UTCDateTime(), nullable=False),
        sa.Column("until", UTCDateTime(), nullable=False),
        sa.Column("slice_seconds", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=True),
        sa.CheckConstraint(
            "status IN ('open', 'finished', 'abandoned')", name="ck_backfills_status_known"
        ),
        sa.CheckConstraint("slice_seconds > 0", name="ck_backfills_slice_positive"),
        sa.CheckConstraint("since < until", name="ck_backfills_range_not_empty"),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_backfills"),
    )
    op.create_index(
        "uq_backfills_one_open",
        "backfills",
        ["tenant_id", "connector"],
        unique=True,
        sqlite_where=sa.text("status = 'open'"),
        postgresql_where=sa.text("status = 'open'"),
    )
    op.create_table(
        "backfill_slices",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("backfill_id", sa.Uuid(), nullable=False),
        sa.Column("slice_start", UTCDateTime(), nullable=False),
        sa.Column("slice_end", UTCDateTime(), nullable=False),
        sa.Column("done_at", UTCDateTime(), nullable=True),
        sa.Column("run_id", sa.Uuid(), nullable=True),
        sa.CheckConstraint("slice_start < slice_end", name="ck_backfill_slices_slice_not_empty"),
        sa.ForeignKeyConstraint(
            ["tenant_id", "backfill_id"],
            ["backfills.tenant_id", "backfills.id"],
            name="fk_backfill_slices_tenant_id_backfill_id_backfills",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "backfill_id", "slice_start", name="pk_backfill_slices"
        ),
    )


def downgrade() -> None:
    op.drop_table("backfill_slices")
    op.drop_index("uq_backfills_one_open", table_name="backfills")
    op.drop_table("backfills")
    op.drop_index("ix_sync_runs_connector_started", table_name="sync_runs")
    op.drop_index("uq_sync_runs_one_running", table_name="sync_runs")
    op.drop_table("sync_runs")
    op.drop_table("connector_cursors")
