"""Ingest's statements on episodes: key lookups, inserts, revisions and deletion.

Each method is one statement, or a constant number of them, for a whole batch. The
wanted keys and the new rows travel as one JSON array that the database unpacks, so
a batch's cost does not grow with a bind parameter per value.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection

from memsync.clock import utc
from memsync.episode import (
    SOURCE_DELETED_AT,
    SOURCE_UPDATED_AT,
    EpisodeDraft,
    IngestStatus,
    KeyScope,
    Tombstone,
    canonical_json,
    classify,
)
from memsync.ids import random_uuids
from memsync.runtime.storage import tables

__all__ = [
    "EpisodeStatements",
    "IngestOutcome",
    "LiveEpisode",
    "SingleInsert",
    "StoredKey",
    "connector_episodes",
    "delete_episodes",
    "delete_subject_episodes",
    "key_of",
]

_episodes = tables.episodes
_revisions = tables.episode_revisions
# What an insert returns: the key and id of each new row, or (for a caller that answers
# with what was stored) every column of it.
_KEY_COLUMNS = (_episodes.c.idempotency_key, _episodes.c.id)
_STORED_COLUMNS = tuple(_episodes.c)


class IngestOutcome(NamedTuple):
    """What happened to one draft: the episode it maps to and at which revision."""

    episode_id: uuid.UUID
    status: IngestStatus
    revision: int
    stored: Mapping[Any, Any] | None = None
    """The episode's stored columns by name, when the call asked for them
    (``with_stored``): for a ``created`` outcome the row its insert was given on
    PostgreSQL (what was written, not read back) or returned on SQLite, else read back
    in the call's transaction. A caller that answers with what was stored needs no
    read after the write."""


class StoredKey(NamedTuple):
    """What a lookup finds for a key: the episode, its content hash and revision, the
    subject it is filed under now and whether it is a tombstone."""

    episode_id: uuid.UUID
    content_hash: str
    revision: int
    subject_id: str
    deleted: bool

    def outcome_for(self, draft: EpisodeDraft) -> IngestStatus:
        """What ingesting ``draft`` over this stored state is: a different hash,
        another subject (a move) or a deleted record (it is back) is a revision, else
        a duplicate."""
        return classify(
            self.content_hash,
            draft.content_hash,
            moved=self.subject_id != draft.subject_id,
            deleted=self.deleted,
        )


class LiveEpisode(NamedTuple):
    """A stored episode that is not a tombstone: what a tombstone turns into one.

    ``deleted_at`` is when the source deleted it, if the tombstone said; then
    ``provenance`` is the stored one, which the tombstoned revision keeps with that
    time added."""

    episode_id: uuid.UUID
    key: str
    revision: int
    subject_id: str
    deleted_at: datetime | None = None
    provenance: Mapping[str, Any] | None = None


class SingleInsert(NamedTuple):
    """One draft's insert on PostgreSQL, ready for the driver: the SQL of
    :meth:`EpisodeStatements.insert_keyed` (``INSERT … ON CONFLICT DO NOTHING RETURNING``
    the key and id) or :meth:`EpisodeStatements.insert_keyless` (no ``RETURNING``),
    compiled once from the same statement, with the same parameters, for a caller that
    runs it on the raw driver connection (:meth:`Store.run_one_statement_async`)."""

    sql: str
    parameters: dict[str, Any]
    tenant_id: str
    episode_id: uuid.UUID
    draft: EpisodeDraft
    now: datetime

    def outcome(self, rows: Sequence[Sequence[Any]], *, with_stored: bool) -> IngestOutcome | None:
        """What the statement did, from the rows it returned: ``created`` (with the row
        it was given as the stored columns when ``with_stored``, as ``insert_keyed``
        answers), or ``None`` for a keyed draft whose key was known (nothing written)."""
        if self.draft.idempotency_key is not None:
            if not rows:
                return None
            # The returned id (RETURNING idempotency_key, id) is the one given: the row is new.
            episode_id = rows[0][1]
        else:
            episode_id = self.episode_id
        stored = (
            _episode_row(self.tenant_id, episode_id, self.draft, self.now) if with_stored else None
        )
        return IngestOutcome(episode_id, IngestStatus.CREATED, 1, stored)


def key_of(draft: EpisodeDraft) -> str:
    """A keyed draft's idempotency key: one record per key within a tenant."""
    assert draft.idempotency_key is not None
    return draft.idempotency_key


class EpisodeStatements:
    """The statements, in the store's dialect. Every method runs in the caller's
    transaction and is scoped to one tenant."""

    def __init__(self, *, postgresql: bool) -> None:
        self._postgresql = postgresql

    def lookup(
        self, connection: Connection, tenant_id: str, keys: Sequence[str]
    ) -> dict[str, StoredKey]:
        """One statement: the stored hash, revision and subject of each existing key,
        whatever subject it is filed under.

        The wanted keys travel as one JSON array that the database unpacks, and the
        statement is shaped so that each key is one probe of the key index, never a
        scan of the tenant's episodes.
        """
        wanted = {"tenant_id": tenant_id, "wanted": json.dumps(keys, ensure_ascii=False)}
        if self._postgresql:
            # Raw driver rows: this runs for every key of every re-sync.
            rows = connection.exec_driver_sql(_PG_LOOKUP, wanted)
            return {row[0]: StoredKey(row[1], row[2], row[3], row[4], row[5]) for row in rows}
        return {
            row.idempotency_key: StoredKey(
                row.id, row.content_hash, row.revision, row.subject_id, row.deleted
            )
            for row in connection.execute(_SQLITE_LOOKUP, wanted)
        }

    def single_insert(self, tenant_id: str, draft: EpisodeDraft, now: datetime) -> SingleInsert:
        """The insert of one draft as :meth:`insert_keyed` (a keyed draft) or
        :meth:`insert_keyless` would run it on PostgreSQL: the same SQL, compiled once for
        psycopg, and the same parameters; nothing is executed here. PostgreSQL only."""
        assert self._postgresql, "a single insert on the raw driver is PostgreSQL's"
        episode_id = uuid.uuid4()
        return SingleInsert(
            _pg_insert_sql(keyed=draft.idempotency_key is not None),
            _pg_batch(tenant_id, [episode_id], [draft], now),
            tenant_id,
            episode_id,
            draft,
            now,
        )

    def stored(
        self, connection: Connection, tenant_id: str, ids: Sequence[uuid.UUID]
    ) -> dict[uuid.UUID, Mapping[Any, Any]]:
        """Every stored column of the episodes with these ids, by id (missing ids are
        simply absent)."""
        found: dict[uuid.UUID, Mapping[Any, Any]] = {}
        for chunk in tables.in_slices(list(set(ids))):
            query = sa.select(*_STORED_COLUMNS).where(
                _episodes.c.tenant_id == tenant_id,
                tables.one_of(_episodes.c.id, chunk, postgresql=self._postgresql),
            )
            found.update((row.id, row._mapping) for row in connection.execute(query))
        return found

    def insert_keyless(
        self,
        connection: Connection,
        tenant_id: str,
        drafts: Sequence[EpisodeDraft],
        now: datetime,
        *,
        with_stored: bool = False,
    ) -> list[tuple[uuid.UUID, Mapping[Any, Any] | None]]:
        """Insert keyless drafts (they cannot conflict); return their new ids in order,
        each with its stored columns when ``with_stored``."""
        ids = random_uuids(len(drafts))
        if self._postgresql:
            # Nothing to return: the ids are ours, and the stored row is the one given.
            connection.execute(_pg_insert(returning=None), _pg_batch(tenant_id, ids, drafts, now))
            return [
                (id_, _episode_row(tenant_id, id_, draft, now) if with_stored else None)
                for id_, draft in zip(ids, drafts, strict=True)
            ]
        rows = [
            _episode_row(tenant_id, id_, draft, now) for id_, draft in zip(ids, drafts, strict=True)
        ]
        insert = _episodes.insert()
        result = connection.execute(
            insert.returning(*_STORED_COLUMNS, sort_by_parameter_order=True)
            if with_stored
            else insert,
            rows,
        )
        if not with_stored:
            return [(episode_id, None) for episode_id in ids]
        stored = {row.id: row._mapping for row in result}
        return [(episode_id, stored[episode_id]) for episode_id in ids]

    def insert_keyed(
        self,
        connection: Connection,
        tenant_id: str,
        drafts: Sequence[EpisodeDraft],
        now: datetime,
        *,
        with_stored: bool = False,
    ) -> dict[str, Mapping[Any, Any]]:
        """Insert keyed drafts, skipping keys that exist (under any subject); return the
        ones inserted, by key: their ``id``, and every stored column when
        ``with_stored``."""
        # Concurrent writers insert in one global order (by key), so two batches that
        # share keys wait on each other instead of deadlocking.
        ordered = sorted(drafts, key=key_of)
        ids = random_uuids(len(ordered))
        if self._postgresql:
            result = connection.execute(
                _pg_insert(returning=_KEY_COLUMNS, on_conflict=True),
                _pg_batch(tenant_id, ids, ordered, now),
            )
            inserted: dict[str, Mapping[Any, Any]] = {
                row.idempotency_key: row._mapping for row in result
            }
            if not with_stored:
                return inserted
            # What was written, not read back: the row an insert stored is the one it
            # was given (the session's time zone is UTC, jsonb keeps every value).
            return {
                key: _episode_row(tenant_id, episode_id, draft, now)
                for episode_id, draft in zip(ids, ordered, strict=True)
                if (key := key_of(draft)) in inserted
            }
        statement = (
            sqlite.insert(_episodes)
            .on_conflict_do_nothing(
                index_elements=["tenant_id", "idempotency_key"],
                index_where=_episodes.c.idempotency_key.is_not(None),
            )
            .returning(*(_STORED_COLUMNS if with_stored else _KEY_COLUMNS))
        )
        rows = [
            _episode_row(tenant_id, id_, draft, now)
            for id_, draft in zip(ids, ordered, strict=True)
        ]
        return {row.idempotency_key: row._mapping for row in connection.execute(statement, rows)}

    def revise(
        self,
        connection: Connection,
        tenant_id: str,
        candidates: Sequence[tuple[EpisodeDraft, StoredKey]],
        now: datetime,
    ) -> dict[str, IngestOutcome]:
        """Move each episode to a new revision, keeping the current one in history with
        the subject it was filed under. A draft under another subject moves the episode
        there."""
        ids = [stored.episode_id for _, stored in candidates]
        locked = (
            sa.select(
                _episodes.c.id,
                _episodes.c.content_hash,
                _episodes.c.revision,
                _episodes.c.subject_id,
                _episodes.c.deleted_at.is_not(None).label("deleted"),
                _episodes.c.provenance,
            )
            .where(_episodes.c.tenant_id == tenant_id, _episodes.c.id.in_(ids))
            .order_by(_episodes.c.id)  # one lock order for every writer
        )
        if self._postgresql:
            # Another writer may be revising the same episode: re-read under the lock
            # (SQLite already holds the database write lock for this transaction).
            locked = locked.with_for_update()
        rows = connection.execute(locked).all()
        current = {
            row.id: StoredKey(row.id, row.content_hash, row.revision, row.subject_id, row.deleted)
            for row in rows
        }
        # Read only for the drafts that would revise: a re-read of unchanged records
        # (the common case) never gets here.
        stored_versions = {row.id: source_updated_at(row.provenance) for row in rows}
        deletions = {
            row.id: _provenance_time(row.provenance, SOURCE_DELETED_AT)
            for row in rows
            if row.deleted
        }

        outcomes: dict[str, IngestOutcome] = {}
        updates: list[dict[str, Any]] = []
        for draft, stored in candidates:
            now_stored = current[stored.episode_id]
            key = key_of(draft)
            incoming = source_updated_at(draft.provenance)
            if (
                now_stored.outcome_for(draft) is IngestStatus.DUPLICATE
                or _older(incoming, stored_versions[stored.episode_id])
                or _not_after(incoming, deletions.get(stored.episode_id))
            ):
                outcomes[key] = IngestOutcome(
                    now_stored.episode_id, IngestStatus.DUPLICATE, now_stored.revision
                )
                continue
            new_revision = now_stored.revision + 1
            outcomes[key] = IngestOutcome(now_stored.episode_id, IngestStatus.REVISED, new_revision)
            updates.append(
                {
                    "b_id": now_stored.episode_id,
                    "b_guard": now_stored.revision,
                    "revision": new_revision,
                    "subject_id": draft.subject_id,
                    **_content(draft),
                    "occurred_at": utc(draft.occurred_at) if draft.occurred_at else None,
                    "revised_at": now,
                }
            )
        if not updates:
            return outcomes

        _archive(connection, tenant_id, [update["b_id"] for update in updates], now)
        connection.execute(
            tables.update_each_if(_episodes, tenant_id, "revision").values(
                revision=sa.bindparam("revision"),
                subject_id=sa.bindparam("subject_id"),
                source=sa.bindparam("source"),
                type=sa.bindparam("type"),
                payload=sa.bindparam("payload"),
                metadata=sa.bindparam("metadata"),
                provenance=sa.bindparam("provenance"),
                session_id=sa.bindparam("session_id"),
                content_hash=sa.bindparam("content_hash"),
                # A live read of a deleted record is the record back.
                deleted_at=None,
                # A revision without its own occurred_at keeps the one already stored.
                occurred_at=sa.func.coalesce(
                    sa.bindparam("occurred_at", type_=_episodes.c.occurred_at.type),
                    _episodes.c.occurred_at,
                ),
                revised_at=sa.bindparam("revised_at"),
            ),
            updates,
        )
        return outcomes

    def live_covered(
        self, connection: Connection, tenant_id: str, tombstones: Sequence[Tombstone]
    ) -> list[LiveEpisode]:
        """The episodes the tombstones cover that are not tombstones yet, locked on
        PostgreSQL, in one lock order: a statement per slice of exact keys and one for
        the key ranges of ``with_children``.

        A dated tombstone (``deleted_at``) does not cover an episode whose stored
        version the source updated after that time (the record re-created); when
        several dated ones cover an episode, the latest deletion counts."""
        dated = _DeletionTimes(tombstones)
        keys = sorted({tombstone.key for tombstone in tombstones})
        ranges = sorted({t.children_range for t in tombstones if t.with_children})
        conditions: list[sa.ColumnElement[bool]] = [
            _episodes.c.idempotency_key.in_(some) for some in tables.in_slices(keys)
        ]
        if ranges:
            conditions.append(
                sa.or_(
                    *(
                        sa.and_(
                            _episodes.c.idempotency_key >= low, _episodes.c.idempotency_key < high
                        )
                        for low, high in ranges
                    )
                )
            )
        found: dict[uuid.UUID, LiveEpisode] = {}
        for condition in conditions:
            query = (
                sa.select(
                    _episodes.c.id,
                    _episodes.c.idempotency_key,
                    _episodes.c.revision,
                    _episodes.c.subject_id,
                )
                .where(
                    _episodes.c.tenant_id == tenant_id,
                    _episodes.c.deleted_at.is_(None),
                    condition,
                )
                .order_by(_episodes.c.id)
            )
            if dated:
                # Only a dated deletion needs the stored version's time (a re-read's
                # tombstones of records it no longer finds are undated).
                query = query.add_columns(_episodes.c.provenance)
            if self._postgresql:
                query = query.with_for_update()
            for row in connection.execute(query):
                deleted_at = dated.of(row.idempotency_key)
                provenance = _json_dict(row.provenance) if deleted_at is not None else None
                if _older(deleted_at, source_updated_at(provenance)):
                    continue
                found[row.id] = LiveEpisode(
                    row.id,
                    row.idempotency_key,
                    row.revision,
                    row.subject_id,
                    deleted_at,
                    provenance,
                )
        return [found[episode_id] for episode_id in sorted(found)]

    def tombstone(
        self,
        connection: Connection,
        tenant_id: str,
        episodes: Sequence[LiveEpisode],
        now: datetime,
    ) -> None:
        """Give each episode a revision marked deleted: the current one is archived and
        the new one keeps its content, so what was deleted stays readable. An episode
        with a ``deleted_at`` keeps it in the new revision's provenance
        (``source_deleted_at``): two statements per slice, dated and undated."""
        for some in tables.in_slices(episodes):
            _archive(connection, tenant_id, [episode.episode_id for episode in some], now)
            marked = tables.update_each_if(_episodes, tenant_id, "revision").values(
                revision=sa.bindparam("revision"), deleted_at=now, revised_at=now
            )
            undated = [
                {"b_id": e.episode_id, "b_guard": e.revision, "revision": e.revision + 1}
                for e in some
                if e.deleted_at is None
            ]
            dated = [
                {
                    "b_id": e.episode_id,
                    "b_guard": e.revision,
                    "revision": e.revision + 1,
                    "provenance": {
                        **(e.provenance or {}),
                        SOURCE_DELETED_AT: utc(e.deleted_at).isoformat(),
                    },
                }
                for e in some
                if e.deleted_at is not None
            ]
            if undated:
                connection.execute(marked, undated)
            if dated:
                connection.execute(marked.values(provenance=sa.bindparam("provenance")), dated)

    def live_keys(self, connection: Connection, tenant_id: str, scope: KeyScope) -> list[str]:
        """The keys of the episodes in ``scope`` that are not tombstones: one range scan
        of the key index, whatever the size of the scope."""
        low, high = scope.key_range
        query = sa.select(_episodes.c.idempotency_key).where(
            _episodes.c.tenant_id == tenant_id,
            _episodes.c.idempotency_key >= low,
            _episodes.c.idempotency_key < high,
            _episodes.c.deleted_at.is_(None),
        )
        if scope.occurred_from is not None:
            query = query.where(_episodes.c.occurred_at >= scope.occurred_from)
        if scope.occurred_to is not None:
            query = query.where(_episodes.c.occurred_at <= scope.occurred_to)
        if scope.episode_types:
            query = query.where(_episodes.c.type.in_(sorted(scope.episode_types)))
        return list(connection.execute(query).scalars())


def _archive(
    connection: Connection, tenant_id: str, episode_ids: Sequence[uuid.UUID], now: datetime
) -> None:
    """Copy the current revision of each episode into ``episode_revisions``, replaced
    ``now``: one statement for all of them."""
    copied = (
        "revision",
        "subject_id",
        "source",
        "content_hash",
        "payload",
        "metadata",
        "provenance",
        "occurred_at",
        "deleted_at",
    )
    connection.execute(
        _revisions.insert().from_select(
            ["tenant_id", "episode_id", *copied, "recorded_at", "replaced_at"],
            sa.select(
                _episodes.c.tenant_id,
                _episodes.c.id,
                *(_episodes.c[column] for column in copied),
                sa.func.coalesce(_episodes.c.revised_at, _episodes.c.created_at),
                sa.literal(now, type_=_episodes.c.created_at.type),
            ).where(_episodes.c.tenant_id == tenant_id, _episodes.c.id.in_(episode_ids)),
        )
    )


def delete_subject_episodes(connection: Connection, tenant_id: str, subject_id: str) -> int:
    """Delete a subject's episodes, their earlier revisions, and the earlier revisions of
    records that were filed under it before they moved; return how many episodes."""
    of_subject = sa.select(_episodes.c.id).where(
        _episodes.c.tenant_id == tenant_id, _episodes.c.subject_id == subject_id
    )
    connection.execute(
        _revisions.delete().where(
            _revisions.c.tenant_id == tenant_id,
            sa.or_(_revisions.c.episode_id.in_(of_subject), _revisions.c.subject_id == subject_id),
        )
    )
    result = connection.execute(
        _episodes.delete().where(
            _episodes.c.tenant_id == tenant_id, _episodes.c.subject_id == subject_id
        )
    )
    return result.rowcount


def connector_episodes(
    connection: Connection, tenant_id: str, connector: str
) -> dict[uuid.UUID, str]:
    """The episodes the connector instance ``connector`` stored or last revised (their
    ``provenance.connector``, which the sync runner writes), with the subject each is
    filed under; one statement."""
    stored_by = _episodes.c.provenance["connector"].as_string() == connector
    query = sa.select(_episodes.c.id, _episodes.c.subject_id).where(
        _episodes.c.tenant_id == tenant_id, stored_by
    )
    return {row.id: row.subject_id for row in connection.execute(query)}


def delete_episodes(
    connection: Connection, tenant_id: str, episode_ids: Sequence[uuid.UUID]
) -> tuple[int, int]:
    """Delete episodes with their earlier revisions, two statements per slice of ids;
    return how many episodes and revisions. Deleting them again deletes nothing."""
    episodes = revisions = 0
    for some_ids in tables.in_slices(episode_ids):
        revisions += connection.execute(
            _revisions.delete().where(
                _revisions.c.tenant_id == tenant_id, _revisions.c.episode_id.in_(some_ids)
            )
        ).rowcount
        episodes += connection.execute(
            _episodes.delete().where(
                _episodes.c.tenant_id == tenant_id, _episodes.c.id.in_(some_ids)
            )
        ).rowcount
    return episodes, revisions


def source_updated_at(provenance: object) -> datetime | None:
    """When the source last changed the record, as its connector said it
    (``provenance["source_updated_at"]``); ``None`` when it did not say."""
    return _provenance_time(provenance, SOURCE_UPDATED_AT)


class _DeletionTimes:
    """When the dated tombstones of a batch say each key was deleted: exact keys by a
    lookup, ``with_children`` ranges by a scan of the (few) dated ranges."""

    def __init__(self, tombstones: Sequence[Tombstone]) -> None:
        self._exact: dict[str, datetime] = {}
        self._ranges: list[tuple[str, str, datetime]] = []
        for tombstone in tombstones:
            if tombstone.deleted_at is None:
                continue
            moment = utc(tombstone.deleted_at)
            self._exact[tombstone.key] = max(moment, self._exact.get(tombstone.key, moment))
            if tombstone.with_children:
                self._ranges.append((*tombstone.children_range, moment))

    def __bool__(self) -> bool:
        return bool(self._exact)

    def of(self, key: str) -> datetime | None:
        """The latest deletion time of a dated tombstone covering ``key``, if any."""
        times = [moment for low, high, moment in self._ranges if low <= key < high]
        if key in self._exact:
            times.append(self._exact[key])
        return max(times, default=None)


def _provenance_time(provenance: object, field: str) -> datetime | None:
    moment = _json_dict(provenance).get(field)
    return utc(datetime.fromisoformat(moment)) if isinstance(moment, str) else None


def _json_dict(document: object) -> dict[str, Any]:
    if isinstance(document, str):  # SQLite hands JSON back as text in raw rows
        document = json.loads(document)
    return document if isinstance(document, dict) else {}


def _older(incoming: datetime | None, stored: datetime | None) -> bool:
    # A version older than the stored one arrived late (a re-read that read before a
    # pushed edit): the source's order wins over arrival. Equal or unknown times keep
    # arrival order, as before connectors said when a record changed.
    return incoming is not None and stored is not None and incoming < stored


def _not_after(incoming: datetime | None, deleted: datetime | None) -> bool:
    # A version the source had before it deleted the record (a re-read that read before
    # a pushed deletion) does not bring it back; on a tie the deletion is the later
    # event. A version of unknown time keeps arrival order, as :func:`_older` does.
    return incoming is not None and deleted is not None and incoming <= deleted


def _content(draft: EpisodeDraft) -> dict[str, Any]:
    """The columns a revision replaces: everything the content hash covers, and more."""
    return {
        "source": draft.source,
        "type": draft.type,
        "payload": draft.payload,
        "metadata": draft.metadata,
        "provenance": draft.provenance,
        "session_id": draft.session_id,
        "content_hash": draft.content_hash,
    }


def _episode_row(
    tenant_id: str, episode_id: uuid.UUID, draft: EpisodeDraft, now: datetime
) -> dict[str, Any]:
    return {
        "tenant_id": tenant_id,
        "id": episode_id,
        "subject_id": draft.subject_id,
        "idempotency_key": draft.idempotency_key,
        **_content(draft),
        "revision": 1,
        "compiled_revision": 0,
        "occurred_at": utc(draft.occurred_at) if draft.occurred_at else now,
        "created_at": now,
        "revised_at": None,
        "deleted_at": None,
    }


# One probe of the key index per wanted key, whatever the planner believes about
# table sizes: LIMIT 1 keeps the lateral subquery from being flattened into a join
# that stale statistics (right after a bulk load) would plan as a scan. The COLLATE
# and IS NOT NULL clauses are what make the partial "C"-collated key index usable.
_PG_LOOKUP = (
    "SELECT found.idempotency_key, found.id, found.content_hash, found.revision, "
    "found.subject_id, found.deleted_at IS NOT NULL "
    "FROM jsonb_array_elements_text(CAST(%(wanted)s AS jsonb)) AS wanted(key) "
    "CROSS JOIN LATERAL (SELECT e.idempotency_key, e.id, e.content_hash, e.revision, "
    "e.subject_id, e.deleted_at FROM episodes AS e WHERE e.tenant_id = %(tenant_id)s "
    'AND e.idempotency_key = wanted.key COLLATE "C" '
    "AND e.idempotency_key IS NOT NULL LIMIT 1) AS found"
)


# SQLite: CROSS JOIN fixes the join order (the wanted keys outside, the key index
# probed inside); an IN list would instead be planned as a scan of the tenant's
# primary-key range.
_SQLITE_LOOKUP = sa.text(
    "SELECT e.subject_id, e.idempotency_key, e.id, e.content_hash, e.revision, "
    "e.deleted_at IS NOT NULL AS deleted "
    "FROM json_each(:wanted) AS wanted CROSS JOIN episodes AS e "
    "WHERE e.tenant_id = :tenant_id "
    "AND e.idempotency_key = wanted.value "
    "AND e.idempotency_key IS NOT NULL"
).columns(
    sa.column("subject_id", sa.String),
    sa.column("idempotency_key", sa.String),
    sa.column("id", sa.Uuid),
    sa.column("content_hash", sa.String),
    sa.column("revision", sa.Integer),
    sa.column("deleted", sa.Boolean),
)


@functools.cache
def _pg_insert(
    *, returning: tuple[sa.Column[Any], ...] | None, on_conflict: bool = False
) -> sa.TextClause | sa.TextualSelect:
    """One INSERT for a whole batch on PostgreSQL, its rows travelling as one JSON array.

    A multi-row VALUES list carries 16 parameters per row, which the driver formats
    and the server parses per batch; arrays of text are escaped element by element in
    Python. A single JSON document is built by string joins around the payload JSON
    we already have (it is what the content hash was taken over) and is parsed by the
    server in C. The statement text is constant, so it is prepared once.

    ``returning``: the columns the insert returns, typed as the table types them (so a
    returned row reads exactly as a select of the same columns would).
    """
    conflict = (
        "ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING "
        if on_conflict
        else ""
    )
    names = ", ".join(column.name for column in returning or ())
    statement = sa.text(
        "INSERT INTO episodes (tenant_id, id, subject_id, source, type, idempotency_key, "
        "content_hash, session_id, occurred_at, payload, metadata, provenance, revision, "
        "compiled_revision, created_at, revised_at) "
        "SELECT :tenant_id, (row->>0)::uuid, row->>1, row->>2, row->>3, row->>4, row->>5, "
        "row->>6, coalesce((row->>7)::timestamptz, :now), row->8, row->9, row->10, "
        "1, 0, :now, NULL "
        f"FROM jsonb_array_elements(CAST(:batch AS jsonb)) AS row {conflict}"
        + (f"RETURNING {names}" if returning else "")
    )
    return statement.columns(*returning) if returning else statement


@functools.cache
def _pg_insert_sql(*, keyed: bool) -> str:
    """The SQL psycopg is given for a one-draft insert (:func:`_pg_insert`, keyed or
    keyless), compiled once: what SQLAlchemy sends for the same statement, placeholders
    in psycopg's ``%(name)s`` form."""
    # Imported here: a SQLite store never loads the PostgreSQL dialect (CLI start-up).
    from sqlalchemy.dialects.postgresql import psycopg

    statement = (
        _pg_insert(returning=_KEY_COLUMNS, on_conflict=True)
        if keyed
        else _pg_insert(returning=None)
    )
    dialect = psycopg.dialect()  # type: ignore[no-untyped-call]
    return str(statement.compile(dialect=dialect))


def _pg_batch(
    tenant_id: str, ids: Sequence[uuid.UUID], drafts: Sequence[EpisodeDraft], now: datetime
) -> dict[str, Any]:
    rows = []
    for episode_id, draft in zip(ids, drafts, strict=True):
        scalars = json.dumps(
            [
                str(episode_id),
                draft.subject_id,
                draft.source,
                draft.type,
                draft.idempotency_key,
                draft.content_hash,
                draft.session_id,
                utc(draft.occurred_at).isoformat() if draft.occurred_at else None,
            ],
            ensure_ascii=False,
        )
        rows.append(
            f"{scalars[:-1]},{draft.payload_json},"
            f"{_json_object(draft.metadata)},{_json_object(draft.provenance)}]"
        )
    return {"tenant_id": tenant_id, "now": now, "batch": "[" + ",".join(rows) + "]"}


def _json_object(value: dict[str, Any]) -> str:
    return canonical_json(value) if value else "{}"
