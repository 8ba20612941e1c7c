"""Ingest: the one path by which episodes enter the store.

The API, the CLI and the sync runner all call :meth:`IngestService.ingest`. It is
set-based: a batch costs a constant number of statements whatever its size:

1. one lookup of the batch's keys that already exist;
2. one ``INSERT … ON CONFLICT DO NOTHING … RETURNING`` for the keys that did not;
   a key that a concurrent writer inserted in between simply does not come back,
   and one more lookup classifies those;
3. for the (rare) revised episodes: a row lock on PostgreSQL, one statement that
   copies their current revisions into ``episode_revisions``, one executemany update.

The unique index on (tenant_id, idempotency_key) is what guarantees one episode per
key under any number of concurrent writers, wherever the record is filed; the code
only has to be ready to lose the race gracefully.

One call is one transaction, whatever its size: the batches above run inside it, so
a request or a ``memsync ingest`` that fails stores nothing of itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy.engine import Connection

from memsync.clock import Clock, SystemClock
from memsync.episode import EpisodeDraft, IngestStatus, KeyScope, Tombstone
from memsync.runtime.ingest.labels import write_episode_labels
from memsync.runtime.ingest.statements import EpisodeStatements, IngestOutcome, key_of
from memsync.runtime.storage.engine import Store
from memsync.runtime.storage.statistics import StatisticsRefresher

DEFAULT_BATCH_SIZE = 1000


@dataclass(frozen=True, slots=True)
class IngestSummary:
    """Counts of a list of outcomes, as run records and API responses report them."""

    created: int = 0
    duplicates: int = 0
    revised: int = 0
    tombstoned: int = 0

    @classmethod
    def of(cls, outcomes: Iterable[IngestOutcome]) -> IngestSummary:
        counts = Counter(outcome.status for outcome in outcomes)
        return cls(
            created=counts[IngestStatus.CREATED],
            duplicates=counts[IngestStatus.DUPLICATE],
            revised=counts[IngestStatus.REVISED],
            tombstoned=counts[IngestStatus.TOMBSTONED],
        )


BatchCommitted = Callable[[str, frozenset[str]], None]
"""Called after each committed call with the tenant and the subjects that got new,
revised or tombstoned episodes in it (never with duplicates only): the hook for
triggers."""

BeforeCommit = Callable[[Connection, list[IngestOutcome]], None]
"""Called inside the ingest transaction with the outcomes, before it commits: what it
writes commits or rolls back with the episodes (a sync run's counters and cursor)."""


class IngestService:
    """Stores episode drafts idempotently.

    A key names one source record within a tenant, wherever it is filed. Repeats: a
    draft whose key exists with the same content hash under the same subject is a
    ``duplicate`` and writes nothing, however long after the first it comes.
    Conflicts: the same key with another content hash, or under another subject, is
    ``revised``: the stored episode moves to revision n+1 (and to the draft's subject)
    and revision n is kept in ``episode_revisions`` with the subject it had. Keyless
    drafts are always ``created``. Within one call, drafts are applied in order, so a
    key that appears twice with two payloads ends at the later one.
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
        self._statements = EpisodeStatements(postgresql=store.is_postgresql)
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

    def ingest(
        self,
        tenant_id: str,
        drafts: Sequence[EpisodeDraft],
        *,
        before_commit: BeforeCommit | None = None,
        with_stored: bool = False,
    ) -> list[IngestOutcome]:
        """Ingest ``drafts`` for ``tenant_id``; return one outcome per draft, in order.

        All or nothing: the whole call is one transaction (its statements work through
        ``batch_size`` drafts at a time), so a failure stores none of it and re-running
        the call is always safe. ``before_commit`` runs last inside that transaction.
        ``with_stored``: each outcome carries the episode's stored columns as the call
        left them: a new episode's as its insert wrote them (on PostgreSQL the row the
        insert was given, not read back; on SQLite what it returned), a known one's read
        back in the same transaction (for a caller that answers with them).

        A single draft with no ``before_commit`` (an API request) whose key is new is
        stored by its insert alone, a transaction of one statement; only a key that
        turns out to be known takes a transaction to be looked up and perhaps revised.
        """
        # A labelled draft (a connector's) writes its labels too: not one statement.
        alone = len(drafts) == 1 and before_commit is None and not drafts[0].sensitivity_labels
        outcome = None
        if alone and self._expect_new:
            with self._store.write_one_statement() as connection:
                outcome = self._insert_alone(connection, tenant_id, drafts[0], with_stored)
        if outcome is None:
            # A single draft that was not stored alone has a known key (or likely so,
            # lately): it is looked up first.
            return self._ingest_in_transaction(
                tenant_id,
                drafts,
                before_commit,
                with_stored,
                insert_first=self._expect_new and not alone,
            )
        self._follow_up(tenant_id, drafts, [outcome])
        return [outcome]

    async def ingest_one(
        self, tenant_id: str, draft: EpisodeDraft, *, with_stored: bool = False
    ) -> IngestOutcome:
        """:meth:`ingest` of one draft with no ``before_commit``, for a caller on an event
        loop (an API request): the same outcome, the same effects (the batch hook, the
        planner statistics) and the same errors, without blocking the loop.

        On PostgreSQL a new key's insert, a transaction of one statement, is awaited on
        a raw psycopg connection of the store's asyncio pool (no worker thread, no
        SQLAlchemy statement execution: :meth:`Store.run_one_statement_async`). What
        would block runs on anyio's worker threads, as a plain route would: a key that
        turns out to be known (looked up and perhaps revised in a transaction, as
        :meth:`ingest` does), the batch hook and an ANALYZE when due, and everything on
        SQLite. Repeats and
        conflicts are :meth:`ingest`'s: a duplicate writes nothing, a conflict is a
        revision; two concurrent calls with one new key store it once, and the one that
        loses the insert finds the key known.
        """
        # Imported here: the CLI and the sync runner, which never come here, start faster.
        import anyio.to_thread

        if not self._store.is_postgresql or not self._expect_new:
            [outcome] = await anyio.to_thread.run_sync(
                partial(self.ingest, tenant_id, [draft], with_stored=with_stored)
            )
            return outcome
        # The insert of _insert_alone, run on the raw driver connection: the same SQL,
        # parameters and outcome, without SQLAlchemy's statement execution.
        insert = self._statements.single_insert(tenant_id, draft, self._clock.now())
        rows = await self._store.run_one_statement_async(insert.sql, insert.parameters)
        stored_alone = insert.outcome(rows, with_stored=with_stored)
        if stored_alone is None:
            [outcome] = await anyio.to_thread.run_sync(
                partial(
                    self._ingest_in_transaction,
                    tenant_id,
                    [draft],
                    None,
                    with_stored,
                    insert_first=False,
                )
            )
            return outcome
        database_work = self._book(tenant_id, [draft], [stored_alone])
        if database_work is not None:
            await anyio.to_thread.run_sync(database_work)
        return stored_alone

    def _insert_alone(
        self, connection: Connection, tenant_id: str, draft: EpisodeDraft, with_stored: bool
    ) -> IngestOutcome | None:
        """Store ``draft`` by one ``INSERT … ON CONFLICT DO NOTHING`` on ``connection``
        (see :meth:`Store.write_one_statement`); ``None`` if its key is known (the
        statement then wrote nothing)."""
        now = self._clock.now()
        if draft.idempotency_key is None:
            [(episode_id, stored)] = self._statements.insert_keyless(
                connection, tenant_id, [draft], now, with_stored=with_stored
            )
            return IngestOutcome(episode_id, IngestStatus.CREATED, 1, stored)
        inserted = self._statements.insert_keyed(
            connection, tenant_id, [draft], now, with_stored=with_stored
        )
        row = inserted.get(key_of(draft))
        return None if row is None else _created(row, with_stored)

    def _follow_up(
        self, tenant_id: str, drafts: Sequence[EpisodeDraft], outcomes: list[IngestOutcome]
    ) -> None:
        """What follows a committed call, all of it here and now."""
        database_work = self._book(tenant_id, drafts, outcomes)
        if database_work is not None:
            database_work()

    def _book(
        self, tenant_id: str, drafts: Sequence[EpisodeDraft], outcomes: list[IngestOutcome]
    ) -> Callable[[], None] | None:
        """Book a committed call (count its new episodes for the planner statistics) and
        return what must follow it that may touch the database, or ``None`` when nothing
        must: the batch hook for the subjects that changed, then an ANALYZE if due. A
        caller on an event loop runs that on a thread."""
        changed = frozenset(
            draft.subject_id
            for draft, outcome in zip(drafts, outcomes, strict=True)
            if outcome.status is not IngestStatus.DUPLICATE
        )
        hook = self._on_batch_committed if changed else None
        analyze = self._statistics.count(
            sum(outcome.status is IngestStatus.CREATED for outcome in outcomes)
        )
        if hook is None and not analyze:
            return None

        def database_work() -> None:
            if hook is not None:
                hook(tenant_id, changed)
            if analyze:
                self._statistics.analyze()

        return database_work

    def _ingest_in_transaction(
        self,
        tenant_id: str,
        drafts: Sequence[EpisodeDraft],
        before_commit: BeforeCommit | None,
        with_stored: bool,
        *,
        insert_first: bool,
    ) -> list[IngestOutcome]:
        """The drafts stored in one transaction; once it committed, what follows it."""
        # One transaction holds the locks of every batch until it commits, so two calls
        # sharing keys must take them in one global order or deadlock: the drafts go
        # through in key order (a stable sort: a repeated key still applies in order).
        order = sorted(range(len(drafts)), key=lambda index: _lock_order(drafts[index]))
        placed: list[IngestOutcome | None] = [None] * len(drafts)
        with self._store.write() as connection:
            for start in range(0, len(order), self._batch_size):
                positions = order[start : start + self._batch_size]
                batch = [drafts[index] for index in positions]
                for index, outcome in zip(
                    positions,
                    self._ingest_batch(connection, tenant_id, batch, with_stored, insert_first),
                    strict=True,
                ):
                    placed[index] = outcome
                # The next batch goes the way this one's mix of new and known suggests.
                insert_first = self._expect_new
            outcomes = [outcome for outcome in placed if outcome is not None]
            write_episode_labels(connection, tenant_id, drafts, outcomes)
            if with_stored:
                outcomes = self._with_stored(connection, tenant_id, outcomes)
            if before_commit is not None:
                before_commit(connection, outcomes)
        self._follow_up(tenant_id, drafts, outcomes)
        return outcomes

    def _with_stored(
        self, connection: Connection, tenant_id: str, outcomes: list[IngestOutcome]
    ) -> list[IngestOutcome]:
        """``outcomes`` with the stored columns of the episodes their statements did not
        return (known keys), read in one statement more."""
        unread = [outcome.episode_id for outcome in outcomes if outcome.stored is None]
        if not unread:
            return outcomes
        stored = self._statements.stored(connection, tenant_id, unread)
        return [
            outcome
            if outcome.stored is not None
            else outcome._replace(stored=stored[outcome.episode_id])
            for outcome in outcomes
        ]

    def tombstone(
        self,
        tenant_id: str,
        tombstones: Sequence[Tombstone],
        *,
        before_commit: BeforeCommit | None = None,
    ) -> list[IngestOutcome]:
        """Mark the records the tombstones cover deleted; return one ``tombstoned``
        outcome per episode that was live, in episode id order.

        Each episode gets a new revision marked deleted that keeps its content; its
        subject is unchanged. Repeats: a record already deleted, or never stored, is
        left alone and has no outcome. A later live draft of the key revives the record
        (``revised``). All or nothing, as :meth:`ingest`: one transaction, its
        statements working through ``batch_size`` tombstones at a time.
        """
        outcomes: list[IngestOutcome] = []
        subjects: set[str] = set()
        with self._store.write() as connection:
            for start in range(0, len(tombstones), self._batch_size):
                batch = tombstones[start : start + self._batch_size]
                found = self._statements.live_covered(connection, tenant_id, batch)
                if not found:
                    continue
                self._statements.tombstone(connection, tenant_id, found, self._clock.now())
                outcomes.extend(
                    IngestOutcome(episode.episode_id, IngestStatus.TOMBSTONED, episode.revision + 1)
                    for episode in found
                )
                subjects.update(episode.subject_id for episode in found)
            if before_commit is not None:
                before_commit(connection, outcomes)
        if subjects and self._on_batch_committed is not None:
            self._on_batch_committed(tenant_id, frozenset(subjects))
        return outcomes

    def live_keys(self, tenant_id: str, scope: KeyScope) -> list[str]:
        """The keys of the tenant's records in ``scope`` that are not deleted: one
        statement (a range scan of the key index), whatever the scope's size."""
        with self._store.read() as connection:
            return self._statements.live_keys(connection, tenant_id, scope)

    # -- one batch of the call's transaction ----------------------------------------

    def _ingest_batch(
        self,
        connection: Connection,
        tenant_id: str,
        batch: Sequence[EpisodeDraft],
        with_stored: bool,
        insert_first: bool,
    ) -> list[IngestOutcome]:
        now = self._clock.now()
        results: list[IngestOutcome | None] = [None] * len(batch)

        keyless = [index for index, draft in enumerate(batch) if draft.idempotency_key is None]
        if keyless:
            new_episodes = self._statements.insert_keyless(
                connection, tenant_id, [batch[i] for i in keyless], now, with_stored=with_stored
            )
            for index, (episode_id, stored) in zip(keyless, new_episodes, strict=True):
                results[index] = IngestOutcome(episode_id, IngestStatus.CREATED, 1, stored)

        # A key repeated inside one batch is applied in order, in rounds that each
        # hold a key at most once; nearly every batch is a single round.
        for round_indexes in _rounds(batch):
            round_outcomes = self._ingest_round(
                connection,
                tenant_id,
                [batch[i] for i in round_indexes],
                now,
                with_stored,
                insert_first,
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
        with_stored: bool,
        insert_first: bool,
    ) -> list[IngestOutcome]:
        keys = [key_of(draft) for draft in drafts]
        if insert_first:
            # Mostly new keys lately: try the insert first, look up only what conflicted.
            inserted = self._statements.insert_keyed(
                connection, tenant_id, drafts, now, with_stored=with_stored
            )
            known = [key for key in keys if key not in inserted]
            stored = self._statements.lookup(connection, tenant_id, known) if known else {}
        else:
            # Mostly re-reads lately: look up first, insert only what is missing; a key
            # a concurrent writer inserted in between does not come back from the
            # insert, and one more lookup classifies it.
            stored = self._statements.lookup(connection, tenant_id, keys)
            missing = [d for d, key in zip(drafts, keys, strict=True) if key not in stored]
            inserted = (
                self._statements.insert_keyed(
                    connection, tenant_id, missing, now, with_stored=with_stored
                )
                if missing
                else {}
            )
            raced = [key_of(draft) for draft in missing if key_of(draft) not in inserted]
            if raced:
                stored.update(self._statements.lookup(connection, tenant_id, raced))

        to_revise = [
            (draft, stored[key])
            for draft, key in zip(drafts, keys, strict=True)
            if key not in inserted and stored[key].outcome_for(draft) is IngestStatus.REVISED
        ]
        revised = (
            self._statements.revise(connection, tenant_id, to_revise, now) if to_revise else {}
        )

        outcomes: list[IngestOutcome] = []
        for key in keys:
            if key in inserted:
                outcomes.append(_created(inserted[key], with_stored))
            elif key in revised:
                outcomes.append(revised[key])
            else:
                existing = stored[key]
                outcomes.append(
                    IngestOutcome(existing.episode_id, IngestStatus.DUPLICATE, existing.revision)
                )
        return outcomes


def _created(row: Mapping[Any, Any], with_stored: bool) -> IngestOutcome:
    """The outcome of a draft its insert stored, from the row the insert wrote."""
    return IngestOutcome(row["id"], IngestStatus.CREATED, 1, row if with_stored else None)


def _lock_order(draft: EpisodeDraft) -> str:
    # Keyless drafts conflict with nothing; keyed ones in the order insert_keyed locks.
    return key_of(draft) if draft.idempotency_key is not None else ""


def _rounds(batch: Sequence[EpisodeDraft]) -> list[list[int]]:
    """Split the keyed drafts of a batch into rounds in which each key appears once."""
    rounds: list[list[int]] = []
    seen: Counter[str] = Counter()
    for index, draft in enumerate(batch):
        if draft.idempotency_key is None:
            continue
        key = key_of(draft)
        round_number = seen[key]
        seen[key] += 1
        if round_number == len(rounds):
            rounds.append([])
        rounds[round_number].append(index)
    return rounds
