"""A backfill slice keeps how far it got (``progress``): the streams it read
completely, and in the one it was reading, the highest position committed; a stopped
backfill resumes the slice from there. Slices from before it have none (they resume
at their start, as before).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import JSONDocument

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("backfill_slices", sa.Column("progress", JSONDocument))


def downgrade() -> None:
    with op.batch_alter_table("backfill_slices") as batch:
        batch.drop_column("progress")
