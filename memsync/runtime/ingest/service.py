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

One call is one transaction, whatever its size: the batches above run inside it, so
a request or a ``memsync ingest`` that fails stores nothing of itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Connection

from memsync.clock import Clock, SystemClock
from memsync.episode import EpisodeDraft, IngestStatus, classify
from memsync.runtime.ingest.statements import EpisodeStatements, IngestOutcome, KeyRef, key_ref
from memsync.runtime.storage.engine import Store
from memsync.runtime.storage.statistics import StatisticsRefresher

DEFAULT_BATCH_SIZE = 1000


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


BatchCommitted = Callable[[str, frozenset[str]], None]
"""Called after each committed call with the tenant and the subjects that got new or
revised episodes in it (never with duplicates only): the hook for triggers."""

BeforeCommit = Callable[[Connection, list[IngestOutcome]], None]
"""Called inside the ingest transaction with the outcomes, before it commits: what it
writes commits or rolls back with the episodes (a sync run's counters and cursor)."""


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
    ) -> list[IngestOutcome]:
        """Ingest ``drafts`` for ``tenant_id``; return one outcome per draft, in order.

        All or nothing: the whole call is one transaction (its statements work through
        ``batch_size`` drafts at a time), so a failure stores none of it and re-running
        the call is always safe. ``before_commit`` runs last inside that transaction.
        """
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
                    positions, self._ingest_batch(connection, tenant_id, batch), strict=True
                ):
                    placed[index] = outcome
            outcomes = [outcome for outcome in placed if outcome is not None]
            if before_commit is not None:
                before_commit(connection, outcomes)
        if self._on_batch_committed is not None:
            changed = frozenset(
                draft.subject_id
                for draft, outcome in zip(drafts, outcomes, strict=True)
                if outcome.status is not IngestStatus.DUPLICATE
            )
            if changed:
                self._on_batch_committed(tenant_id, changed)
        self._statistics.added(sum(o.status is IngestStatus.CREATED for o in outcomes))
        return outcomes

    # -- one batch of the call's transaction ----------------------------------------

    def _ingest_batch(
        self, connection: Connection, tenant_id: str, batch: Sequence[EpisodeDraft]
    ) -> list[IngestOutcome]:
        now = self._clock.now()
        results: list[IngestOutcome | None] = [None] * len(batch)

        keyless = [index for index, draft in enumerate(batch) if draft.idempotency_key is None]
        if keyless:
            new_ids = self._statements.insert_keyless(
                connection, tenant_id, [batch[i] for i in keyless], now
            )
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
        refs = [key_ref(draft) for draft in drafts]
        if self._expect_new:
            # Mostly new keys lately: try the insert first, look up only what conflicted.
            inserted = self._statements.insert_keyed(connection, tenant_id, drafts, now)
            known = [ref for ref in refs if ref not in inserted]
            stored = self._statements.lookup(connection, tenant_id, known) if known else {}
        else:
            # Mostly re-reads lately: look up first, insert only what is missing; a key
            # a concurrent writer inserted in between does not come back from the
            # insert, and one more lookup classifies it.
            stored = self._statements.lookup(connection, tenant_id, refs)
            missing = [d for d, ref in zip(drafts, refs, strict=True) if ref not in stored]
            inserted = (
                self._statements.insert_keyed(connection, tenant_id, missing, now)
                if missing
                else {}
            )
            raced = [key_ref(draft) for draft in missing if key_ref(draft) not in inserted]
            if raced:
                stored.update(self._statements.lookup(connection, tenant_id, raced))

        to_revise = [
            (draft, stored[ref])
            for draft, ref in zip(drafts, refs, strict=True)
            if ref not in inserted
            and classify(stored[ref].content_hash, draft.content_hash) is IngestStatus.REVISED
        ]
        revised = (
            self._statements.revise(connection, tenant_id, to_revise, now) if to_revise else {}
        )

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


def _lock_order(draft: EpisodeDraft) -> tuple[str, str]:
    # Keyless drafts conflict with nothing; keyed ones in the order insert_keyed locks.
    return key_ref(draft) if draft.idempotency_key is not None else ("", "")


def _rounds(batch: Sequence[EpisodeDraft]) -> list[list[int]]:
    """Split the keyed drafts of a batch into rounds in which each key appears once."""
    rounds: list[list[int]] = []
    seen: Counter[KeyRef] = Counter()
    for index, draft in enumerate(batch):
        if draft.idempotency_key is None:
            continue
        ref = key_ref(draft)
        round_number = seen[ref]
        seen[ref] += 1
        if round_number == len(rounds):
            rounds.append([])
        rounds[round_number].append(index)
    return rounds
