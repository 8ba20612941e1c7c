"""Outcomes that tell the truth: a job says how it ended, a run says what would fix it.

``jobs.outcome`` is set when a job finishes: ``succeeded``, ``partial`` (a sync run
that stored part of its window), ``failed``, or ``needs_attention`` (an error a person
must fix; not retried). ``sync_runs.needs_attention`` marks such errors on the run;
``sync_runs.retry_at`` is when a source that rate limited the run said it resets.
Finished jobs from before this revision get the outcome their status implies.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import UTCDateTime, identifier

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("outcome", identifier(16), nullable=True))
    with op.batch_alter_table("sync_runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("needs_attention", sa.Boolean(), server_default=sa.false(), nullable=False)
        )
        batch_op.add_column(sa.Column("retry_at", UTCDateTime(), nullable=True))
    op.execute(
        "UPDATE jobs SET outcome = CASE status WHEN 'completed' THEN 'succeeded' "
        "WHEN 'failed' THEN 'failed' END WHERE status IN ('completed', 'failed')"
    )


def downgrade() -> None:
    with op.batch_alter_table("sync_runs", schema=None) as batch_op:
        batch_op.drop_column("retry_at")
        batch_op.drop_column("needs_attention")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("outcome")
