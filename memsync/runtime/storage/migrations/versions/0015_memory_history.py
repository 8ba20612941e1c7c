"""Transaction time kept: ``memory_history`` and ``conflict_history``, one row per
memory or conflict per change, so ``as_of`` reads what the store said then instead of
guessing from today's rows; and an index by subject on ``episode_revisions``, which
``as_of`` now reads for the revision each record had then.

Conflicts start with a row at their detection (open) and, if resolved, one at their
resolution: a conflict resolved and opened again before the upgrade keeps only its
latest cycle, as ``as_of`` read it until now.

Stores written before it kept one status change per memory (``status_changed_at``),
so each memory gets what ``as_of`` assumed until now: its state at ``created_at`` —
active, unless it was created in another status — and, if its status changed later,
its current state at ``status_changed_at``. Bundles asked ``as_of`` a moment before the
upgrade are built as they were; only changes after it are kept exactly.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.migrate import note
from memsync.runtime.storage.types import UTCDateTime, identifier

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_COLUMNS = (
    "tenant_id, memory_id, recorded_at, subject_id, status, status_rule, valid_from, "
    "valid_to, asserted_at, explicit_change"
)


def upgrade() -> None:
    op.create_table(
        "memory_history",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("memory_id", sa.Uuid, nullable=False),
        sa.Column("recorded_at", UTCDateTime, nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("status_rule", identifier(32)),
        sa.Column("valid_from", UTCDateTime, nullable=False),
        sa.Column("valid_to", UTCDateTime),
        sa.Column("asserted_at", UTCDateTime, nullable=False),
        sa.Column("explicit_change", sa.Boolean, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "memory_id"],
            ["memories.tenant_id", "memories.id"],
            name="fk_memory_history_tenant_id_memory_id_memories",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "memory_id", "recorded_at", name="pk_memory_history"),
    )
    op.create_index(
        "ix_memory_history_subject",
        "memory_history",
        ["tenant_id", "subject_id", "memory_id", "recorded_at"],
    )
    op.create_index(
        "ix_episode_revisions_subject",
        "episode_revisions",
        ["tenant_id", "subject_id", "replaced_at"],
    )
    _conflict_history()
    bind = op.get_bind()
    created_in_status = "status_changed_at <= created_at"
    created = bind.execute(
        sa.text(
            f"INSERT INTO memory_history ({_COLUMNS}) "
            "SELECT tenant_id, id, created_at, subject_id, "
            f"CASE WHEN {created_in_status} THEN status ELSE 'active' END, "
            f"CASE WHEN {created_in_status} THEN status_rule END, valid_from, "
            f"CASE WHEN {created_in_status} THEN valid_to END, asserted_at, explicit_change "
            "FROM memories"
        )
    ).rowcount
    changed = bind.execute(
        sa.text(
            f"INSERT INTO memory_history ({_COLUMNS}) "
            "SELECT tenant_id, id, status_changed_at, subject_id, status, status_rule, "
            "valid_from, valid_to, asserted_at, explicit_change "
            "FROM memories WHERE status_changed_at > created_at"
        )
    ).rowcount
    if created:
        note(
            f"0015 memory history: {created} memories start their history at their creation, "
            f"{changed} of them with their one recorded status change"
        )


def _conflict_history() -> None:
    op.create_table(
        "conflict_history",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("conflict_id", sa.Uuid, nullable=False),
        sa.Column("recorded_at", UTCDateTime, nullable=False),
        sa.Column("subject_id", identifier(255), nullable=False),
        sa.Column("rule", identifier(32), nullable=False),
        sa.Column("score", sa.Float),
        sa.Column("threshold", sa.Float),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("job_id", sa.String(64)),
        sa.Column("detected_at", UTCDateTime, nullable=False),
        sa.Column("resolved_at", UTCDateTime),
        sa.Column("chosen_memory_id", sa.Uuid),
        sa.ForeignKeyConstraint(
            ["tenant_id", "conflict_id"],
            ["conflicts.tenant_id", "conflicts.id"],
            name="fk_conflict_history_tenant_id_conflict_id_conflicts",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "tenant_id", "conflict_id", "recorded_at", name="pk_conflict_history"
        ),
    )
    op.create_index(
        "ix_conflict_history_subject",
        "conflict_history",
        ["tenant_id", "subject_id", "conflict_id", "recorded_at"],
    )
    columns = (
        "tenant_id, conflict_id, recorded_at, subject_id, rule, score, threshold, status, "
        "job_id, detected_at, resolved_at, chosen_memory_id"
    )
    # Opened at its detection; resolved, if it is, at its resolution.
    bind = op.get_bind()
    bind.execute(
        sa.text(
            f"INSERT INTO conflict_history ({columns}) "
            "SELECT tenant_id, id, detected_at, subject_id, rule, score, threshold, 'open', "
            "job_id, detected_at, NULL, NULL FROM conflicts"
        )
    )
    bind.execute(
        sa.text(
            f"INSERT INTO conflict_history ({columns}) "
            "SELECT tenant_id, id, resolved_at, subject_id, rule, score, threshold, status, "
            "job_id, detected_at, resolved_at, chosen_memory_id FROM conflicts "
            "WHERE status = 'resolved' AND resolved_at > detected_at"
        )
    )


def downgrade() -> None:
    op.drop_index("ix_conflict_history_subject", table_name="conflict_history")
    op.drop_table("conflict_history")
    op.drop_index("ix_episode_revisions_subject", table_name="episode_revisions")
    op.drop_index("ix_memory_history_subject", table_name="memory_history")
    op.drop_table("memory_history")
