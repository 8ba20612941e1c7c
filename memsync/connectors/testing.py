"""A conformance kit every connector author runs against recorded records.

Connectors cannot touch storage, so the kit simulates ingest with the real decision
function, :func:`memsync.episode.classify`, over ``key -> (subject, content hash)``.
Use it directly::

    ConnectorConformance(lambda: MyConnector(config), records, edited).check_all()

or subclass :class:`ConnectorConformanceSuite` in a pytest module (name the subclass
``Test…`` so pytest collects it) and implement its three methods.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic

from memsync.connectors.base import Connector, KeyPolicy, RecordT, validate_connector_class
from memsync.episode import EpisodeDraft, IngestStatus, classify

__all__ = ["ConnectorConformance", "ConnectorConformanceSuite", "SimulatedIngest"]


class SimulatedIngest:
    """An in-memory stand-in for ingest: remembers the subject and hash stored per key.

    Repeats: a draft whose hash is already stored under its subject is a duplicate and
    changes nothing. Conflicts: a known key with a new hash, or under another subject,
    is a revision and replaces what is stored.
    """

    def __init__(self) -> None:
        self.stored: dict[str, tuple[str, str]] = {}

    def ingest(self, draft: EpisodeDraft) -> IngestStatus:
        """Classify ``draft`` against what is stored, then store it."""
        if draft.idempotency_key is None:
            raise AssertionError("connector drafts must always carry an idempotency key")
        before = self.stored.get(draft.idempotency_key)
        status = (
            classify(None, draft.content_hash)
            if before is None
            else classify(before[1], draft.content_hash, moved=before[0] != draft.subject_id)
        )
        self.stored[draft.idempotency_key] = (draft.subject_id, draft.content_hash)
        return status

    def ingest_all(self, drafts: Sequence[EpisodeDraft]) -> list[IngestStatus]:
        return [self.ingest(draft) for draft in drafts]


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
    ) -> None:
        if not records:
            raise ValueError("the conformance kit needs at least one recorded record")
        self.make_connector = make_connector
        self.records = list(records)
        self.edited = list(edited)

    def check_all(self) -> None:
        """Run every check."""
        self.check_declaration()
        self.check_keys_are_deterministic()
        self.check_distinct_records_have_distinct_keys()
        self.check_episodes_are_well_formed()
        self.check_resync_creates_nothing()
        self.check_edits_follow_the_key_policy()

    def check_declaration(self) -> None:
        """Class attributes are present; the rationale is not empty."""
        connector = self.make_connector()
        validate_connector_class(type(connector))
        assert connector.key_rationale.strip(), f"{connector.type}: empty key_rationale"

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

    def _kit(self) -> ConnectorConformance[RecordT]:
        return ConnectorConformance(
            self.make_connector, self.recorded_records(), self.edited_records()
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
