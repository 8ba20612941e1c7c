"""Resolution records: how each support session of a subject stands, and their SQL.

One record per (tenant, subject, session), which the database enforces (a unique
constraint): ``POST /v1/resolutions`` is one ``INSERT … ON CONFLICT DO UPDATE``, so
two writers of the same session at once leave one record, the later write's. A ticket
connector's sync records the resolutions its tickets show
(:func:`record_source_resolutions`), a batch's in one statement.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.clock import Clock
from memsync.compile.support import Resolution, ResolutionStatus
from memsync.connectors.sessions import SessionResolution
from memsync.ids import random_uuids
from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store

__all__ = [
    "Resolutions",
    "SourceResolution",
    "delete_connector_resolutions",
    "delete_subject_resolutions",
    "record_source_resolutions",
]

_resolutions = tables.resolutions


class Resolutions:
    """Tenant-scoped resolution records: upsert, list, and the subject's whole set."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def record(
        self,
        tenant_id: str,
        subject_id: str,
        session_id: str,
        status: ResolutionStatus,
        *,
        resolution_summary: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Resolution:
        """Create the session's record, or update it: the one record of (subject,
        session) keeps its ``id`` and ``created_at``.

        Repeats and conflicts: a repeat changes only ``updated_at``; a summary or
        metadata left out (``None``) keeps what is stored; ``resolved_at`` is set when
        the status becomes ``resolved`` and kept while it stays so (cleared when it
        leaves). Concurrent writers of one session leave one record, the last write's.
        """
        now = self._clock.now()
        resolved_now = now if status is ResolutionStatus.RESOLVED else None
        insert = tables.upsert(_resolutions, postgresql=self._store.is_postgresql).values(
            tenant_id=tenant_id,
            id=uuid.uuid4(),
            subject_id=subject_id,
            session_id=session_id,
            status=status.value,
            resolution_summary=resolution_summary,
            metadata=dict(metadata or {}),
            resolved_at=resolved_now,
            created_at=now,
            updated_at=now,
        )
        stored = _resolutions.c
        changes: dict[str, Any] = {
            "status": insert.excluded.status,
            "updated_at": insert.excluded.updated_at,
            "resolved_at": _kept_resolved_at(insert),
        }
        if resolution_summary is not None:
            changes["resolution_summary"] = insert.excluded.resolution_summary
        if metadata is not None:
            changes["metadata"] = insert.excluded.metadata
        statement = insert.on_conflict_do_update(
            index_elements=[stored.tenant_id, stored.subject_id, stored.session_id],
            set_=changes,
        ).returning(*_resolutions.c)
        with self._store.write_one_statement() as connection:
            row = connection.execute(statement).one()
        return _resolution(row)

    def list(
        self,
        tenant_id: str,
        subject_id: str,
        *,
        status: ResolutionStatus | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Resolution]:
        """The subject's records (in ``status``, if given), most recently updated first."""
        query = (
            sa.select(_resolutions)
            .where(_resolutions.c.tenant_id == tenant_id, _resolutions.c.subject_id == subject_id)
            .order_by(_resolutions.c.updated_at.desc(), _resolutions.c.id)
            .offset(offset)
        )
        if status is not None:
            query = query.where(_resolutions.c.status == status.value)
        if limit is not None:
            query = query.limit(limit)
        with self._store.read() as connection:
            return [_resolution(row) for row in connection.execute(query).all()]


def delete_subject_resolutions(connection: Connection, tenant_id: str, subject_id: str) -> int:
    """Delete the subject's records (with the subject: nothing else deletes them)."""
    result = connection.execute(
        _resolutions.delete().where(
            _resolutions.c.tenant_id == tenant_id, _resolutions.c.subject_id == subject_id
        )
    )
    return result.rowcount


class SourceResolution(NamedTuple):
    """A resolution a source showed for one session of a subject."""

    subject_id: str
    session_id: str
    resolution: SessionResolution


def record_source_resolutions(
    connection: Connection,
    tenant_id: str,
    read: Sequence[SourceResolution],
    now: datetime,
    *,
    connector: str,
) -> None:
    """Record what ``connector``'s tickets show of their sessions, in ``connection``'s
    transaction (a sync batch's, so they commit with its episodes): one upsert statement
    for every session of the batch.

    Repeats and conflicts: a session read twice keeps its newest read; a stored record
    the source dated later (``source_updated_at``) is left as it is, so an older
    re-read never overwrites a newer status, and one read at the same time is not
    written again; one the API wrote (no source time) is overwritten. Status, summary
    and metadata (``source_status``, ``connector``) are the read's; ``resolved_at`` is
    the ticket's update time when it became resolved, kept while it stays so, cleared
    when it is reopened.
    """
    newest: dict[tuple[str, str], SessionResolution] = {}
    for subject_id, session_id, resolution in read:
        kept = newest.get((subject_id, session_id))
        # One row per session: an upsert may not touch a row twice.
        if kept is None or resolution.as_of >= kept.as_of:
            newest[(subject_id, session_id)] = resolution
    rows = [
        {
            "tenant_id": tenant_id,
            "id": row_id,
            "subject_id": subject_id,
            "session_id": session_id,
            "status": resolution.status.value,
            "resolution_summary": resolution.summary,
            "metadata": {"source_status": resolution.source_status, "connector": connector},
            "resolved_at": resolution.as_of
            if resolution.status is ResolutionStatus.RESOLVED
            else None,
            "created_at": now,
            "updated_at": now,
            "source_connector": connector,
            "source_updated_at": resolution.as_of,
        }
        for row_id, ((subject_id, session_id), resolution) in zip(
            random_uuids(len(newest)), newest.items(), strict=True
        )
    ]
    if not rows:
        return
    insert = tables.upsert(_resolutions, postgresql=connection.dialect.name == "postgresql")
    stored, incoming = _resolutions.c, insert.excluded
    statement = insert.on_conflict_do_update(
        index_elements=[stored.tenant_id, stored.subject_id, stored.session_id],
        set_={
            "status": incoming.status,
            "resolution_summary": incoming.resolution_summary,
            "metadata": incoming.metadata,
            "resolved_at": _kept_resolved_at(insert),
            "updated_at": incoming.updated_at,
            "source_connector": incoming.source_connector,
            "source_updated_at": incoming.source_updated_at,
        },
        where=sa.or_(
            stored.source_updated_at.is_(None),
            stored.source_updated_at < incoming.source_updated_at,
        ),
    )
    # One statement, compiled once, run over every row by the driver (SQLite's
    # executemany in C, psycopg's pipelined): a VALUES list of a thousand rows costs
    # SQLAlchemy more to compile and bind than the batch's whole ingest.
    connection.execute(statement, rows)


def delete_connector_resolutions(connection: Connection, tenant_id: str, connector: str) -> int:
    """Delete the records ``connector`` recorded last (with the connector's data, when
    it is forgotten); a repeat deletes nothing more."""
    result = connection.execute(
        _resolutions.delete().where(
            _resolutions.c.tenant_id == tenant_id, _resolutions.c.source_connector == connector
        )
    )
    return result.rowcount


def _kept_resolved_at(insert: Any) -> Any:
    """``resolved_at`` of an upsert: still resolved, the first resolution's time stays;
    no longer resolved, none."""
    return sa.case(
        (
            insert.excluded.status == ResolutionStatus.RESOLVED.value,
            sa.func.coalesce(_resolutions.c.resolved_at, insert.excluded.resolved_at),
        ),
        else_=sa.null(),
    )


def _resolution(row: sa.Row[Any]) -> Resolution:
    return Resolution(
        id=row.id,
        subject_id=row.subject_id,
        session_id=row.session_id,
        status=ResolutionStatus(row.status),
        resolution_summary=row.resolution_summary,
        resolved_at=row.resolved_at,
        metadata=row.metadata,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
