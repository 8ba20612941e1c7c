"""The relational schema, as SQLAlchemy Core tables.

Every table carries ``tenant_id`` and every primary key and unique index starts with
it, so the schema can be distributed by tenant (Citus) without weakening a
guarantee. The database enforces the invariants: the episode key index is what makes
ingest idempotent, not application code.

Core tables rather than ORM classes: nothing maps rows to objects (every stage writes
set-based statements), and importing the ORM to declare classes cost a command that
opens the store about 70 ms (docs/benchmarks.md, "CLI start-up").

A table is built when it is first named (``schema.episodes``, ``from …schema import
episodes``), with the tables its foreign keys name; :data:`metadata`, which DDL,
Alembic and Citus read, builds all of them. Building the twenty tables is about 9 ms of
CPU, which a command that reads one of them (``memsync jobs list``) need not pay.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from memsync.connectors.checkpoints import STREAM_NAME_LENGTH
from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

__all__ = [
    "backfill_slices",
    "backfills",
    "conflict_history",
    "conflicts",
    "episode_labels",
    "episode_revisions",
    "episodes",
    "jobs",
    "llm_extractions",
    "memories",
    "memory_history",
    "memory_labels",
    "memory_sources",
    "memory_versions",
    "metadata",
    "receipts",
    "resolutions",
    "supersessions",
    "sync_runs",
    "sync_streams",
    "webhook_deliveries",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


PARTIAL_CONDITION = "memsync_where"
"""The key of a partial index's ``info`` that holds its condition (see
:func:`partial_index`)."""


def partial_index(
    name: str, *expressions: str | sa.ColumnElement[object], where: str, unique: bool = False
) -> sa.Index:
    """An index over the rows that match ``where``, one SQL condition given to both
    databases, so the two can never index different rows.

    The condition is kept in the index's ``info`` and given to a database's own option
    (``sqlite_where``, ``postgresql_where``) by :func:`state_partial_conditions` when a
    store of that database opens: naming a dialect's option here would import that
    dialect with the schema, and SQLAlchemy's PostgreSQL dialect costs a command over a
    SQLite store about a sixth of the time of importing SQLAlchemy itself
    (docs/benchmarks.md, "CLI start-up")."""
    index = sa.Index(name, *expressions, unique=unique)
    index.info[PARTIAL_CONDITION] = sa.text(where)
    return index


def state_partial_conditions(dialect: str) -> None:
    """Give every partial index its condition in ``dialect``'s own option
    (``<dialect>_where``), which DDL and Alembic read: the indexes of the tables built
    so far, and those of every table built later. Called by every store as it opens,
    when its engine has loaded the dialect; a repeat sets the same values again."""
    with _building:
        _stated_dialects.add(dialect)
        for table in _metadata.tables.values():
            _state_conditions(table, dialect)


def _state_conditions(table: sa.Table, dialect: str) -> None:
    for index in table.indexes:
        condition = index.info.get(PARTIAL_CONDITION)
        if condition is not None:
            index.dialect_kwargs[f"{dialect}_where"] = condition


TENANT_ID_LENGTH = 64
SUBJECT_ID_LENGTH = 255
LABEL_LENGTH = 255
IDEMPOTENCY_KEY_LENGTH = 512
CONNECTOR_NAME_LENGTH = 64


metadata: sa.MetaData
"""Every table of the store, all built: what migrations are compared against (``alembic
check``, ``tests/integration/test_migrations.py``)."""

_metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
_builders: dict[str, Callable[[], sa.Table]] = {}
# Dialects whose partial-index options a table built from now on gets at once.
_stated_dialects: set[str] = set()
# Two threads naming a table first must not both build it (SQLAlchemy refuses a table
# defined twice); re-entrant, as a table builds the tables its foreign keys name.
_building = threading.RLock()


def _table(build: Callable[[], sa.Table]) -> Callable[[], sa.Table]:
    """Register ``build`` (``_<name>``) as the maker of the table ``<name>``."""
    _builders[build.__name__.removeprefix("_")] = build
    return build


def __getattr__(name: str) -> Any:
    """A table, built on first use (then a plain attribute); ``metadata``, every table
    built."""
    if name == "metadata":
        for table_name in _builders:
            _built(table_name)
        globals()["metadata"] = _metadata
        return _metadata
    if name in _builders:
        return _built(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _built(name: str) -> sa.Table:
    with _building:
        table = _metadata.tables.get(name)
        if table is None:
            table = _builders[name]()
            for dialect in _stated_dialects:
                _state_conditions(table, dialect)
            for foreign_key in table.foreign_keys:
                _built(foreign_key.target_fullname.split(".")[0])
            globals()[name] = table
        return table


episodes: sa.Table
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


@_table
def _episodes() -> sa.Table:
    return sa.Table(
        "episodes",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("source", identifier(LABEL_LENGTH), nullable=False),
        sa.Column("type", identifier(LABEL_LENGTH), nullable=False),
        sa.Column("payload", JSONDocument, nullable=False),
        sa.Column("metadata", JSONDocument, nullable=False),
        sa.Column("provenance", JSONDocument, nullable=False),
        sa.Column("session_id", sa.String(LABEL_LENGTH)),
        sa.Column("idempotency_key", identifier(IDEMPOTENCY_KEY_LENGTH)),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("revision", sa.Integer, default=1, nullable=False),
        sa.Column("compiled_revision", sa.Integer, default=0, nullable=False),
        sa.Column("occurred_at", UTCDateTime, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("revised_at", UTCDateTime),
        sa.Column("deleted_at", UTCDateTime),
        partial_index(
            "uq_episodes_idempotency_key",
            "tenant_id",
            "idempotency_key",
            unique=True,
            where="idempotency_key IS NOT NULL",
        ),
        sa.Index("ix_episodes_subject_timeline", "tenant_id", "subject_id", "occurred_at"),
        # Compile looks for episodes whose current revision it has not consumed yet;
        # once compiled they drop out of this index, so it stays small.
        partial_index(
            "ix_episodes_uncompiled",
            "tenant_id",
            "subject_id",
            where="compiled_revision < revision",
        ),
        sa.CheckConstraint("revision >= 1", name="revision_positive"),
        sa.CheckConstraint("compiled_revision <= revision", name="compiled_not_ahead"),
    )


episode_revisions: sa.Table
"""An earlier revision of an episode, kept when a newer payload (or a move to
another subject) replaced it; ``subject_id`` is where it was filed then."""


@_table
def _episode_revisions() -> sa.Table:
    return sa.Table(
        "episode_revisions",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("episode_id", sa.Uuid, primary_key=True),
        sa.Column("revision", sa.Integer, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("source", identifier(LABEL_LENGTH), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("payload", JSONDocument, nullable=False),
        sa.Column("metadata", JSONDocument, nullable=False),
        sa.Column("provenance", JSONDocument, nullable=False),
        sa.Column("occurred_at", UTCDateTime, nullable=False),
        sa.Column("recorded_at", UTCDateTime, nullable=False),
        sa.Column("replaced_at", UTCDateTime, nullable=False),
        sa.Column("deleted_at", UTCDateTime),
        sa.ForeignKeyConstraint(
            ["tenant_id", "episode_id"],
            ["episodes.tenant_id", "episodes.id"],
            ondelete="CASCADE",
        ),
        # ``as_of`` reads the revisions a subject's records had then: those filed under it
        # and replaced after that moment.
        sa.Index("ix_episode_revisions_subject", "tenant_id", "subject_id", "replaced_at"),
    )


memories: sa.Table
"""A derived statement about a subject, identified by its ``memory_key``.

The unique index on (tenant_id, subject_id, memory_key) is what makes compile a
set: deriving the same statement again finds this row and only adds provenance.
Memories are never deleted except with their subject, or when a forgotten
connector's episodes were all they rested on; a loser is ``superseded``. Every writer
of the changeable columns (status, status rule, validity, assertion time, explicit
change) appends the new state to ``memory_history`` in the same transaction
(``record_memory_history``): that, not this row, is what ``as_of`` reads.
"""


@_table
def _memories() -> sa.Table:
    return sa.Table(
        "memories",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("memory_key", identifier(64), nullable=False),
        sa.Column("kind", identifier(32), nullable=False),
        sa.Column("content", sa.Text, nullable=False),
        sa.Column("claim_key", identifier(LABEL_LENGTH)),
        sa.Column("claim_value", sa.Text),
        sa.Column("confidence", sa.Float, nullable=False),
        sa.Column("negated", sa.Boolean, nullable=False),
        sa.Column("explicit_change", sa.Boolean, nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("status_rule", identifier(32)),
        sa.Column("valid_from", UTCDateTime, nullable=False),
        sa.Column("valid_to", UTCDateTime),
        sa.Column("asserted_at", UTCDateTime, nullable=False),
        sa.Column("metadata", JSONDocument, nullable=False),
        sa.Column("job_id", sa.String(64)),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.Column("status_changed_at", UTCDateTime, nullable=False),
        sa.Index("uq_memories_memory_key", "tenant_id", "subject_id", "memory_key", unique=True),
        sa.Index("ix_memories_subject_status", "tenant_id", "subject_id", "status"),
        # Search reads a subject's active memories newest assertion first and stops at
        # its limit; without this index it sorts every active memory of the subject.
        partial_index(
            "ix_memories_active_asserted",
            "tenant_id",
            "subject_id",
            "asserted_at",
            where="status = 'active'",
        ),
        sa.CheckConstraint("status IN ('active', 'superseded', 'tombstoned')", name="status_known"),
    )


memory_history: sa.Table
"""Transaction time: a memory's changeable fields as the store held them from
``recorded_at`` on, one row per memory per change (created, superseded, tombstoned,
reinstated, its validity or assertions revised), written by the same statement batch
as the change. ``as_of=T`` reads, per memory, the latest row recorded by ``T``; a
memory's other fields (kind, content, claim, metadata) never change, and its sources
at ``T`` are the ``memory_sources`` added by then. Rows are only added: two changes
of one memory at the same instant (chunks of one compile) keep the later state, as
the store did at that instant. Deleted only with their memory (a subject deletion, a
forgotten connector).
"""


@_table
def _memory_history() -> sa.Table:
    return sa.Table(
        "memory_history",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("memory_id", sa.Uuid, primary_key=True),
        sa.Column("recorded_at", UTCDateTime, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("status_rule", identifier(32)),
        sa.Column("valid_from", UTCDateTime, nullable=False),
        sa.Column("valid_to", UTCDateTime),
        sa.Column("asserted_at", UTCDateTime, nullable=False),
        sa.Column("explicit_change", sa.Boolean, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "memory_id"], ["memories.tenant_id", "memories.id"], ondelete="CASCADE"
        ),
        # ``as_of`` numbers a subject's rows per memory, newest first, up to a moment.
        sa.Index(
            "ix_memory_history_subject", "tenant_id", "subject_id", "memory_id", "recorded_at"
        ),
    )


memory_versions: sa.Table
"""Which state a subject's memories are in, and when they last changed.

Every change set the compile stage applies to a subject's memories (new memories,
provenance, status changes, conflicts opened or resolved) gives ``version`` a fresh
random value in the same transaction and moves ``changed_at`` forward to the
change's time. Random rather than counted, so a subject deleted and written again
never repeats a version. The read path keys what it precomputes per subject by
``version`` and dates a bundle without ``as_of`` by ``changed_at``, never by the wall
clock.
"""


@_table
def _memory_versions() -> sa.Table:
    return sa.Table(
        "memory_versions",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), primary_key=True),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("changed_at", UTCDateTime, nullable=False),
    )


memory_sources: sa.Table
"""Provenance: one episode that asserted a memory, and the latest revision of it
that did. A set per memory. The episode still supports the memory while that is
its compiled revision, it is not deleted and it is filed under the memory's subject.
"""


@_table
def _memory_sources() -> sa.Table:
    return sa.Table(
        "memory_sources",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("memory_id", sa.Uuid, primary_key=True),
        sa.Column("episode_id", sa.Uuid, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("episode_revision", sa.Integer, nullable=False),
        sa.Column("added_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "memory_id"], ["memories.tenant_id", "memories.id"], ondelete="CASCADE"
        ),
        sa.Index("ix_memory_sources_episode", "tenant_id", "episode_id"),
    )


supersessions: sa.Table
"""The audit record of one decision: rule, claim key, score, threshold, both sides."""


@_table
def _supersessions() -> sa.Table:
    return sa.Table(
        "supersessions",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("rule", identifier(32), nullable=False),
        sa.Column("claim_key", identifier(LABEL_LENGTH)),
        sa.Column("score", sa.Float),
        sa.Column("threshold", sa.Float),
        sa.Column("winner_memory_id", sa.Uuid),
        sa.Column("winner_memory_key", identifier(64)),
        sa.Column("loser_memory_id", sa.Uuid),
        sa.Column("loser_memory_key", identifier(64), nullable=False),
        # At most RECORDED_EPISODES_PER_SIDE ids per side; the counts say how many the
        # memories had when the decision was made (memory_sources keeps them all).
        sa.Column("winner_episode_ids", JSONDocument, nullable=False),
        sa.Column("loser_episode_ids", JSONDocument, nullable=False),
        sa.Column("winner_episode_count", sa.Integer, server_default=sa.text("0"), nullable=False),
        sa.Column("loser_episode_count", sa.Integer, server_default=sa.text("0"), nullable=False),
        sa.Column("job_id", sa.String(64)),
        sa.Column("decided_at", UTCDateTime, nullable=False),
        sa.Index("ix_supersessions_subject", "tenant_id", "subject_id", "decided_at"),
        # Compile follows the records of a memory that no longer stands as it did to
        # the memories it beat and was beaten by, to decide their contests again.
        sa.Index("ix_supersessions_winner", "tenant_id", "winner_memory_id"),
        sa.Index("ix_supersessions_loser", "tenant_id", "loser_memory_id"),
    )


conflicts: sa.Table
"""Two active memories that contradict each other under the ``flag`` policy. Every
change of status (opened, resolved, opened again) is appended to ``conflict_history``
in the same transaction (``record_conflict_history``): that is what ``as_of`` reads.

The id is derived from the two memory keys, so detecting the same conflict again
hits the primary key instead of opening a second record.
"""


@_table
def _conflicts() -> sa.Table:
    return sa.Table(
        "conflicts",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("kind", identifier(32), nullable=False),
        sa.Column("claim_key", identifier(LABEL_LENGTH)),
        sa.Column("rule", identifier(32), nullable=False),
        sa.Column("score", sa.Float),
        sa.Column("threshold", sa.Float),
        sa.Column("first_memory_id", sa.Uuid, nullable=False),
        sa.Column("second_memory_id", sa.Uuid, nullable=False),
        sa.Column("first_memory_key", identifier(64), nullable=False),
        sa.Column("second_memory_key", identifier(64), nullable=False),
        sa.Column("first_content", sa.Text, nullable=False),
        sa.Column("second_content", sa.Text, nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("job_id", sa.String(64)),
        sa.Column("detected_at", UTCDateTime, nullable=False),
        sa.Column("resolved_at", UTCDateTime),
        sa.Column("chosen_memory_id", sa.Uuid),
        sa.Index("ix_conflicts_subject_status", "tenant_id", "subject_id", "status"),
        sa.CheckConstraint("status IN ('open', 'resolved')", name="status_known"),
    )


receipts: sa.Table
"""One context bundle served with ``emit_receipt``: the request (task, budget, layout,
the ``as_of`` and ``valid_at`` asked for), the bundle's own ``as_of`` (the transaction
time it shows), what went in (memory and episode ids, with scores) and
``context_hash``, the SHA-256 of the exact bytes served. Written once, never updated: a
replay writes a receipt of its own (``as_of_replay``, ``parent_receipt_id`` the
original). The bytes themselves are not kept: an exact replay builds the bundle again
and compares hashes.
"""


@_table
def _receipts() -> sa.Table:
    return sa.Table(
        "receipts",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("mode", identifier(16), nullable=False),
        sa.Column("parent_receipt_id", sa.String(LABEL_LENGTH)),
        sa.Column("query_id", sa.String(LABEL_LENGTH)),
        sa.Column("task_id", sa.String(LABEL_LENGTH)),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("max_tokens", sa.Integer, nullable=False),
        sa.Column("layout", identifier(16), nullable=False),
        sa.Column("requested_as_of", UTCDateTime),
        sa.Column("as_of", UTCDateTime, nullable=False),
        sa.Column("context_hash", sa.String(64), nullable=False),
        sa.Column("token_estimate", sa.Integer, nullable=False),
        sa.Column("selected_entries", JSONDocument, nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("requested_valid_at", UTCDateTime),
        # Listing reads one subject's receipts newest first, a page at a time.
        sa.Index("ix_receipts_subject_created", "tenant_id", "subject_id", "created_at", "id"),
        sa.CheckConstraint("mode IN ('retrieval', 'as_of_replay')", name="mode_known"),
    )


RESOLUTION_STATUSES = ("open", "resolved", "unresolved")

resolutions: sa.Table
"""How a support session of a subject ended, or that it has not: Statewave's
resolution record. ``POST /v1/resolutions`` upserts it on (subject, session) in one
statement; ``resolved_at`` is set when the status becomes ``resolved`` and kept while
it stays so. Deleted with the subject.
"""


@_table
def _resolutions() -> sa.Table:
    return sa.Table(
        "resolutions",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("session_id", identifier(LABEL_LENGTH), nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("resolution_summary", sa.Text),
        sa.Column("metadata", JSONDocument, nullable=False),
        sa.Column("resolved_at", UTCDateTime),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        # Recorded from a source: the connector (forgetting it removes the record) and the
        # ticket's update time there (an older read never overwrites a newer one). NULL:
        # written through the API.
        sa.Column("source_connector", identifier(CONNECTOR_NAME_LENGTH)),
        sa.Column("source_updated_at", UTCDateTime),
        # The upsert's conflict target: one record per support session of a subject.
        sa.UniqueConstraint("tenant_id", "subject_id", "session_id"),
        # Listing reads one subject's records, most recently updated first.
        sa.Index("ix_resolutions_subject_updated", "tenant_id", "subject_id", "updated_at", "id"),
        sa.CheckConstraint("status IN ('open', 'resolved', 'unresolved')", name="status_known"),
    )


memory_labels: sa.Table
"""The sensitivity labels set on a memory itself: ``labels`` by
``PATCH /v1/memories/{id}/labels`` (normalised, sorted, at most 32), ``rule_labels`` by
the compile rules when the memory was created; no row when it has neither. What the
policy reads is both plus the labels of the memory's source episodes
(``episode_labels``)."""


@_table
def _memory_labels() -> sa.Table:
    return sa.Table(
        "memory_labels",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("memory_id", sa.Uuid, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("labels", JSONDocument, nullable=False),
        sa.Column("rule_labels", JSONDocument, nullable=False),
        sa.Column("updated_at", UTCDateTime, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "memory_id"], ["memories.tenant_id", "memories.id"], ondelete="CASCADE"
        ),
        # A read decides for one subject at a time: its labelled memories in one lookup.
        sa.Index("ix_memory_labels_subject", "tenant_id", "subject_id"),
    )


episode_labels: sa.Table
"""The sensitivity labels a connector's rules gave an episode, keyed by the episode
(not its revision): an edit of the record is a new revision of the same episode and
keeps them, and every ingest of a labelled draft writes them again (the subject too,
when the record moved)."""


@_table
def _episode_labels() -> sa.Table:
    return sa.Table(
        "episode_labels",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("episode_id", sa.Uuid, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("labels", JSONDocument, nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id", "episode_id"], ["episodes.tenant_id", "episodes.id"], ondelete="CASCADE"
        ),
        sa.Index("ix_episode_labels_subject", "tenant_id", "subject_id"),
    )


conflict_history: sa.Table
"""Transaction time of conflicts, as ``memory_history`` is of memories: a conflict's
changeable fields (opened, resolved, opened again) from ``recorded_at`` on, one row per
change, written with it; ``as_of`` reads the latest row recorded by then.
"""


@_table
def _conflict_history() -> sa.Table:
    return sa.Table(
        "conflict_history",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("conflict_id", sa.Uuid, primary_key=True),
        sa.Column("recorded_at", UTCDateTime, primary_key=True),
        sa.Column("subject_id", identifier(SUBJECT_ID_LENGTH), nullable=False),
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
            ondelete="CASCADE",
        ),
        # ``as_of`` numbers a subject's rows per conflict, newest first, up to a moment.
        sa.Index(
            "ix_conflict_history_subject", "tenant_id", "subject_id", "conflict_id", "recorded_at"
        ),
    )


llm_extractions: sa.Table
"""A recorded model extraction, replayed instead of asking the model again.

Keyed per tenant by ``extraction_key`` (prompt version, model, episode content
hash); the first record of a key wins.
"""


@_table
def _llm_extractions() -> sa.Table:
    return sa.Table(
        "llm_extractions",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("extraction_key", identifier(IDEMPOTENCY_KEY_LENGTH), primary_key=True),
        sa.Column("extraction", sa.Text, nullable=False),
        sa.Column("recorded_at", UTCDateTime, nullable=False),
    )


sync_streams: sa.Table
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


@_table
def _sync_streams() -> sa.Table:
    return sa.Table(
        "sync_streams",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("connector", identifier(CONNECTOR_NAME_LENGTH), primary_key=True),
        sa.Column("stream", identifier(STREAM_NAME_LENGTH), primary_key=True),
        sa.Column("position", UTCDateTime),
        sa.Column("cursor", JSONDocument),
        sa.Column("checkpoint_run_id", sa.Uuid),
        sa.Column("checkpointed_at", UTCDateTime),
        sa.Column("last_run_id", sa.Uuid),
        sa.Column("last_run_at", UTCDateTime),
        sa.Column("last_status", identifier(16)),
        sa.Column("complete_through", UTCDateTime),
        sa.Column("completed_run_id", sa.Uuid),
        sa.CheckConstraint(
            "last_status IN ('succeeded', 'partial', 'failed')", name="last_status_known"
        ),
    )


sync_runs: sa.Table
"""One sync or backfill run of one connector instance, and what it did.

At most one run per (tenant, connector) is ``running``: a partial unique index
says so, so a second run cannot start however it is launched. A run whose
process died is recognised by its stale heartbeat (or its dead pid on this host)
and marked ``failed`` before another may start.
"""


@_table
def _sync_runs() -> sa.Table:
    return sa.Table(
        "sync_runs",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("connector", identifier(CONNECTOR_NAME_LENGTH), nullable=False),
        sa.Column("connector_type", identifier(LABEL_LENGTH), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("window_start", UTCDateTime),
        sa.Column("window_end", UTCDateTime, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("fetched", sa.Integer, default=0, nullable=False),
        sa.Column("created", sa.Integer, default=0, nullable=False),
        sa.Column("duplicates", sa.Integer, default=0, nullable=False),
        sa.Column("revised", sa.Integer, default=0, nullable=False),
        sa.Column("tombstoned", sa.Integer, server_default=sa.text("0"), nullable=False),
        sa.Column("skipped", sa.Integer, default=0, nullable=False),
        sa.Column("errors", sa.Integer, default=0, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("skipped_reasons", JSONDocument, nullable=False),
        sa.Column("backfill_id", sa.Uuid),
        sa.Column("host", sa.String(LABEL_LENGTH), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_at", UTCDateTime, nullable=False),
        sa.Column("heartbeat_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime),
        sa.Column("duration_seconds", sa.Float),
        # Set when the error is one a person must fix (credentials, configuration, a
        # resource that does not exist): retrying will not help.
        sa.Column("needs_attention", sa.Boolean, default=False, nullable=False),
        # Set when the run ended on a rate limit whose reset the source announced.
        sa.Column("retry_at", UTCDateTime),
        partial_index(
            "uq_sync_runs_one_running",
            "tenant_id",
            "connector",
            unique=True,
            where="status = 'running'",
        ),
        sa.Index("ix_sync_runs_connector_started", "tenant_id", "connector", "started_at"),
        sa.CheckConstraint(
            "kind IN ('incremental', 'full_refresh', 'backfill')", name="kind_known"
        ),
        sa.CheckConstraint(
            "status IN ('running', 'succeeded', 'partial', 'failed')", name="status_known"
        ),
    )


webhook_deliveries: sa.Table
"""What the webhook deliveries to one connector instance became, counted by outcome
(``stored``, ``duplicate``, ``revised``, ``ignored``, a handshake too, and
``refused``), and when the last of each kind arrived. One row per (tenant, connector),
written by one upsert per delivery; ``last_accepted_at`` is the last delivery that
carried records the connector reads (stored, revised or duplicate): the push gap is
measured from it. Deleted when the connector is forgotten.
"""


@_table
def _webhook_deliveries() -> sa.Table:
    return sa.Table(
        "webhook_deliveries",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("connector", identifier(CONNECTOR_NAME_LENGTH), primary_key=True),
        sa.Column("stored", sa.Integer, server_default=sa.text("0"), nullable=False),
        sa.Column("duplicate", sa.Integer, server_default=sa.text("0"), nullable=False),
        sa.Column("revised", sa.Integer, server_default=sa.text("0"), nullable=False),
        sa.Column("ignored", sa.Integer, server_default=sa.text("0"), nullable=False),
        sa.Column("refused", sa.Integer, server_default=sa.text("0"), nullable=False),
        sa.Column("last_delivery_at", UTCDateTime, nullable=False),
        sa.Column("last_accepted_at", UTCDateTime),
        sa.Column("last_stored_at", UTCDateTime),
        sa.Column("last_refused_at", UTCDateTime),
        # The refusal's kind and status only: the receiver's message can quote the body.
        sa.Column("last_refusal", identifier(32)),
        sa.Column("last_refusal_status", sa.Integer),
    )


backfills: sa.Table
"""A manual re-read of ``[since, until]`` in slices of ``slice_seconds``.

At most one backfill per (tenant, connector) is ``open`` (partial unique index);
re-running the same command resumes it from its first slice not yet done.
"""


@_table
def _backfills() -> sa.Table:
    return sa.Table(
        "backfills",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("connector", identifier(CONNECTOR_NAME_LENGTH), nullable=False),
        sa.Column("since", UTCDateTime, nullable=False),
        sa.Column("until", UTCDateTime, nullable=False),
        sa.Column("slice_seconds", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime, nullable=False),
        sa.Column("finished_at", UTCDateTime),
        partial_index(
            "uq_backfills_one_open",
            "tenant_id",
            "connector",
            unique=True,
            where="status = 'open'",
        ),
        sa.CheckConstraint("status IN ('open', 'finished', 'abandoned')", name="status_known"),
        sa.CheckConstraint("slice_seconds > 0", name="slice_positive"),
        sa.CheckConstraint("since < until", name="range_not_empty"),
    )


backfill_slices: sa.Table
"""One slice ``[slice_start, slice_end]`` of a backfill; ``done_at`` is set only
after every episode read in it was committed."""


@_table
def _backfill_slices() -> sa.Table:
    return sa.Table(
        "backfill_slices",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("backfill_id", sa.Uuid, primary_key=True),
        sa.Column("slice_start", UTCDateTime, primary_key=True),
        sa.Column("slice_end", UTCDateTime, nullable=False),
        sa.Column("done_at", UTCDateTime),
        sa.Column("run_id", sa.Uuid),
        # How far the slice got before it was done (SliceProgress.to_json); null: not begun.
        sa.Column("progress", JSONDocument),
        sa.ForeignKeyConstraint(
            ["tenant_id", "backfill_id"],
            ["backfills.tenant_id", "backfills.id"],
            ondelete="CASCADE",
        ),
        sa.CheckConstraint("slice_start < slice_end", name="slice_not_empty"),
    )


JOB_STATUSES = ("pending", "running", "completed", "failed")
JOB_OUTCOMES = ("succeeded", "partial", "failed", "needs_attention")


jobs: sa.Table
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


@_table
def _jobs() -> sa.Table:
    return sa.Table(
        "jobs",
        _metadata,
        sa.Column("tenant_id", identifier(TENANT_ID_LENGTH), primary_key=True),
        sa.Column("id", sa.Uuid, primary_key=True),
        sa.Column("kind", identifier(32), nullable=False),
        sa.Column("target", identifier(SUBJECT_ID_LENGTH), nullable=False),
        sa.Column("status", identifier(16), nullable=False),
        sa.Column("trigger", identifier(64), nullable=False),
        sa.Column("dedup_key", identifier(LABEL_LENGTH)),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("lease_owner", sa.String(LABEL_LENGTH)),
        sa.Column("lease_expires_at", UTCDateTime),
        sa.Column("heartbeat_at", UTCDateTime),
        sa.Column("run_after", UTCDateTime, nullable=False),
        sa.Column("queued_at", UTCDateTime, nullable=False),
        sa.Column("started_at", UTCDateTime),
        sa.Column("finished_at", UTCDateTime),
        sa.Column("result", JSONDocument),
        sa.Column("error", sa.Text),
        sa.Column("outcome", identifier(16)),
        partial_index(
            "uq_jobs_pending_target",
            "tenant_id",
            "kind",
            "target",
            unique=True,
            where="status = 'pending'",
        ),
        partial_index(
            "uq_jobs_dedup_key",
            "tenant_id",
            "kind",
            "target",
            "dedup_key",
            unique=True,
            where="dedup_key IS NOT NULL",
        ),
        # The claim reads the queue across tenants in run_after order; only waiting
        # jobs are in this index, so it stays as small as the backlog.
        partial_index(
            "ix_jobs_ready",
            "run_after",
            where="status = 'pending'",
        ),
        # Reclaiming looks for running jobs whose lease has expired.
        partial_index(
            "ix_jobs_leases",
            "lease_expires_at",
            where="status = 'running'",
        ),
        sa.Index("ix_jobs_listing", "tenant_id", "queued_at"),
        # The queue depth every metrics scrape counts: every job but the completed
        # ones, which are history (kept for audit and dedup) and only ever grow.
        partial_index(
            "ix_jobs_depth",
            "kind",
            "status",
            where="status <> 'completed'",
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'running', 'completed', 'failed')", name="status_known"
        ),
        sa.CheckConstraint("attempts >= 0 AND max_attempts >= 1", name="attempts_bounded"),
    )
