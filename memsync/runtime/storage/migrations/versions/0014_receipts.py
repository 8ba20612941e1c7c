"""Receipts: what a context bundle served with ``emit_receipt`` was asked, showed and
hashed to, so it can be read back, listed and replayed (exactly, or against today's
store). Keys lead with ``tenant_id``, like every table's.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "receipts",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("id", sa.Uuid, nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("mode", identifier(16), nullable=False),
        sa.Column("parent_receipt_id", sa.String(255)),
        sa.Column("query_id", sa.String(255)),
        sa.Column("task_id", sa.String(255)),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("max_tokens", sa.Integer, nullable=False),
        sa.Column("layout", identifier(16), nullable=False),
        sa.Column("requested_as_of", UTCDateTime),
        sa.Column("as_of", UTCDateTime, nullable=False),
        sa.Column("context_hash", sa.String(64), nullable=False),
        sa.Column("token_estimate", sa.Integer, nullable=False),
        sa.Column("selected_entries", JSONDocument, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_receipts"),
        sa.CheckConstraint("mode IN ('retrieval', 'as_of_replay')", name="ck_receipts_mode_known"),
    )
    op.create_index(
        "ix_receipts_subject_created",
        "receipts",
        ["tenant_id", "subject_id", "created_at", "id"],
    )


def downgrade() -> None:
    op.drop_index("ix_receipts_subject_created", table_name="receipts")
    op.drop_table("receipts")
