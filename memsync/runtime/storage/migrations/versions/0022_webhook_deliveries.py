"""Webhook deliveries per connector: how many were stored, duplicates, revisions,
ignored and refused, and when the last of each arrived (``memsync state show``, the
push gap). Keys lead with ``tenant_id``, like every table's.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import UTCDateTime, identifier

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "webhook_deliveries",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("connector", identifier(64), nullable=False),
        *(
            sa.Column(name, sa.Integer, server_default=sa.text("0"), nullable=False)
            for name in ("stored", "duplicate", "revised", "ignored", "refused")
        ),
        sa.Column("last_delivery_at", UTCDateTime, nullable=False),
        sa.Column("last_accepted_at", UTCDateTime),
        sa.Column("last_stored_at", UTCDateTime),
        sa.Column("last_refused_at", UTCDateTime),
        sa.Column("last_refusal", identifier(32)),
        sa.Column("last_refusal_status", sa.Integer),
        sa.PrimaryKeyConstraint("tenant_id", "connector", name="pk_webhook_deliveries"),
    )


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
