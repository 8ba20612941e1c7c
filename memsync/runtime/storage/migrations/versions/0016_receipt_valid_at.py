"""Receipts keep the ``valid_at`` a context request asked for (``requested_valid_at``),
so a replay builds the same bundle: what the store said held at that valid time.
Receipts written before it asked for none (the column is null).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import UTCDateTime

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("receipts", sa.Column("requested_valid_at", UTCDateTime))


def downgrade() -> None:
    with op.batch_alter_table("receipts") as batch:
        batch.drop_column("requested_valid_at")
