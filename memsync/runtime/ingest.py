"""Ingest: the one path by which episodes enter the store.

The API, the CLI and the sync runner all call :meth:`IngestService.ingest`. It is
set-based: a batch costs a constant number of statements whatever its size:

1. one lookup of the batch's keys that already exist;
2. one ``INSERT … ON CONFLICT DO NOTHING … RETURNING`` for the keys that did not;
   a key that a concurrent writer inserted in between simply does not come back,
   and one more lookup classifies those;
3. for the (rare) revised episodes: a row lock on PostgreSQL, one statement that
   copies their current revisions into ``episode_revisions``, one executemany update.

The unique index on (tenant_id, subject_id, idempotency_key) is what guarantees one
episode per key under any number of concurrent writers; the code only has to be
ready to lose the race gracefully.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection

from memsync.clock import Clock, SystemClock, utc
from memsync.episode import EpisodeDraft, IngestStatus, canonical_json, classify
from memsync.runtime.storage.engine import Store
from memsync.runtime.storage.schema import EpisodeRevisionRow, EpisodeRow
from memsync.runtime.storage.statistics import StatisticsRefresher

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "BatchCommitted",
    "IngestOutcome",
    "IngestService",
    "IngestSummary",
]

DEFAULT_BATCH_SIZE = 1000

_episodes: sa.Table = EpisodeRow.__table__  # type: ignore[assignment]
_revisions: sa.Table = EpisodeRevisionRow.__table__  # type: ignore[assignment]
_KeyRef = tuple[str, str]  # (subject_id, idempotency_key)


class IngestOutcome(NamedTuple):
    """What happened to one draft: the episode it maps to and at which revision."""

    episode_id: uuid.UUID
    status: IngestStatus
    revision: int


@dataclass(frozen=True, slots=True)
class IngestSummary:
    """Counts of a list of outcomes, as run records and API responses report them."""

    created: int = 0
    duplicates: int = 0
    revised: int = 0

    @classmethod
    def of(cls, outcomes: Iterable[IngestOutcome]) -> IngestSummary:
        counts = Counter(outcome.status for outcome in outcomes)
        return cls(
            created=counts[IngestStatus.CREATED],
            duplicates=counts[IngestStatus.DUPLICATE],
            revised=counts[IngestStatus.REVISED],
        )


class _Stored(NamedTuple):
    episode_id: uuid.UUID
    content_hash: str
    revision: int


BatchCommitted = Callable[[str, frozenset[str]], None]
"""Called after each committed batch with the tenant and the subjects that got new or
revised episodes in it (never with duplicates only): the hook for triggers."""


class IngestService:
    """Stores episode drafts idempotently.

    Repeats: a draft whose (tenant, subject, key) exists with the same content hash
    is a ``duplicate`` and writes nothing, however long after the first it comes.
    Conflicts: the same key with another content hash is ``revised``: the stored
    episode moves to revision n+1 and revision n is kept in ``episode_revisions``.
    Keyless drafts are always ``created``. Within one call, drafts are applied in
    order, so a key that appears twice with two payloads ends at the later one.
    """

    def __init__(
        self,
        store: Store,
        clock: Clock | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_batch_committed: BatchCommitted | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._store = store
        self._clock = clock or SystemClock()
        self._batch_size = batch_size
        self._on_batch_committed = on_batch_committed
        # Which statement goes first is a matter of speed, never of correctness: a
        # first sync is mostly new keys (insert first), a re-sync mostly known keys
        # (look up first, write nothing). The last batch's mix decides the next.
        self._expect_new = True
        # A freshly loaded table looks tiny to PostgreSQL's planner, which then probes
        # the timeline index instead of the key index on the next re-sync.
        self._statistics = StatisticsRefresher(store, ["episodes"])

    def ingest(self, tenant_id: str, drafts: Sequence[EpisodeDraft]) -> list[IngestOutcome]:
        """Ingest ``drafts`` for ``tenant_id``; return one outcome per draft, in order.

        Each batch of ``batch_size`` drafts commits on its own: a failure loses at
        most the batch in flight, and re-running the whole call is always safe.
        """
        outcomes: list[IngestOutcome] = []
        for start in range(0, len(drafts), self._batch_size):
            batch = drafts[start : start + self._batch_size]
            with self._store.write() as connection:
                batch_outcomes = self._ingest_batch(connection, tenant_id, batch)
            outcomes.extend(batch_outcomes)
            if self._on_batch_committed is not None:
                changed = frozenset(
                    draft.subject_id
                    for draft, outcome in zip(batch, batch_outcomes, strict=True)
                    if outcome.status is not IngestStatus.DUPLICATE
                )
                if changed:
                    self._on_batch_committed(tenant_id, changed)
        self._statistics.added(sum(o.status is IngestStatus.CREATED for o in outcomes))
        return outcomes

    # -- one batch, one transaction -------------------------------------------------

    def _ingest_batch(
        self, connection: Connection, tenant_id: str, batch: Sequence[EpisodeDraft]
    ) -> list[IngestOutcome]:
        now = self._clock.now()
        results: list[IngestOutcome | None] = [None] * len(batch)

        keyless = [index for index, draft in enumerate(batch) if draft.idempotency_key is None]
        if keyless:
            new_ids = self._insert(connection, tenant_id, [batch[i] for i in keyless], now)
            for index, episode_id in zip(keyless, new_ids, strict=True):
                results[index] = IngestOutcome(episode_id, IngestStatus.CREATED, 1)

        # A key repeated inside one batch is applied in order, in rounds that each
        # hold a key at most once; nearly every batch is a single round.
        for round_indexes in _rounds(batch):
            round_outcomes = self._ingest_round(
                connection, tenant_id, [batch[i] for i in round_indexes], now
            )
            for index, outcome in zip(round_indexes, round_outcomes, strict=True):
                results[index] = outcome

        outcomes = [outcome for outcome in results if outcome is not None]
        assert len(outcomes) == len(batch)
        created = sum(outcome.status is IngestStatus.CREATED for outcome in outcomes)
        self._expect_new = 2 * created >= len(outcomes)
        return outcomes

    def _ingest_round(
        self,
        connection: Connection,
        tenant_id: str,
        drafts: Sequence[EpisodeDraft],
        now: datetime,
    ) -> list[IngestOutcome]:
        refs = [_key_ref(draft) for draft in drafts]
        if self._expect_new:
            # Mostly new keys lately: try the insert first, look up only what conflicted.
            inserted = self._insert_keyed(connection, tenant_id, drafts, now)
            known = [ref for ref in refs if ref not in inserted]
            stored = self._lookup(connection, tenant_id, known) if known else {}
        else:
            # Mostly re-reads lately: look up first, insert only what is missing; a key
            # a concurrent writer inserted in between does not come back from the
            # insert, and one more lookup classifies it.
            stored = self._lookup(connection, tenant_id, refs)
            missing = [d for d, ref in zip(drafts, refs, strict=True) if ref not in stored]
            inserted = self._insert_keyed(connection, tenant_id, missing, now) if missing else {}
            raced = [_key_ref(draft) for draft in missing if _key_ref(draft) not in inserted]
            if raced:
                stored.update(self._lookup(connection, tenant_id, raced))

        to_revise = [
            (draft, stored[ref])
            for draft, ref in zip(drafts, refs, strict=True)
            if ref not in inserted
            and classify(stored[ref].content_hash, draft.content_hash) is IngestStatus.REVISED
        ]
        revised = self._revise(connection, tenant_id, to_revise, now) if to_revise else {}

        outcomes: list[IngestOutcome] = []
        for ref in refs:
            if ref in inserted:
                outcomes.append(IngestOutcome(inserted[ref], IngestStatus.CREATED, 1))
            elif ref in revised:
                outcomes.append(revised[ref])
            else:
                existing = stored[ref]
                outcomes.append(
                    IngestOutcome(existing.episode_id, IngestStatus.DUPLICATE, existing.revision)
                )
        return outcomes

    # -- statements ----------------------------------------------------------------

    def _lookup(
        self, connection: Connection, tenant_id: str, refs: Sequence[_KeyRef]
    ) -> dict[_KeyRef, _Stored]:
        """One statement: the stored hash and revision of each existing key.

        The wanted keys travel as one JSON array that the database unpacks, and the
        statement is shaped so that each key is one probe of the key index, never a
        scan of the tenant's episodes.
        """
        wanted = {"tenant_id": tenant_id, "wanted": json.dumps(refs, ensure_ascii=False)}
        if self._store.is_postgresql:
            # Raw driver rows: this runs for every key of every re-sync.
            rows = connection.exec_driver_sql(_PG_LOOKUP, wanted)
            return {(row[0], row[1]): _Stored(row[2], row[3], row[4]) for row in rows}
        return {
            (row.subject_id, row.idempotency_key): _Stored(row.id, row.content_hash, row.revision)
            for row in connection.execute(_SQLITE_LOOKUP, wanted)
        }

    def _insert(
        self,
        connection: Connection,
        tenant_id: str,
        drafts: Sequence[EpisodeDraft],
        now: datetime,
    ) -> list[uuid.UUID]:
        """Insert keyless drafts (they cannot conflict); return their new ids in order."""
        ids = [uuid.uuid4() for _ in drafts]
        if self._store.is_postgresql:
            connection.execute(
                _pg_insert(on_conflict=False), _pg_batch(tenant_id, ids, drafts, now)
            )
        else:
            rows = [
                _episode_row(tenant_id, id_, draft, now)
                for id_, draft in zip(ids, drafts, strict=True)
            ]
            connection.execute(_episodes.insert(), rows)
        return ids

    def _insert_keyed(
        self,
        connection: Connection,
        tenant_id: str,
        drafts: Sequence[EpisodeDraft],
        now: datetime,
    ) -> dict[_KeyRef, uuid.UUID]:
        """Insert keyed drafts, skipping keys that exist; return the ones inserted."""
        # Concurrent writers insert in one global order (by key), so two batches that
        # share keys wait on each other instead of deadlocking.
        ordered = sorted(drafts, key=_key_ref)
        ids = [uuid.uuid4() for _ in ordered]
        if self._store.is_postgresql:
            result = connection.execute(
                _pg_insert(on_conflict=True), _pg_batch(tenant_id, ids, ordered, now)
            )
        else:
            statement = (
                sqlite.insert(_episodes)
                .on_conflict_do_nothing(
                    index_elements=["tenant_id", "subject_id", "idempotency_key"],
                    index_where=_episodes.c.idempotency_key.is_not(None),
                )
                .returning(_episodes.c.subject_id, _episodes.c.idempotency_key, _episodes.c.id)
            )
            rows = [
                _episode_row(tenant_id, id_, draft, now)
                for id_, draft in zip(ids, ordered, strict=True)
            ]
            result = connection.execute(statement, rows)
        return {(row.subject_id, row.idempotency_key): row.id for row in result}

    def _revise(
        self,
        connection: Connection,
        tenant_id: str,
        candidates: Sequence[tuple[EpisodeDraft, _Stored]],
        now: datetime,
    ) -> dict[_KeyRef, IngestOutcome]:
        """Move each episode to a new revision, keeping the current one in history."""
        ids = [stored.episode_id for _, stored in candidates]
        locked = (
            sa.select(_episodes.c.id, _episodes.c.content_hash, _episodes.c.revision)
            .where(_episodes.c.tenant_id == tenant_id, _episodes.c.id.in_(ids))
            .order_by(_episodes.c.id)  # one lock order for every writer
        )
        if self._store.is_postgresql:
            # Another writer may be revising the same episode: re-read under the lock
            # (SQLite already holds the database write lock for this transaction).
            locked = locked.with_for_update()
        current = {
            row.id: _Stored(row.id, row.content_hash, row.revision)
            for row in connection.execute(locked)
        }

        outcomes: dict[_KeyRef, IngestOutcome] = {}
        updates: list[dict[str, Any]] = []
        for draft, stored in candidates:
            now_stored = current[stored.episode_id]
            ref = _key_ref(draft)
            if now_stored.content_hash == draft.content_hash:
                outcomes[ref] = IngestOutcome(
                    now_stored.episode_id, IngestStatus.DUPLICATE, now_stored.revision
                )
                continue
            new_revision = now_stored.revision + 1
            outcomes[ref] = IngestOutcome(now_stored.episode_id, IngestStatus.REVISED, new_revision)
            updates.append(
                {
                    "b_id": now_stored.episode_id,
                    "b_revision": now_stored.revision,
                    "revision": new_revision,
                    "source": draft.source,
                    "type": draft.type,
                    "payload": draft.payload,
                    "metadata": draft.metadata,
                    "provenance": draft.provenance,
                    "session_id": draft.session_id,
                    "content_hash": draft.content_hash,
                    "occurred_at": utc(draft.occurred_at) if draft.occurred_at else None,
                    "revised_at": now,
                }
            )
        if not updates:
            return outcomes

        archived = [update["b_id"] for update in updates]
        connection.execute(
            _revisions.insert().from_select(
                [
                    "tenant_id",
                    "episode_id",
                    "revision",
                    "source",
                    "content_hash",
                    "payload",
                    "metadata",
                    "provenance",
                    "occurred_at",
                    "recorded_at",
                    "replaced_at",
                ],
                sa.select(
                    _episodes.c.tenant_id,
                    _episodes.c.id,
                    _episodes.c.revision,
                    _episodes.c.source,
                    _episodes.c.content_hash,
                    _episodes.c.payload,
                    _episodes.c.metadata,
                    _episodes.c.provenance,
                    _episodes.c.occurred_at,
                    sa.func.coalesce(_episodes.c.revised_at, _episodes.c.created_at),
                    sa.literal(now, type_=_episodes.c.created_at.type),
                ).where(_episodes.c.tenant_id == tenant_id, _episodes.c.id.in_(archived)),
            )
        )
        connection.execute(
            _episodes.update()
            .where(
                _episodes.c.tenant_id == tenant_id,
                _episodes.c.id == sa.bindparam("b_id"),
                _episodes.c.revision == sa.bindparam("b_revision"),
            )
            .values(
                revision=sa.bindparam("revision"),
                source=sa.bindparam("source"),
                type=sa.bindparam("type"),
                payload=sa.bindparam("payload"),
                metadata=sa.bindparam("metadata"),
                provenance=sa.bindparam("provenance"),
                session_id=sa.bindparam("session_id"),
                content_hash=sa.bindparam("content_hash"),
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


def _key_ref(draft: EpisodeDraft) -> _KeyRef:
    assert draft.idempotency_key is not None
    return (draft.subject_id, draft.idempotency_key)


def _rounds(batch: Sequence[EpisodeDraft]) -> list[list[int]]:
    """Split the keyed drafts of a batch into rounds in which each key appears once."""
    rounds: list[list[int]] = []
    seen: Counter[_KeyRef] = Counter()
    for index, draft in enumerate(batch):
        if draft.idempotency_key is None:
            continue
        ref = _key_ref(draft)
        round_number = seen[ref]
        seen[ref] += 1
        if round_number == len(rounds):
            rounds.append([])
        rounds[round_number].append(index)
    return rounds


def _episode_row(
    tenant_id: str, episode_id: uuid.UUID, draft: EpisodeDraft, now: datetime
) -> dict[str, Any]:
    return {
        "tenant_id": tenant_id,
        "id": episode_id,
        "subject_id": draft.subject_id,
        "source": draft.source,
        "type": draft.type,
        "payload": draft.payload,
        "metadata": draft.metadata,
        "provenance": draft.provenance,
        "session_id": draft.session_id,
        "idempotency_key": draft.idempotency_key,
        "content_hash": draft.content_hash,
        "revision": 1,
        "compiled_revision": 0,
        "occurred_at": utc(draft.occurred_at) if draft.occurred_at else now,
        "created_at": now,
        "revised_at": None,
    }


# One probe of the key index per wanted key, whatever the planner believes about
# table sizes: LIMIT 1 keeps the lateral subquery from being flattened into a join
# that stale statistics (right after a bulk load) would plan as a scan. The COLLATE
# and IS NOT NULL clauses are what make the partial "C"-collated key index usable.
_PG_LOOKUP = (
    "SELECT found.subject_id, found.idempotency_key, found.id, found.content_hash, "
    "found.revision "
    "FROM jsonb_array_elements(CAST(%(wanted)s AS jsonb)) AS wanted(ref) "
    "CROSS JOIN LATERAL (SELECT e.subject_id, e.idempotency_key, e.id, e.content_hash, "
    "e.revision FROM episodes AS e WHERE e.tenant_id = %(tenant_id)s "
    'AND e.subject_id = (wanted.ref->>0) COLLATE "C" '
    'AND e.idempotency_key = (wanted.ref->>1) COLLATE "C" '
    "AND e.idempotency_key IS NOT NULL LIMIT 1) AS found"
)


# SQLite: CROSS JOIN fixes the join order (the wanted keys outside, the key index
# probed inside); a row-value IN list would instead be planned as a scan of the
# tenant's primary-key range.
_SQLITE_LOOKUP = sa.text(
    "SELECT e.subject_id, e.idempotency_key, e.id, e.content_hash, e.revision "
    "FROM json_each(:wanted) AS wanted CROSS JOIN episodes AS e "
    "WHERE e.tenant_id = :tenant_id "
    "AND e.subject_id = json_extract(wanted.value, '$[0]') "
    "AND e.idempotency_key = json_extract(wanted.value, '$[1]') "
    "AND e.idempotency_key IS NOT NULL"
).columns(
    sa.column("subject_id", sa.String),
    sa.column("idempotency_key", sa.String),
    sa.column("id", sa.Uuid),
    sa.column("content_hash", sa.String),
    sa.column("revision", sa.Integer),
)


def _pg_insert(*, on_conflict: bool) -> sa.TextClause:
    """One INSERT for a whole batch on PostgreSQL, its rows travelling as one JSON array.

    A multi-row VALUES list carries 16 parameters per row, which the driver formats
    and the server parses per batch; arrays of text are escaped element by element in
    Python. A single JSON document is built by string joins around the payload JSON
    we already have (it is what the content hash was taken over) and is parsed by the
    server in C. The statement text is constant, so it is prepared once.
    """
    conflict = (
        "ON CONFLICT (tenant_id, subject_id, idempotency_key) "
        "WHERE idempotency_key IS NOT NULL DO NOTHING "
        "RETURNING subject_id, idempotency_key, id"
        if on_conflict
        else ""
    )
    return sa.text(
        "INSERT INTO episodes (tenant_id, id, subject_id, source, type, idempotency_key, "
        "content_hash, session_id, occurred_at, payload, metadata, provenance, revision, "
        "compiled_revision, created_at, revised_at) "
        "SELECT :tenant_id, (row->>0)::uuid, row->>1, row->>2, row->>3, row->>4, row->>5, "
        "row->>6, coalesce((row->>7)::timestamptz, :now), row->8, row->9, row->10, "
        "1, 0, :now, NULL "
        f"FROM jsonb_array_elements(CAST(:batch AS jsonb)) AS row {conflict}"
    )


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
