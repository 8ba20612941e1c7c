"""A conformance kit every connector author runs against recorded records.

Connectors cannot touch storage, so the kit simulates ingest with the real decision
function, :func:`memsync.episode.classify`, over what a store keeps per key (subject,
content hash, whether it is deleted). Use it directly::

    ConnectorConformance(lambda: MyConnector(config), records, edited).check_all()

or subclass :class:`ConnectorConformanceSuite` in a pytest module (name the subclass
``Test…`` so pytest collects it) and implement its three methods. A connector that
declares ``deletions`` also gives a :class:`DeletionScenario`: a source it reads three
times, unchanged and then with one record removed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic

from memsync.connectors.base import (
    Connector,
    KeyPolicy,
    Listing,
    Progress,
    RecordT,
    Window,
    validate_connector_class,
)
from memsync.connectors.errors import SkipRecord
from memsync.episode import EpisodeDraft, IngestStatus, KeyScope, Tombstone, classify

__all__ = [
    "ConnectorConformance",
    "ConnectorConformanceSuite",
    "DeletionScenario",
    "SimulatedIngest",
    "StoredRecord",
]


@dataclass(slots=True)
class StoredRecord:
    """What the simulated store keeps of one key."""

    subject_id: str
    content_hash: str
    type: str
    occurred_at: datetime | None
    deleted: bool = False


class SimulatedIngest:
    """An in-memory stand-in for ingest and the runner's handling of deletions.

    Repeats: a draft whose hash is already stored under its subject is a duplicate and
    changes nothing; a tombstone for a deleted or unknown key changes nothing.
    Conflicts: a known key with a new hash, under another subject, or deleted, is a
    revision and replaces what is stored.
    """

    def __init__(self) -> None:
        self.stored: dict[str, StoredRecord] = {}

    @property
    def deleted(self) -> set[str]:
        return {key for key, record in self.stored.items() if record.deleted}

    def ingest(self, draft: EpisodeDraft) -> IngestStatus:
        """Classify ``draft`` against what is stored, then store it."""
        if draft.idempotency_key is None:
            raise AssertionError("connector drafts must always carry an idempotency key")
        before = self.stored.get(draft.idempotency_key)
        status = (
            classify(None, draft.content_hash)
            if before is None
            else classify(
                before.content_hash,
                draft.content_hash,
                moved=before.subject_id != draft.subject_id,
                deleted=before.deleted,
            )
        )
        self.stored[draft.idempotency_key] = StoredRecord(
            draft.subject_id, draft.content_hash, draft.type, draft.occurred_at
        )
        return status

    def ingest_all(self, drafts: Sequence[EpisodeDraft]) -> list[IngestStatus]:
        return [self.ingest(draft) for draft in drafts]

    def tombstone(self, tombstone: Tombstone) -> list[str]:
        """Mark the live keys the tombstone covers deleted; return them."""
        low, high = tombstone.children_range
        covered = [
            key
            for key, record in self.stored.items()
            if not record.deleted
            and (key == tombstone.key or (tombstone.with_children and low <= key < high))
        ]
        for key in covered:
            self.stored[key].deleted = True
        return covered

    def apply_listing(self, listing: Listing) -> list[str]:
        """Tombstone the live keys of the listing's scope it says are gone; return them."""
        gone = [key for key in self._live_in(listing.scope) if listing.gone(key)]
        for key in gone:
            self.stored[key].deleted = True
        return gone

    def _live_in(self, scope: KeyScope) -> list[str]:
        low, high = scope.key_range
        return [
            key
            for key, record in self.stored.items()
            if low <= key < high
            and not record.deleted
            and (not scope.episode_types or record.type in scope.episode_types)
            and _within(record.occurred_at, scope)
        ]

    def sync(self, connector: Connector[Any, Any], items: Iterable[object]) -> Counter[str]:
        """Apply one fetch as the runner would (records and tombstones in order, then
        listings); count the outcomes (``created``… ``tombstoned``, and ``skipped``)."""
        outcomes: Counter[str] = Counter()
        listings: list[Listing] = []
        for item in items:
            if isinstance(item, Tombstone):
                outcomes[IngestStatus.TOMBSTONED] += len(self.tombstone(item))
            elif isinstance(item, Listing):
                listings.append(item)
            elif isinstance(item, Progress):
                continue  # where the read stands: the runner's to keep, nothing to store
            else:
                try:
                    outcomes[self.ingest(connector.to_episode(item))] += 1
                except SkipRecord:
                    outcomes["skipped"] += 1
        for listing in listings:
            outcomes[IngestStatus.TOMBSTONED] += len(self.apply_listing(listing))
        return +outcomes  # without zero counts


def _within(moment: datetime | None, scope: KeyScope) -> bool:
    if moment is None:
        return True
    after_start = scope.occurred_from is None or moment >= scope.occurred_from
    return after_start and (scope.occurred_to is None or moment <= scope.occurred_to)


@dataclass(frozen=True)
class DeletionScenario:
    """A source for the deletion checks: ``read()`` returns a connector reading the
    source as it is now, over ``window``; ``remove()`` deletes one record at the source
    and returns the key that record was stored under."""

    read: Callable[[], Connector[Any, Any]]
    remove: Callable[[], str]
    window: Window


class ConnectorConformance(Generic[RecordT]):
    """Checks a connector against the contract using recorded records.

    ``make_connector`` returns a fresh, identically configured instance on every call
    (determinism is checked across instances). ``records`` are distinct records as the
    source returns them. ``edited`` are edits of some of them: under ``identity`` each
    must be the same logical record with changed content; under ``content`` each is
    simply changed content. Every check raises ``AssertionError`` saying what broke.
    """

    def __init__(
        self,
        make_connector: Callable[[], Connector[Any, RecordT]],
        records: Sequence[RecordT],
        edited: Sequence[RecordT] = (),
        deletions: Callable[[], DeletionScenario] | None = None,
    ) -> None:
        if not records:
            raise ValueError("the conformance kit needs at least one recorded record")
        self.make_connector = make_connector
        self.records = list(records)
        self.edited = list(edited)
        self.deletions = deletions

    def check_all(self) -> None:
        """Run every check."""
        self.check_declaration()
        self.check_keys_are_deterministic()
        self.check_distinct_records_have_distinct_keys()
        self.check_episodes_are_well_formed()
        self.check_resync_creates_nothing()
        self.check_edits_follow_the_key_policy()
        self.check_deletions_are_reported()

    def check_declaration(self) -> None:
        """Class attributes are present; the rationale is not empty; the streams are
        named once each, the same on every instance (checkpoints are kept by name)."""
        connector = self.make_connector()
        validate_connector_class(type(connector))
        assert connector.key_rationale.strip(), f"{connector.type}: empty key_rationale"
        names = [stream.name for stream in connector.streams()]
        assert names, f"{connector.type}: streams() declares no stream"
        assert len(names) == len(set(names)), f"{connector.type}: a stream name repeats: {names}"
        again = [stream.name for stream in self.make_connector().streams()]
        assert again == names, f"stream names differ across instances: {names} vs {again}"

    def check_keys_are_deterministic(self) -> None:
        """The same record gives the same key, twice and on a fresh instance."""
        first, second = self.make_connector(), self.make_connector()
        for record in self.records + self.edited:
            key = first.idempotency_key(record)
            assert key == first.idempotency_key(record), f"key changed on repeat: {key}"
            assert key == second.idempotency_key(record), (
                f"key differs across instances: {key} vs {second.idempotency_key(record)}"
            )

    def check_distinct_records_have_distinct_keys(self) -> None:
        """No two of the recorded records share a key; keys are namespaced by type."""
        connector = self.make_connector()
        seen: dict[str, int] = {}
        for index, record in enumerate(self.records):
            key = connector.idempotency_key(record)
            assert key.startswith(f"{connector.type}:"), (
                f"key {key!r} is not namespaced with '{connector.type}:'"
            )
            assert key not in seen, f"records {seen[key]} and {index} share the key {key!r}"
            seen[key] = index

    def check_episodes_are_well_formed(self) -> None:
        """Drafts carry the key, a subject, an aware occurred_at and an aware cursor."""
        connector = self.make_connector()
        for record in self.records + self.edited:
            draft = connector.to_episode(record)
            assert draft.idempotency_key == connector.idempotency_key(record)
            assert draft.subject_id, "to_episode produced an empty subject"
            assert draft.type, "to_episode produced an empty episode type"
            occurred = draft.occurred_at
            assert occurred is not None, f"{draft.idempotency_key}: occurred_at is None"
            assert occurred.utcoffset() is not None, (
                f"{draft.idempotency_key}: occurred_at must be aware, got {occurred!r}"
            )
            position = connector.record_cursor(record)
            assert position.utcoffset() is not None, (
                f"{draft.idempotency_key}: record_cursor must be aware, got {position!r}"
            )

    def check_resync_creates_nothing(self) -> None:
        """Ingesting the same records again (fresh instance) yields only duplicates."""
        store = SimulatedIngest()
        first = store.ingest_all([self.make_connector().to_episode(r) for r in self.records])
        assert all(status is IngestStatus.CREATED for status in first), first
        again = store.ingest_all([self.make_connector().to_episode(r) for r in self.records])
        assert all(status is IngestStatus.DUPLICATE for status in again), (
            f"re-sync of unchanged records was not all duplicates: {again}"
        )

    def check_edits_follow_the_key_policy(self) -> None:
        """Identity: an edit revises its episode. Content: an edit is a new episode."""
        if not self.edited:
            return
        connector = self.make_connector()
        store = SimulatedIngest()
        store.ingest_all([connector.to_episode(record) for record in self.records])
        expected = (
            IngestStatus.REVISED
            if connector.key_policy is KeyPolicy.IDENTITY
            else IngestStatus.CREATED
        )
        for record in self.edited:
            draft = connector.to_episode(record)
            status = store.ingest(draft)
            assert status is expected, (
                f"{connector.type} ({connector.key_policy}): edited record "
                f"{draft.idempotency_key} was {status}, expected {expected}"
            )

    def check_deletions_are_reported(self) -> None:
        """A connector that declares ``deletions`` reports nothing deleted when it
        re-reads an unchanged source, and a tombstone for a record removed from it."""
        connector = self.make_connector()
        if not connector.deletions:
            return
        assert self.deletions is not None, (
            f"{connector.type} declares deletions; give the kit a DeletionScenario"
        )
        scenario = self.deletions()
        store = SimulatedIngest()

        def read_deleted() -> set[str]:
            before = store.deleted
            reader = scenario.read()
            store.sync(reader, reader.fetch(scenario.window, None))
            return store.deleted - before

        assert read_deleted() == set()
        assert store.stored, f"{connector.type}: the scenario's source holds no records"
        falsely = read_deleted()
        assert not falsely, f"{connector.type}: an unchanged re-read reported {falsely} deleted"
        removed = scenario.remove()
        assert removed in store.stored, f"{connector.type}: {removed!r} was never read"
        deleted = read_deleted()
        assert removed in deleted, (
            f"{connector.type}: {removed!r} was removed at the source but no deletion "
            f"was reported (reported: {sorted(deleted)})"
        )


class ConnectorConformanceSuite(Generic[RecordT]):
    """A pytest mixin: subclass as ``TestMyConnectorConformance`` and implement
    :meth:`make_connector`, :meth:`recorded_records` and (optionally)
    :meth:`edited_records`; each check becomes its own test."""

    def make_connector(self) -> Connector[Any, RecordT]:
        raise NotImplementedError

    def recorded_records(self) -> Sequence[RecordT]:
        raise NotImplementedError

    def edited_records(self) -> Sequence[RecordT]:
        return ()

    def deletion_scenario(self) -> DeletionScenario:
        """Required when the connector declares ``deletions``."""
        raise NotImplementedError

    def _kit(self) -> ConnectorConformance[RecordT]:
        return ConnectorConformance(
            self.make_connector,
            self.recorded_records(),
            self.edited_records(),
            self.deletion_scenario,
        )

    def test_declares_type_policy_and_rationale(self) -> None:
        self._kit().check_declaration()

    def test_keys_are_deterministic(self) -> None:
        self._kit().check_keys_are_deterministic()

    def test_distinct_records_have_distinct_keys(self) -> None:
        self._kit().check_distinct_records_have_distinct_keys()

    def test_episodes_are_well_formed(self) -> None:
        self._kit().check_episodes_are_well_formed()

    def test_resync_creates_nothing(self) -> None:
        self._kit().check_resync_creates_nothing()

    def test_edits_follow_the_key_policy(self) -> None:
        self._kit().check_edits_follow_the_key_policy()

    def test_deletions_are_reported_and_nothing_else(self) -> None:
        self._kit().check_deletions_are_reported()
