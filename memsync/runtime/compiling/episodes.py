"""The compile stage's statements on episodes: what is uncompiled, and marking it done.

Every query here that looks for uncompiled episodes states
:data:`~memsync.runtime.storage.tables.UNCOMPILED` as it is, so the planners use the
small partial index of uncompiled episodes instead of scanning a subject's timeline.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.compile.types import EpisodeView
from memsync.runtime.storage.tables import (
    UNCOMPILED,
    episodes,
    in_slices,
    one_of,
    pipelined,
    update_each_if,
)

__all__ = [
    "Pending",
    "Stamp",
    "Uncompiled",
    "compiled_episodes",
    "compiled_stamps",
    "decided_through",
    "mark_compiled",
    "marking_compiled",
    "pending_episode_ids",
    "subjects_due",
    "subjects_with_uncompiled",
    "uncompiled_episodes",
    "uncompiled_stamps",
    "uncompiled_targets",
]


class Pending(NamedTuple):
    """An uncompiled episode of a subject; ``seen`` when an earlier revision of it was
    compiled (it was revised, moved here, deleted or brought back since)."""

    id: uuid.UUID
    seen: bool
    occurred_at: datetime


class Stamp(NamedTuple):
    """What tells one read of an uncompiled episode from another. Every change to an
    episode's content, subject or existence is a new revision, so equal stamps mean
    equal :class:`Uncompiled` reads."""

    id: uuid.UUID
    revision: int
    compiled_revision: int
    deleted: bool


class Uncompiled(NamedTuple):
    """An uncompiled episode at its current revision, the revision compiled before (0:
    none), and whether the current revision is a tombstone."""

    view: EpisodeView
    compiled_revision: int
    deleted: bool

    @property
    def stamp(self) -> Stamp:
        return Stamp(self.view.id, self.view.revision, self.compiled_revision, self.deleted)


def pending_episode_ids(connection: Connection, tenant_id: str, subject_id: str) -> list[Pending]:
    """The subject's uncompiled episodes, in time order."""
    query = sa.select(episodes.c.id, episodes.c.occurred_at, episodes.c.compiled_revision).where(
        episodes.c.tenant_id == tenant_id, episodes.c.subject_id == subject_id, UNCOMPILED
    )
    # No ORDER BY: sorting in SQL makes the planners prefer the timeline index (which
    # scans every episode of the subject) over the partial index of the uncompiled
    # ones, and the no-op recompile must not grow with the subject.
    rows = sorted(connection.execute(query).all(), key=lambda row: (row.occurred_at, row.id))
    return [Pending(row.id, row.compiled_revision > 0, row.occurred_at) for row in rows]


def decided_through(connection: Connection, tenant_id: str, subject_id: str) -> datetime | None:
    """The latest moment of the subject's episodes that a compile has consumed (at any
    revision): what the subject's stored decisions already took into account. None if
    no episode of the subject was ever compiled."""
    latest: datetime | None = connection.execute(
        sa.select(sa.func.max(episodes.c.occurred_at)).where(
            episodes.c.tenant_id == tenant_id,
            episodes.c.subject_id == subject_id,
            episodes.c.compiled_revision > 0,
        )
    ).scalar_one_or_none()
    return latest


_COMPILED = sa.and_(
    episodes.c.compiled_revision == episodes.c.revision, episodes.c.deleted_at.is_(None)
)
"""Live episodes compiled at their current revision: the evidence a subject's memories
rest on."""


_VIEW_COLUMNS = (
    episodes.c.id,
    episodes.c.subject_id,
    episodes.c.source,
    episodes.c.type,
    episodes.c.payload,
    episodes.c.occurred_at,
    episodes.c.revision,
    episodes.c.content_hash,
)
"""What the compiler reads of an episode (:func:`_view`)."""


_VIEW_WIDTH = len(_VIEW_COLUMNS)
_IN_TIME_ORDER = operator.itemgetter(5, 0)
"""The sort key of a row that starts with :data:`_VIEW_COLUMNS`: (occurred_at, id)."""


def _view(row: Any) -> EpisodeView:
    """The episode of a row that starts with :data:`_VIEW_COLUMNS` (maybe more after).
    By position: a row's attribute costs SQLAlchemy twenty times as much (see
    :func:`~memsync.runtime.storage.tables.picked`), and a compile reads thousands."""
    return EpisodeView(*row[:_VIEW_WIDTH])


def compiled_episodes(connection: Connection, tenant_id: str, subject_id: str) -> list[EpisodeView]:
    """Every live episode of the subject compiled at its current revision, in time
    order (then id): what a re-decision of the subject derives its evidence from."""
    rows = connection.execute(
        sa.select(*_VIEW_COLUMNS).where(
            episodes.c.tenant_id == tenant_id, episodes.c.subject_id == subject_id, _COMPILED
        )
    ).all()
    return [_view(row) for row in sorted(rows, key=_IN_TIME_ORDER)]


def compiled_stamps(
    connection: Connection, tenant_id: str, subject_id: str
) -> set[tuple[uuid.UUID, int]]:
    """The ids and revisions of what :func:`compiled_episodes` would return, without
    reading a payload: equal stamps mean an equal read."""
    rows = connection.execute(
        sa.select(episodes.c.id, episodes.c.revision).where(
            episodes.c.tenant_id == tenant_id, episodes.c.subject_id == subject_id, _COMPILED
        )
    ).all()
    return {(row.id, row.revision) for row in rows}


def uncompiled_episodes(
    connection: Connection, tenant_id: str, subject_id: str, episode_ids: Sequence[uuid.UUID]
) -> list[Uncompiled]:
    """Those of ``episode_ids`` still uncompiled and still filed under ``subject_id``,
    in time order."""
    rows = _uncompiled_rows(
        connection,
        sa.select(
            *_VIEW_COLUMNS,
            episodes.c.compiled_revision,
            episodes.c.deleted_at,
        ),
        tenant_id,
        subject_id,
        episode_ids,
    )
    # The two columns after the view's, by position as the view's are.
    return [
        Uncompiled(_view(row), row[_VIEW_WIDTH], row[_VIEW_WIDTH + 1] is not None) for row in rows
    ]


def uncompiled_stamps(
    connection: Connection, tenant_id: str, subject_id: str, episode_ids: Sequence[uuid.UUID]
) -> set[Stamp]:
    """The stamps of what :func:`uncompiled_episodes` would return, without reading (or
    decoding) a payload or a time."""
    deleted = episodes.c.deleted_at.is_not(None).label("deleted")
    columns = sa.select(episodes.c.id, episodes.c.revision, episodes.c.compiled_revision, deleted)
    return {
        Stamp(*row)
        for some_ids in in_slices(episode_ids)
        for row in connection.execute(
            _uncompiled_of(columns, connection, tenant_id, subject_id, some_ids)
        ).all()
    }


def _uncompiled_rows(
    connection: Connection,
    columns: sa.Select[Any],
    tenant_id: str,
    subject_id: str,
    episode_ids: Sequence[uuid.UUID],
) -> list[sa.Row[Any]]:
    rows: list[sa.Row[Any]] = []
    # A chunk can outgrow what one statement may bind: read it a slice at a time, each
    # slice's rows in one fetch (iterating a result fetches them one call at a time).
    for some_ids in in_slices(episode_ids):
        rows.extend(
            connection.execute(
                _uncompiled_of(columns, connection, tenant_id, subject_id, some_ids)
            ).all()
        )
    rows.sort(key=_IN_TIME_ORDER)
    return rows


def _uncompiled_of(
    columns: sa.Select[Any],
    connection: Connection,
    tenant_id: str,
    subject_id: str,
    episode_ids: Sequence[uuid.UUID],
) -> sa.Select[Any]:
    return columns.where(
        episodes.c.tenant_id == tenant_id,
        one_of(episodes.c.id, episode_ids, postgresql=connection.dialect.name == "postgresql"),
        episodes.c.subject_id == subject_id,
        UNCOMPILED,
    )


def mark_compiled(connection: Connection, tenant_id: str, views: Sequence[EpisodeView]) -> None:
    """Mark each episode compiled at the revision ``views`` hold.

    Marks the revision that was compiled, not the current one: an episode revised by a
    concurrent ingest since it was read stays behind and is compiled next time.
    """
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql(_PG_MARK_COMPILED, _pg_marks(tenant_id, views))
        return
    connection.execute(
        update_each_if(episodes, tenant_id, "revision").values(
            compiled_revision=sa.bindparam("b_guard")
        ),
        [{"b_id": view.id, "b_guard": view.revision} for view in views],
    )


@contextmanager
def marking_compiled(
    connection: Connection, tenant_id: str, views: Sequence[EpisodeView]
) -> Iterator[None]:
    """:func:`mark_compiled`, done while the caller's block runs.

    On PostgreSQL the statement goes out in pipeline mode and the server runs it while
    the block works on: marking a chunk rewrites each episode's row into its indexes,
    which takes about as long as the resolver's work on the chunk. The block must not
    use ``connection``. When the block ends the statement has finished, and its error,
    if it failed, is raised then, as SQLAlchemy raises a driver's error; an error of the
    block's own is raised after the statement finished. On SQLite the episodes are
    marked before the block runs.
    """
    if connection.dialect.name != "postgresql":
        mark_compiled(connection, tenant_id, views)
        yield
        return
    with pipelined(connection) as send:
        send(_PG_MARK_COMPILED, _pg_marks(tenant_id, views))
        yield


def _pg_marks(tenant_id: str, views: Sequence[EpisodeView]) -> dict[str, str]:
    # One statement for the chunk, its (id, revision) pairs as one JSON document: an
    # executemany binds and sends every pair on its own.
    # orjson writes an id as its text, the form the statement casts back.
    return {
        "tenant_id": tenant_id,
        "marks": orjson.dumps([[view.id, view.revision] for view in views]).decode(),
    }


_PG_MARK_COMPILED = (
    "UPDATE episodes AS e SET compiled_revision = (mark->>1)::int "
    "FROM jsonb_array_elements(CAST(%(marks)s AS jsonb)) AS mark "
    "WHERE e.tenant_id = %(tenant_id)s AND e.id = (mark->>0)::uuid "
    "AND e.revision = (mark->>1)::int"
)


def subjects_with_uncompiled(connection: Connection, tenant_id: str) -> list[str]:
    """The tenant's subjects that have episodes not yet compiled at their revision."""
    query = (
        sa.select(episodes.c.subject_id)
        .where(episodes.c.tenant_id == tenant_id, UNCOMPILED)
        .distinct()
        .order_by(episodes.c.subject_id)
    )
    return list(connection.execute(query).scalars())


def subjects_due(
    connection: Connection, tenant_id: str, subject_ids: Collection[str], at_least: int
) -> list[str]:
    """Of ``subject_ids``, those with at least ``at_least`` uncompiled episodes."""
    query = (
        sa.select(episodes.c.subject_id)
        .where(
            episodes.c.tenant_id == tenant_id,
            episodes.c.subject_id.in_(sorted(subject_ids)),
            UNCOMPILED,
        )
        .group_by(episodes.c.subject_id)
        .having(sa.func.count() >= at_least)
    )
    return list(connection.execute(query).scalars())


def uncompiled_targets(connection: Connection) -> list[tuple[str, str]]:
    """Every (tenant, subject), across tenants, with uncompiled episodes."""
    query = sa.select(episodes.c.tenant_id, episodes.c.subject_id).where(UNCOMPILED).distinct()
    return [(row.tenant_id, row.subject_id) for row in connection.execute(query)]
