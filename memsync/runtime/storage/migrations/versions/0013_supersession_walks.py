"""Supersession records by winner and by loser: when a memory no longer stands as it
did (retired, or its latest assertion went away), compile follows the records it is in
to the memories it beat and was beaten by, and on, and decides their contests again.
These indexes make each step of that walk a lookup.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_supersessions_winner", "supersessions", ["tenant_id", "winner_memory_id"])
    op.create_index("ix_supersessions_loser", "supersessions", ["tenant_id", "loser_memory_id"])


def downgrade() -> None:
    op.drop_index("ix_supersessions_loser", table_name="supersessions")
    op.drop_index("ix_supersessions_winner", table_name="supersessions")
