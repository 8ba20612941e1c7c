from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.connectors import DEFAULT_STREAM, Cursor, SkipRecord, Stream, Window
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def test_window_refuses_naive_and_reversed_bounds() -> None:
    with pytest.raises(ValueError, match="aware"):
        Window(start=None, end=datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="after end"):
        Window(start=T0, end=T0 - timedelta(seconds=1))


def test_window_contains_both_ends() -> None:
    window = Window(start=T0, end=T0 + timedelta(hours=1))
    assert window.contains(T0)
    assert window.contains(T0 + timedelta(hours=1))
    assert not window.contains(T0 - timedelta(seconds=1))


@given(
    st.datetimes(timezones=st.just(UTC)),
    st.none() | st.text(max_size=20),
)
def test_cursor_survives_json_round_trip(position: datetime, token: str | None) -> None:
    cursor = Cursor(position=position, token=token)
    assert Cursor.from_json(cursor.to_json()) == cursor


def test_cursor_never_moves_backwards() -> None:
    cursor = Cursor(position=T0, token="t")
    assert cursor.advanced_to(T0 - timedelta(days=1)) is cursor
    assert cursor.advanced_to(T0 + timedelta(days=1)).position == T0 + timedelta(days=1)


def test_cursor_from_json_refuses_other_shapes() -> None:
    with pytest.raises(ValueError, match="not a stored cursor"):
        Cursor.from_json({"position": 3})


def _fake(subject: str = "group:{group}") -> FakeConnector:
    return FakeConnector(FakeConfig(name="demo", subject=subject))


def test_to_episode_maps_hooks_into_a_draft() -> None:
    record = FakeRecord(id="r1", updated_at=T0, body="hello", fields={"group": "g1"})
    draft = _fake().to_episode(record)
    assert draft.subject_id == "group:g1"
    assert draft.idempotency_key == "fake:demo:record:r1"
    assert draft.source == "fake"
    assert draft.type == "fake.record"
    assert draft.occurred_at == T0
    assert draft.payload == {"id": "r1", "body": "hello"}
    assert draft.provenance == {"connector": "demo", "connector_type": "fake"}


def test_record_with_an_empty_subject_field_is_skipped_with_the_reason() -> None:
    record = FakeRecord(id="r1", updated_at=T0, fields={"group": None})
    with pytest.raises(SkipRecord, match="needs field 'group', which is empty"):
        _fake().to_episode(record)


def test_a_connector_that_declares_no_streams_reads_one_ordered_as_it_says() -> None:
    class Unordered(FakeConnector):
        ordered_by_cursor = False

    config = FakeConfig(name="f", subject="s")
    assert list(FakeConnector(config).streams()) == [Stream(DEFAULT_STREAM, ordered=True)]
    assert list(Unordered(config).streams()) == [Stream(DEFAULT_STREAM, ordered=False)]


@pytest.mark.parametrize("name", ["", " a", "*", "x" * 256])
def test_a_stream_name_is_plain_text_of_bounded_length_and_never_the_star(name: str) -> None:
    with pytest.raises(ValueError, match="stream name"):
        Stream(name)
