"""The one check every given time passes (memsync.timerange): the ranges and messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.connectors import Cursor
from memsync.runtime.sync.policy import unusable_start
from memsync.schedule import parse_schedule
from memsync.timerange import (
    MAX_BACKFILL_SLICES,
    SOURCE_FLOOR,
    TimeOutOfRange,
    check_backfill,
    check_source_time,
    parse_time,
)

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("9999-12-31T23:59:59-14:00", "outside the years 1 to 9999 in UTC"),
        ("0001-01-01T00:00:00+14:00", "outside the years 1 to 9999 in UTC"),
        ("0001-01-01T00:00:00Z", "is before 1990-01-01T00:00:00+00:00"),
        ("1989-12-31T23:59:59Z", "is before 1990-01-01T00:00:00+00:00"),
        ("2100-01-01", "is in the future (now is 2026-03-01T12:00:00+00:00)"),
    ],
)
def test_a_checkpoint_outside_the_floor_and_now_is_refused_naming_field_and_range(
    text: str, says: str
) -> None:
    with pytest.raises(TimeOutOfRange) as refused:
        check_source_time("to", parse_time(text, "to"), now=NOW)
    assert str(refused.value).startswith("to ")
    assert says in str(refused.value)
    assert refused.value.field == "to"


def test_the_floor_and_now_themselves_are_accepted_unclamped() -> None:
    assert check_source_time("to", SOURCE_FLOOR, now=NOW) == SOURCE_FLOOR
    assert check_source_time("to", NOW, now=NOW) == NOW


def test_a_backfill_that_would_plan_too_many_slices_is_refused_before_planning() -> None:
    with pytest.raises(TimeOutOfRange, match="give a longer --slice"):
        check_backfill(SOURCE_FLOOR, None, timedelta(hours=1), now=NOW)
    since, until = check_backfill(SOURCE_FLOOR, None, timedelta(days=1), now=NOW)
    assert (since, until) == (SOURCE_FLOOR, None)
    assert (NOW - SOURCE_FLOOR) / timedelta(days=1) < MAX_BACKFILL_SLICES


def test_a_backfill_ending_in_the_future_or_empty_is_refused_not_clamped() -> None:
    with pytest.raises(TimeOutOfRange, match=r"--until .* is in the future"):
        check_backfill(SOURCE_FLOOR, NOW + timedelta(days=1), timedelta(days=1), now=NOW)
    with pytest.raises(TimeOutOfRange, match="is not before the end"):
        check_backfill(NOW, None, timedelta(days=1), now=NOW)


def test_a_stored_checkpoint_before_the_floor_or_a_future_start_is_one_line_reason() -> None:
    ancient = {"records": Cursor(position=datetime(1, 1, 1, tzinfo=UTC))}
    reason = unusable_start(ancient, None, timedelta(hours=2), NOW)
    assert reason is not None
    assert "\n" not in reason
    assert "checkpoint of stream 'records'" in reason
    assert "state reset" in reason
    assert unusable_start({"records": None}, NOW + timedelta(days=1), timedelta(0), NOW)
    # A checkpoint ahead of now (a clock that ran ahead) is clamped by the window.
    ahead = {"records": Cursor(position=NOW + timedelta(hours=1))}
    assert unusable_start(ahead, None, timedelta(hours=2), NOW) is None


@given(st.integers(min_value=1, max_value=10**12))
def test_an_interval_schedule_is_refused_or_fires_without_overflow(seconds: int) -> None:
    if seconds > 366 * 86_400:
        with pytest.raises(ValueError, match="at most 366 days"):
            parse_schedule(f"every {seconds}s")
        return
    spec = parse_schedule(f"every {seconds}s")
    assert spec.trigger().get_next_fire_time(None, NOW) is not None


def test_one_slice_may_cover_the_whole_range_but_not_leave_the_calendar() -> None:
    assert check_backfill(SOURCE_FLOOR, None, timedelta(days=3650), now=NOW) == (
        SOURCE_FLOOR,
        None,
    )
    with pytest.raises(TimeOutOfRange, match="--slice must be longer than 0s and at most"):
        check_backfill(SOURCE_FLOOR, None, timedelta(days=10**6), now=NOW)
