"""A resolution recorded from a source keeps the ticket connector that recorded it
(``source_connector``: forgetting the connector's data removes it) and the source's
update time of the ticket it was read from (``source_updated_at``: a later write from
an older read of the ticket is ignored). Records written by ``POST /v1/resolutions``
have neither.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.types import UTCDateTime, identifier

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("resolutions", sa.Column("source_connector", identifier(64)))
    op.add_column("resolutions", sa.Column("source_updated_at", UTCDateTime))


def downgrade() -> None:
    with op.batch_alter_table("resolutions") as batch:
        batch.drop_column("source_updated_at")
        batch.drop_column("source_connector")
