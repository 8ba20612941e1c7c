"""Checkpoints per stream: ``sync_streams`` replaces ``connector_cursors``.

A connector reads its source as one or more streams (a repository's issues, its
comments; one Slack channel each), and each stream keeps its own checkpoint, the last
run that read it with how that ended for it, and the end of the last window it read
completely. Stream names come from each connector's configuration, which a migration
cannot see, so every connector's single cursor becomes its row for stream ``*``: every
stream of the connector starts from it and takes it over at its next run. Its
``complete_through`` is the end of the connector's last succeeded incremental run, as
the lag was measured until now. The migration reports how many cursors it carried over.

Downgrade keeps, per connector, the earliest checkpoint of its streams: the one
position from which no stream misses a record.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.migrate import note
from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_LAST_SUCCESS = (
    "FROM sync_runs AS r WHERE r.tenant_id = c.tenant_id AND r.connector = c.connector "
    "AND r.kind = 'incremental' AND r.status = 'succeeded'"
)


def upgrade() -> None:
    op.create_table(
        "sync_streams",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("connector", identifier(64), nullable=False),
        sa.Column("stream", identifier(255), nullable=False),
        sa.Column("position", UTCDateTime(), nullable=True),
        sa.Column("cursor", JSONDocument, nullable=True),
        sa.Column("checkpoint_run_id", sa.Uuid(), nullable=True),
        sa.Column("checkpointed_at", UTCDateTime(), nullable=True),
        sa.Column("last_run_id", sa.Uuid(), nullable=True),
        sa.Column("last_run_at", UTCDateTime(), nullable=True),
        sa.Column("last_status", identifier(16), nullable=True),
        sa.Column("complete_through", UTCDateTime(), nullable=True),
        sa.Column("completed_run_id", sa.Uuid(), nullable=True),
        sa.CheckConstraint(
            "last_status IN ('succeeded', 'partial', 'failed')",
            name="ck_sync_streams_last_status_known",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "connector", "stream", name="pk_sync_streams"),
    )
    carried = op.get_bind().execute(
        sa.text(
            "INSERT INTO sync_streams (tenant_id, connector, stream, position, cursor, "
            "checkpoint_run_id, checkpointed_at, complete_through, completed_run_id) "
            "SELECT c.tenant_id, c.connector, '*', c.position, c.cursor, c.run_id, "
            f"c.updated_at, (SELECT MAX(r.window_end) {_LAST_SUCCESS}), "
            f"(SELECT r.id {_LAST_SUCCESS} ORDER BY r.window_end DESC, r.id LIMIT 1) "
            "FROM connector_cursors AS c"
        )
    )
    op.drop_table("connector_cursors")
    if carried.rowcount > 0:
        note(
            f"0012 sync streams: {carried.rowcount} connector cursors carried over; each "
            "stream of those connectors starts from its connector's cursor"
        )


def downgrade() -> None:
    op.create_table(
        "connector_cursors",
        sa.Column("tenant_id", identifier(64), nullable=False),
        sa.Column("connector", identifier(64), nullable=False),
        sa.Column("position", UTCDateTime(), nullable=False),
        sa.Column("cursor", JSONDocument, nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=True),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "connector", name="pk_connector_cursors"),
    )
    streams = sa.table(
        "sync_streams",
        sa.column("tenant_id"),
        sa.column("connector"),
        sa.column("position", UTCDateTime()),
        sa.column("checkpoint_run_id", sa.Uuid()),
        sa.column("checkpointed_at", UTCDateTime()),
    )
    connection = op.get_bind()
    earliest: dict[tuple[str, str], sa.Row[tuple[object, ...]]] = {}
    rows = connection.execute(
        sa.select(streams).where(streams.c.position.is_not(None)).order_by(streams.c.position)
    )
    for row in rows:
        earliest.setdefault((row.tenant_id, row.connector), row)
    if earliest:
        cursors = sa.table(
            "connector_cursors",
            sa.column("tenant_id"),
            sa.column("connector"),
            sa.column("position", UTCDateTime()),
            sa.column("cursor", JSONDocument),
            sa.column("run_id", sa.Uuid()),
            sa.column("updated_at", UTCDateTime()),
        )
        connection.execute(
            cursors.insert(),
            [
                {
                    "tenant_id": row.tenant_id,
                    "connector": row.connector,
                    "position": row.position,
                    "cursor": {"position": row.position.isoformat(), "token": None},
                    "run_id": row.checkpoint_run_id,
                    "updated_at": row.checkpointed_at or row.position,
                }
                for row in earliest.values()
            ],
        )
    op.drop_table("sync_streams")
