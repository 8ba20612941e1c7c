"""An index for the queue depth every metrics scrape reads.

``GET /metrics`` counts jobs by kind and status on every scrape, so every replica
reports the store's truth. Completed jobs are kept (audit trail, dedup record), so the
table only grows with them; the scrape counts the others (pending, running, failed),
and this partial index holds only those, so a scrape reads the backlog and the
failures, never the history.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_jobs_depth",
        "jobs",
        ["kind", "status"],
        sqlite_where=sa.text("status <> 'completed'"),
        postgresql_where=sa.text("status <> 'completed'"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_depth", table_name="jobs")
