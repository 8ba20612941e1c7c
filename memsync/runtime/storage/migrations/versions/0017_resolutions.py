"""Resolutions: how each support session of a subject ended (Statewave's resolution
record), one per (tenant, subject, session), upserted by ``POST /v1/resolutions``.
Keys lead with ``tenant_id``, so on Citus the table is distributed by tenant and
colocated with ``episodes`` as it is created.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "resolutions",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("id", sa.Uuid, nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("session_id", identifier(255), nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("resolution_summary", sa.Text),
        sa.Column("metadata", JSONDocument, nullable=False),
        sa.Column("resolved_at", UTCDateTime),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_resolutions"),
        sa.UniqueConstraint(
            "tenant_id",
            "subject_id",
            "session_id",
            name="uq_resolutions_tenant_id_subject_id_session_id",
        ),
        sa.CheckConstraint(
            "status IN ('open', 'resolved', 'unresolved')", name="ck_resolutions_status_known"
        ),
    )
    op.create_index(
        "ix_resolutions_subject_updated",
        "resolutions",
        ["tenant_id", "subject_id", "updated_at", "id"],
    )


def downgrade() -> None:
    op.drop_index("ix_resolutions_subject_updated", table_name="resolutions")
    op.drop_table("resolutions")
