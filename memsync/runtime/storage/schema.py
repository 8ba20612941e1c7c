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

from memsync.connectors.base import STREAM_NAME_LENGTH
from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

__all__ = [
    "BackfillRow",
    "BackfillSliceRow",
    "Base",
    "EpisodeRevisionRow",
    "EpisodeRow",
    "JobRow",
    "LLMExtractionRow",
    "MemoryVersionRow",
    "SyncRunRow",
    "SyncStreamRow",
]

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
CONNECTOR_NAME_LENGTH = 64


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)


class EpisodeRow(Base):
    """One logical source event at its current revision.

    ``idempotency_key`` is unique per tenant when set and never expires: it names one
    source record wherever it is filed, so ``subject_id`` is where the record is filed
    *now*. ``revision`` starts at 1 and grows when the same key arrives with another
    payload or under another subject; earlier revisions live in ``episode_revisions``.
    ``compiled_revision`` is the revision the last successful compile consumed (0:
    never compiled). ``deleted_at`` is set while the current revision is a tombstone:
    the source showed the record deleted; the payload is the last one it had, and a
    later live read of the key revives the record as a new revision.
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
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.Index(
            "uq_episodes_idempotency_key",
            "tenant_id",
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
    """An earlier revision of an episode, kept when a newer payload (or a move to
    another subject) replaced it; ``subject_id`` is where it was filed then."""

    __tablename__ = "episode_revisions"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    episode_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    revision: Mapped[int] = mapped_column(sa.Integer, primary_key=True)
    subject_id: Mapped[str] = mapped_column(identifier(SUBJECT_ID_LENGTH))
    source: Mapped[str] = mapped_column(identifier(LABEL_LENGTH))
    content_hash: Mapped[str] = mapped_column(sa.String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONDocument)
    provenance: Mapped[dict[str, Any]] = mapped_column(JSONDocument)
    occurred_at: Mapped[datetime] = mapped_column(UTCDateTime)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)
    replaced_at: Mapped[datetime] = mapped_column(UTCDateTime)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.ForeignKeyConstraint(
            ["tenant_id", "episode_id"],
            ["episodes.tenant_id", "episodes.id"],
            ondelete="CASCADE",
        ),
    )


class MemoryRow(Base):
    """A derived statement about a subject, identified by its ``memory_key``.

    The unique index on (tenant_id, subject_id, memory_key) is what makes compile a
    set: deriving the same statement again finds this row and only adds provenance.
    Memories are never deleted except with their subject, or when a forgotten
    connector's episodes were all they rested on; a loser is ``superseded``.
    """

    __tablename__ = "memories"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    subject_id: Mapped[str] = mapped_column(identifier(SUBJECT_ID_LENGTH))
    memory_key: Mapped[str] = mapped_column(identifier(64))
    kind: Mapped[str] = mapped_column(identifier(32))
    content: Mapped[str] = mapped_column(sa.Text)
    claim_key: Mapped[str | None] = mapped_column(identifier(LABEL_LENGTH))
    claim_value: Mapped[str | None] = mapped_column(sa.Text)
    confidence: Mapped[float] = mapped_column(sa.Float)
    negated: Mapped[bool] = mapped_column(sa.Boolean)
    explicit_change: Mapped[bool] = mapped_column(sa.Boolean)
    status: Mapped[str] = mapped_column(identifier(16))
    status_rule: Mapped[str | None] = mapped_column(identifier(32))
    valid_from: Mapped[datetime] = mapped_column(UTCDateTime)
    valid_to: Mapped[datetime | None] = mapped_column(UTCDateTime)
    asserted_at: Mapped[datetime] = mapped_column(UTCDateTime)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONDocument)
    job_id: Mapped[str | None] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    status_changed_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.Index("uq_memories_memory_key", "tenant_id", "subject_id", "memory_key", unique=True),
        sa.Index("ix_memories_subject_status", "tenant_id", "subject_id", "status"),
        # Search reads a subject's active memories newest assertion first and stops at
        # its limit; without this index it sorts every active memory of the subject.
        sa.Index(
            "ix_memories_active_asserted",
            "tenant_id",
            "subject_id",
            "asserted_at",
            sqlite_where=sa.text("status = 'active'"),
            postgresql_where=sa.text("status = 'active'"),
        ),
        sa.CheckConstraint("status IN ('active', 'superseded', 'tombstoned')", name="status_known"),
    )


class MemoryVersionRow(Base):
    """Which state a subject's memories are in, and when they last changed.

    Every change set the compile stage applies to a subject's memories (new memories,
    provenance, status changes, conflicts opened or resolved) gives ``version`` a fresh
    random value in the same transaction and moves ``changed_at`` forward to the
    change's time. Random rather than counted, so a subject deleted and written again
    never repeats a version. The read path keys what it precomputes per subject by
    ``version`` and dates a bundle without ``as_of`` by ``changed_at``, never by the wall
    clock.
    """

    __tablename__ = "memory_versions"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    subject_id: Mapped[str] = mapped_column(identifier(SUBJECT_ID_LENGTH), primary_key=True)
    version: Mapped[str] = mapped_column(sa.String(32))
    changed_at: Mapped[datetime] = mapped_column(UTCDateTime)


class MemorySourceRow(Base):
    """Provenance: one episode that asserted a memory, and the latest revision of it
    that did. A set per memory. The episode still supports the memory while that is
    its compiled revision, it is not deleted and it is filed under the memory's subject.
    """

    __tablename__ = "memory_sources"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    memory_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    episode_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    subject_id: Mapped[str] = mapped_column(identifier(SUBJECT_ID_LENGTH))
    episode_revision: Mapped[int] = mapped_column(sa.Integer)
    added_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.ForeignKeyConstraint(
            ["tenant_id", "memory_id"], ["memories.tenant_id", "memories.id"], ondelete="CASCADE"
        ),
        sa.Index("ix_memory_sources_episode", "tenant_id", "episode_id"),
    )


class SupersessionRow(Base):
    """The audit record of one decision: rule, claim key, score, threshold, both sides."""

    __tablename__ = "supersessions"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    subject_id: Mapped[str] = mapped_column(identifier(SUBJECT_ID_LENGTH))
    rule: Mapped[str] = mapped_column(identifier(32))
    claim_key: Mapped[str | None] = mapped_column(identifier(LABEL_LENGTH))
    score: Mapped[float | None] = mapped_column(sa.Float)
    threshold: Mapped[float | None] = mapped_column(sa.Float)
    winner_memory_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    winner_memory_key: Mapped[str | None] = mapped_column(identifier(64))
    loser_memory_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    loser_memory_key: Mapped[str] = mapped_column(identifier(64))
    # At most RECORDED_EPISODES_PER_SIDE ids per side; the counts say how many the
    # memories had when the decision was made (memory_sources keeps them all).
    winner_episode_ids: Mapped[list[str]] = mapped_column(JSONDocument)
    loser_episode_ids: Mapped[list[str]] = mapped_column(JSONDocument)
    winner_episode_count: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    loser_episode_count: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    job_id: Mapped[str | None] = mapped_column(sa.String(64))
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.Index("ix_supersessions_subject", "tenant_id", "subject_id", "decided_at"),
        # Compile follows the records of a memory that no longer stands as it did to
        # the memories it beat and was beaten by, to decide their contests again.
        sa.Index("ix_supersessions_winner", "tenant_id", "winner_memory_id"),
        sa.Index("ix_supersessions_loser", "tenant_id", "loser_memory_id"),
    )


class ConflictRow(Base):
    """Two active memories that contradict each other under the ``flag`` policy.

    The id is derived from the two memory keys, so detecting the same conflict again
    hits the primary key instead of opening a second record.
    """

    __tablename__ = "conflicts"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    subject_id: Mapped[str] = mapped_column(identifier(SUBJECT_ID_LENGTH))
    kind: Mapped[str] = mapped_column(identifier(32))
    claim_key: Mapped[str | None] = mapped_column(identifier(LABEL_LENGTH))
    rule: Mapped[str] = mapped_column(identifier(32))
    score: Mapped[float | None] = mapped_column(sa.Float)
    threshold: Mapped[float | None] = mapped_column(sa.Float)
    first_memory_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    second_memory_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    first_memory_key: Mapped[str] = mapped_column(identifier(64))
    second_memory_key: Mapped[str] = mapped_column(identifier(64))
    first_content: Mapped[str] = mapped_column(sa.Text)
    second_content: Mapped[str] = mapped_column(sa.Text)
    status: Mapped[str] = mapped_column(identifier(16))
    job_id: Mapped[str | None] = mapped_column(sa.String(64))
    detected_at: Mapped[datetime] = mapped_column(UTCDateTime)
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    chosen_memory_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)

    __table_args__ = (
        sa.Index("ix_conflicts_subject_status", "tenant_id", "subject_id", "status"),
        sa.CheckConstraint("status IN ('open', 'resolved')", name="status_known"),
    )


class LLMExtractionRow(Base):
    """A recorded model extraction, replayed instead of asking the model again.

    Keyed per tenant by ``extraction_key`` (prompt version, model, episode content
    hash); the first record of a key wins.
    """

    __tablename__ = "llm_extractions"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    extraction_key: Mapped[str] = mapped_column(
        identifier(IDEMPOTENCY_KEY_LENGTH), primary_key=True
    )
    extraction: Mapped[str] = mapped_column(sa.Text)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SyncStreamRow(Base):
    """Where one stream of a connector instance stands: its checkpoint, and how the last
    run that read it ended for it.

    One row per (tenant, connector, stream). ``position`` mirrors ``cursor["position"]``
    as a column so the database itself refuses to move a checkpoint backwards (the
    upsert only applies when the new position is later); NULL: no checkpoint, the
    stream reads from the connector's ``start``. The stream ``*`` holds a position for
    every stream without a row of its own (the single cursor of before streams, or a
    reset of all streams): such a stream starts there and takes it over at its next run.
    ``last_run_id``, ``last_run_at`` and ``last_status`` (``succeeded``: read to its
    end; ``partial``: cut short after committing some of it; ``failed``: cut short with
    nothing of it committed) describe the last run that read the stream;
    ``complete_through`` is the end of the last window it read completely (the lag is
    measured from it), ``completed_run_id`` the run that did.
    """

    __tablename__ = "sync_streams"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    connector: Mapped[str] = mapped_column(identifier(CONNECTOR_NAME_LENGTH), primary_key=True)
    stream: Mapped[str] = mapped_column(identifier(STREAM_NAME_LENGTH), primary_key=True)
    position: Mapped[datetime | None] = mapped_column(UTCDateTime)
    cursor: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    checkpoint_run_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    checkpointed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_run_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    last_run_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_status: Mapped[str | None] = mapped_column(identifier(16))
    complete_through: Mapped[datetime | None] = mapped_column(UTCDateTime)
    completed_run_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)

    __table_args__ = (
        sa.CheckConstraint(
            "last_status IN ('succeeded', 'partial', 'failed')", name="last_status_known"
        ),
    )


class SyncRunRow(Base):
    """One sync or backfill run of one connector instance, and what it did.

    At most one run per (tenant, connector) is ``running``: a partial unique index
    says so, so a second run cannot start however it is launched. A run whose
    process died is recognised by its stale heartbeat (or its dead pid on this host)
    and marked ``failed`` before another may start.
    """

    __tablename__ = "sync_runs"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    connector: Mapped[str] = mapped_column(identifier(CONNECTOR_NAME_LENGTH))
    connector_type: Mapped[str] = mapped_column(identifier(LABEL_LENGTH))
    kind: Mapped[str] = mapped_column(sa.String(16))
    window_start: Mapped[datetime | None] = mapped_column(UTCDateTime)
    window_end: Mapped[datetime] = mapped_column(UTCDateTime)
    status: Mapped[str] = mapped_column(sa.String(16))
    fetched: Mapped[int] = mapped_column(sa.Integer, default=0)
    created: Mapped[int] = mapped_column(sa.Integer, default=0)
    duplicates: Mapped[int] = mapped_column(sa.Integer, default=0)
    revised: Mapped[int] = mapped_column(sa.Integer, default=0)
    tombstoned: Mapped[int] = mapped_column(sa.Integer, server_default=sa.text("0"))
    skipped: Mapped[int] = mapped_column(sa.Integer, default=0)
    errors: Mapped[int] = mapped_column(sa.Integer, default=0)
    error: Mapped[str | None] = mapped_column(sa.Text)
    skipped_reasons: Mapped[list[str]] = mapped_column(JSONDocument)
    backfill_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
    host: Mapped[str] = mapped_column(sa.String(LABEL_LENGTH))
    pid: Mapped[int] = mapped_column(sa.Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    duration_seconds: Mapped[float | None] = mapped_column(sa.Float)
    # Set when the error is one a person must fix (credentials, configuration, a
    # resource that does not exist): retrying will not help.
    needs_attention: Mapped[bool] = mapped_column(sa.Boolean, default=False)
    # Set when the run ended on a rate limit whose reset the source announced.
    retry_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.Index(
            "uq_sync_runs_one_running",
            "tenant_id",
            "connector",
            unique=True,
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        ),
        sa.Index("ix_sync_runs_connector_started", "tenant_id", "connector", "started_at"),
        sa.CheckConstraint("kind IN ('incremental', 'backfill')", name="kind_known"),
        sa.CheckConstraint(
            "status IN ('running', 'succeeded', 'partial', 'failed')", name="status_known"
        ),
    )


class BackfillRow(Base):
    """A manual re-read of ``[since, until]`` in slices of ``slice_seconds``.

    At most one backfill per (tenant, connector) is ``open`` (partial unique index);
    re-running the same command resumes it from its first slice not yet done.
    """

    __tablename__ = "backfills"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    connector: Mapped[str] = mapped_column(identifier(CONNECTOR_NAME_LENGTH))
    since: Mapped[datetime] = mapped_column(UTCDateTime)
    until: Mapped[datetime] = mapped_column(UTCDateTime)
    slice_seconds: Mapped[int] = mapped_column(sa.Integer)
    status: Mapped[str] = mapped_column(sa.String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        sa.Index(
            "uq_backfills_one_open",
            "tenant_id",
            "connector",
            unique=True,
            sqlite_where=sa.text("status = 'open'"),
            postgresql_where=sa.text("status = 'open'"),
        ),
        sa.CheckConstraint("status IN ('open', 'finished', 'abandoned')", name="status_known"),
        sa.CheckConstraint("slice_seconds > 0", name="slice_positive"),
        sa.CheckConstraint("since < until", name="range_not_empty"),
    )


class BackfillSliceRow(Base):
    """One slice ``[slice_start, slice_end]`` of a backfill; ``done_at`` is set only
    after every episode read in it was committed."""

    __tablename__ = "backfill_slices"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    backfill_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    slice_start: Mapped[datetime] = mapped_column(UTCDateTime, primary_key=True)
    slice_end: Mapped[datetime] = mapped_column(UTCDateTime)
    done_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    run_id: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)

    __table_args__ = (
        sa.ForeignKeyConstraint(
            ["tenant_id", "backfill_id"],
            ["backfills.tenant_id", "backfills.id"],
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("slice_start < slice_end", name="slice_not_empty"),
    )


JOB_STATUSES = ("pending", "running", "completed", "failed")
JOB_OUTCOMES = ("succeeded", "partial", "failed", "needs_attention")


class JobRow(Base):
    """A durable unit of background work (a compile now; syncs and backfills later).

    ``target`` is what the job acts on (a subject for compile, a connector for sync).
    Two partial unique indexes are the queue's invariants:

    - ``uq_jobs_pending_target``: at most one *pending* job per (tenant, kind,
      target), so triggers that fire again while a job waits coalesce into it;
    - ``uq_jobs_dedup_key``: a job that carries a ``dedup_key`` (a schedule id and the
      scheduled fire time) exists once per target, so two scheduler replicas firing
      the same tick enqueue it once.

    ``attempts`` counts claims; a worker holds a job while ``lease_expires_at`` is in
    the future and renews it with heartbeats. An expired lease makes the job claimable
    again. Finished jobs are kept (they are the audit trail and the dedup record).
    """

    __tablename__ = "jobs"

    tenant_id: Mapped[str] = mapped_column(identifier(TENANT_ID_LENGTH), primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    kind: Mapped[str] = mapped_column(identifier(32))
    target: Mapped[str] = mapped_column(identifier(SUBJECT_ID_LENGTH))
    status: Mapped[str] = mapped_column(identifier(16))
    trigger: Mapped[str] = mapped_column(identifier(64))
    dedup_key: Mapped[str | None] = mapped_column(identifier(LABEL_LENGTH))
    attempts: Mapped[int] = mapped_column(sa.Integer)
    max_attempts: Mapped[int] = mapped_column(sa.Integer)
    lease_owner: Mapped[str | None] = mapped_column(sa.String(LABEL_LENGTH))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    run_after: Mapped[datetime] = mapped_column(UTCDateTime)
    queued_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONDocument)
    error: Mapped[str | None] = mapped_column(sa.Text)
    outcome: Mapped[str | None] = mapped_column(identifier(16))

    __table_args__ = (
        sa.Index(
            "uq_jobs_pending_target",
            "tenant_id",
            "kind",
            "target",
            unique=True,
            sqlite_where=sa.text("status = 'pending'"),
            postgresql_where=sa.text("status = 'pending'"),
        ),
        sa.Index(
            "uq_jobs_dedup_key",
            "tenant_id",
            "kind",
            "target",
            "dedup_key",
            unique=True,
            sqlite_where=sa.text("dedup_key IS NOT NULL"),
            postgresql_where=sa.text("dedup_key IS NOT NULL"),
        ),
        # The claim reads the queue across tenants in run_after order; only waiting
        # jobs are in this index, so it stays as small as the backlog.
        sa.Index(
            "ix_jobs_ready",
            "run_after",
            sqlite_where=sa.text("status = 'pending'"),
            postgresql_where=sa.text("status = 'pending'"),
        ),
        # Reclaiming looks for running jobs whose lease has expired.
        sa.Index(
            "ix_jobs_leases",
            "lease_expires_at",
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        ),
        sa.Index("ix_jobs_listing", "tenant_id", "queued_at"),
        # The queue depth every metrics scrape counts: every job but the completed
        # ones, which are history (kept for audit and dedup) and only ever grow.
        sa.Index(
            "ix_jobs_depth",
            "kind",
            "status",
            sqlite_where=sa.text("status <> 'completed'"),
            postgresql_where=sa.text("status <> 'completed'"),
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'completed', 'failed')", name="status_known"
        ),
        sa.CheckConstraint("attempts >= 0 AND max_attempts >= 1", name="attempts_bounded"),
    )
