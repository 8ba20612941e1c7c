from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.connectors import Deletion, Listing, Tombstone, Window
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.connectors.testing import (
    ConnectorConformance,
    ConnectorConformanceSuite,
    DeletionScenario,
)

T0 = datetime(2024, 5, 1, tzinfo=UTC)
RECORDS = [FakeRecord(id=f"r{i}", updated_at=T0 + timedelta(minutes=i)) for i in range(4)]


WINDOW = Window(start=None, end=T0 + timedelta(days=1))


def _connector(records: Sequence[FakeRecord] = RECORDS, **config: object) -> FakeConnector:
    return FakeConnector(FakeConfig(name="demo", subject="team:{id}", **config), records)


def _scenario(
    records: Sequence[FakeRecord] = RECORDS, connector: FakeConnector | None = None
) -> DeletionScenario:
    source = connector or _connector(records)
    removed = records[len(records) // 2]

    def remove() -> str:
        source.delete(removed.id, at=T0 + timedelta(hours=2))
        return source.idempotency_key(removed)

    return DeletionScenario(read=lambda: source, remove=remove, window=WINDOW)


class TestFakeConformance(ConnectorConformanceSuite[FakeRecord]):
    def make_connector(self) -> FakeConnector:
        return _connector()

    def recorded_records(self) -> Sequence[FakeRecord]:
        return RECORDS

    def edited_records(self) -> Sequence[FakeRecord]:
        return [FakeRecord(id="r1", updated_at=T0 + timedelta(hours=1), body="edited")]

    def deletion_scenario(self) -> DeletionScenario:
        return _scenario()


def test_a_deleted_record_is_reported_while_its_deletion_is_in_the_window() -> None:
    connector = _connector()
    connector.delete("r1", at=T0 + timedelta(hours=2))

    inside = list(connector.fetch(WINDOW, None))
    later = list(connector.fetch(Window(start=T0 + timedelta(hours=3), end=WINDOW.end), None))

    assert inside[-1] == Tombstone("fake:demo:record:r1")
    assert [item.id for item in inside[:-1] if isinstance(item, FakeRecord)] == ["r0", "r2", "r3"]
    assert later == []


def test_listing_windows_lists_every_record_of_the_window() -> None:
    *_, listing = _connector(list_windows=True).fetch(WINDOW, None)

    assert isinstance(listing, Listing)
    assert listing.present == {f"fake:demo:record:r{i}" for i in range(4)}
    assert listing.gone("fake:demo:record:r9")
    assert (listing.scope.prefix, listing.scope.occurred_to) == ("fake:demo:record:", WINDOW.end)


def _deletion_kit(connector_class: type[FakeConnector]) -> ConnectorConformance[FakeRecord]:
    source = connector_class(FakeConfig(name="demo", subject="team:{id}"), RECORDS)
    return ConnectorConformance(_connector, RECORDS, deletions=lambda: _scenario(connector=source))


def test_conformance_kit_catches_a_connector_that_declares_deletions_but_misses_them() -> None:
    class Forgetful(FakeConnector):
        def fetch(self, window: Window, cursor: object) -> Iterator[FakeRecord | Deletion]:
            return (item for item in super().fetch(window, None) if isinstance(item, FakeRecord))

    with pytest.raises(AssertionError, match="no deletion was reported"):
        _deletion_kit(Forgetful).check_deletions_are_reported()


def test_conformance_kit_catches_a_connector_that_reports_deletions_that_did_not_happen() -> None:
    class Alarmist(FakeConnector):
        def fetch(self, window: Window, cursor: object) -> Iterator[FakeRecord | Deletion]:
            yield from super().fetch(window, None)
            if len(self.fetches) > 1:
                yield Tombstone("fake:demo:record:r0")

    with pytest.raises(AssertionError, match="unchanged re-read reported"):
        _deletion_kit(Alarmist).check_deletions_are_reported()


def test_conformance_kit_catches_a_connector_whose_keys_collide() -> None:
    class CollidingConnector(FakeConnector):
        def idempotency_key(self, record: FakeRecord) -> str:
            return "fake:demo:record"

    kit = ConnectorConformance(
        lambda: CollidingConnector(FakeConfig(name="demo", subject="s")), RECORDS
    )
    with pytest.raises(AssertionError, match="share the key"):
        kit.check_all()


def test_conformance_kit_catches_keys_built_from_content_under_identity() -> None:
    class ContentKeyedConnector(FakeConnector):
        def idempotency_key(self, record: FakeRecord) -> str:
            return f"fake:demo:{record.id}:{record.body}"

    kit = ConnectorConformance(
        lambda: ContentKeyedConnector(FakeConfig(name="demo", subject="s")),
        RECORDS,
        [FakeRecord(id="r1", updated_at=T0, body="edited")],
    )
    with pytest.raises(AssertionError, match="was created, expected revised"):
        kit.check_edits_follow_the_key_policy()


@given(st.lists(st.text(min_size=1, max_size=12), unique=True, min_size=1, max_size=20))
def test_distinct_ids_give_distinct_stable_keys(ids: list[str]) -> None:
    records = [FakeRecord(id=i, updated_at=T0) for i in ids]
    ConnectorConformance(
        lambda: _connector(records), records, deletions=lambda: _scenario(records)
    ).check_all()
