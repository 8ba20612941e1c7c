"""The push-gap rule as a pure function: when re-reads finding new records mean the
connector's webhook looks broken."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.runtime.sync.webhook_deliveries import PushGap, ReadsSince, push_gap

DELIVERED = datetime(2026, 3, 1, 9, tzinfo=UTC)
HOUR = timedelta(hours=1)


def gap_at(
    clock: FakeClock, reads: ReadsSince | None, delivered: datetime | None = DELIVERED
) -> PushGap | None:
    return push_gap(delivered, reads, now=clock.now(), after=HOUR)


def test_no_re_read_found_anything_since_the_last_delivery_is_no_gap_however_long() -> None:
    clock = FakeClock(DELIVERED)
    clock.advance(timedelta(days=30))  # a quiet source: nothing pushed, nothing found

    assert gap_at(clock, None) is None
    assert gap_at(clock, ReadsSince(0, 0, DELIVERED)) is None


def test_a_find_is_a_gap_once_it_is_push_gap_after_old() -> None:
    found = ReadsSince(runs=1, new_records=3, first_at=DELIVERED + timedelta(minutes=15))
    clock = FakeClock(found.first_at)

    clock.advance(HOUR - timedelta(seconds=1))
    assert gap_at(clock, found) is None  # its delivery may still come
    clock.advance(timedelta(seconds=1))
    assert gap_at(clock, found) == PushGap(DELIVERED, found.first_at, 1, 3)


def test_the_last_delivery_being_old_is_not_enough_the_find_must_be() -> None:
    # Quiet for a day, then a record found a minute ago: its delivery may be slow.
    clock = FakeClock(DELIVERED + timedelta(days=1))
    found = ReadsSince(runs=1, new_records=1, first_at=clock.now() - timedelta(minutes=1))

    assert gap_at(clock, found) is None


def test_a_connector_no_delivery_ever_reached_is_flagged_the_same_way() -> None:
    found = ReadsSince(runs=4, new_records=9, first_at=DELIVERED)
    clock = FakeClock(DELIVERED + 2 * HOUR)

    assert gap_at(clock, found, delivered=None) == PushGap(None, DELIVERED, 4, 9)


@given(
    first=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
    elapsed=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3)),
    after=st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=1)),
)
def test_flagged_exactly_when_the_first_find_is_at_least_after_old(
    first: timedelta, elapsed: timedelta, after: timedelta
) -> None:
    found = ReadsSince(runs=1, new_records=1, first_at=DELIVERED + first)
    now = found.first_at + elapsed

    flagged = push_gap(DELIVERED, found, now=now, after=after) is not None

    assert flagged == (elapsed >= after)
