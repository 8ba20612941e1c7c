"""The relational schema (SQLAlchemy 2 typed ORM).

Every table carries ``tenant_id`` and every primary key and unique index starts with
it, so the schema can be distributed by tenant (Citus) without weakening a
guarantee. The database enforces the invariants: the episode key index is what makes
ingest idempotent, not application code.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

__all__ = ["Base", "EpisodeRevisionRow", "EpisodeRow"]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

TENANT_ID_LENGTH = 64
SUBJECT_ID_LENGTH = 255
LABEL_LENGTH = 255
IDEMPOTENCY_KEY_LENGTH = 512


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class EpisodeRow(Base):
    """One logical source event at its current revision.

    ``idempotency_key`` is unique per (tenant, subject) when set and never expires.
    ``revision`` starts at 1 and grows when the same key arrives with another payload;
    earlier revisions live in ``episode_revisions``. ``compiled_revision`` is the
    revision the last successful compile consumed (0: never compiled).
    """

    __tablename__ = "episodes"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    subject_id: Mapped[str] = mapped_column(identifier(SUBJECT_ID_LENGTH))
    source: Mapped[str] = mapped_column(identifier(LABEL_LENGTH))
    type: Mapped[str] = mapped_column(identifier(LABEL_LENGTH))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONDocument)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    session_id: Mapped[str | None] = mapped_column(sa.String(LABEL_LENGTH))
    idempotency_key: Mapped[str | None] = mapped_column(identifier(IDEMPOTENCY_KEY_LENGTH))
    content_hash: Mapped[str] = mapped_column(sa.String(64))
    revision: Mapped[int] = mapped_column(sa.Integer, default=1)
    compiled_revision: Mapped[int] = mapped_column(sa.Integer, default=0)
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revised_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.Index(
            "uq_episodes_idempotency_key",
            "tenant_id",
            "subject_id",
            "idempotency_key",
            unique=True,
            sqlite_where=sa.text("idempotency_key IS NOT NULL"),
            postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        ),
        sa.Index("ix_episodes_subject_timeline", "tenant_id", "subject_id", "occurred_at"),
        # Compile looks for episodes whose current revision it has not consumed yet;
        # once compiled they drop out of this index, so it stays small.
        sa.Index(
            "ix_episodes_uncompiled",
            "tenant_id",
            "subject_id",
            sqlite_where=sa.text("compiled_revision < revision"),
            postgresql_where=sa.text("compiled_revision < revision"),
        ),
        sa.CheckConstraint("revision >= 1", name="revision_positive"),
        sa.CheckConstraint("compiled_revision <= revision", name="compiled_not_ahead"),
    )


class EpisodeRevisionRow(Base):
    """An earlier revision of an episode, kept when a newer payload replaced it."""

    __tablename__ = "episode_revisions"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    episode_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    revision: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    source: Mapped[str] = mapped_column(identifier(LABEL_LENGTH))
    content_hash: Mapped[str] = mapped_column(sa.String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONDocument)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)
    replaced_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.ForeignKeyConstraint(
            ["tenant_id", "episode_id"],
            ["episodes.tenant_id", "episodes.id"],
            ondelete="CASCADE",
        ),
    )
