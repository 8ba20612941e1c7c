"""A run record says how the run read: ``incremental`` (from the checkpoints),
``full_refresh`` (from the configured start, whatever the checkpoints say) or
``backfill``. Runs recorded before it keep what they said (a full refresh then was
recorded ``incremental``: nothing tells the two apart afterwards).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-05
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sync_runs") as batch:
        batch.drop_constraint("ck_sync_runs_kind_known", type_="check")
        batch.create_check_constraint(
            "ck_sync_runs_kind_known", "kind IN ('incremental', 'full_refresh', 'backfill')"
        )


def downgrade() -> None:
    op.execute("UPDATE sync_runs SET kind = 'incremental' WHERE kind = 'full_refresh'")
    with op.batch_alter_table("sync_runs") as batch:
        batch.drop_constraint("ck_sync_runs_kind_known", type_="check")
        batch.create_check_constraint(
            "ck_sync_runs_kind_known", "kind IN ('incremental', 'backfill')"
        )
