"""Supersession records keep a bounded sample of each side's episodes and the count.

A record used to list every source episode of both memories. For a memory asserted
thousands of times that made each record thousands of ids long, and a claim that
flips often (a weekly "I'm in X this week") made the table grow with the square of
the evidence. Each side now lists at most 64 ids; the counts say how many there
were. The full provenance of both memories stays in ``memory_sources``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("supersessions", schema=None) as batch_op:
        for side in ("winner", "loser"):
            batch_op.add_column(
                sa.Column(
                    f"{side}_episode_count",
                    sa.Integer(),
                    server_default=sa.text("0"),
                    nullable=False,
                )
            )
    # Records written before this revision list every id: their count is the length.
    length = (
        "jsonb_array_length"
        if op.get_bind().dialect.name == "postgresql"
        else ("json_array_length")
    )
    op.execute(
        f"UPDATE supersessions SET winner_episode_count = {length}(winner_episode_ids), "
        f"loser_episode_count = {length}(loser_episode_ids)"
    )


def downgrade() -> None:
    with op.batch_alter_table("supersessions", schema=None) as batch_op:
        batch_op.drop_column("loser_episode_count")
        batch_op.drop_column("winner_episode_count")
