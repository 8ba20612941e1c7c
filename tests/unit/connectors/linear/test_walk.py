"""WindowWalk: the sub-windows the Linear connector asks for, against a simulated list
that answers newest first, as Linear's ``orderBy: updatedAt`` does."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.connectors.linear.walk import SubWindow, WindowWalk

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RANGE = 1_000_000  # seconds


@dataclass
class Walked:
    """What a walk handed out, in order, and what it cost."""

    handed: list[tuple[int, datetime]] = field(default_factory=list)  # (record, position)
    requests: int = 0
    pending_at_handout: list[tuple[datetime, list[datetime]]] = field(default_factory=list)


def walk(times: list[datetime], page_size: int, start: datetime, end: datetime) -> Walked:
    """Drive a walk over ``times`` as the connector does: one newest-first page per
    sub-window, paging on only when the walk cannot narrow."""
    result = Walked()
    walker = WindowWalk.over(start, end, page_size)
    while not walker.done:
        assert result.requests < 20 * (len(times) // page_size + 1) + 200, "the walk never ends"
        position = walker.position
        asked = walker.next()
        matching = sorted(
            (
                (moment, index)
                for index, moment in enumerate(times)
                if asked.start <= moment <= asked.end
            ),
            reverse=True,
        )
        result.requests += 1
        page, more = matching[:page_size], len(matching) > page_size

        def hand_out(records: list[tuple[datetime, int]], position: datetime = position) -> None:
            done = {index for index, _ in result.handed} | {index for _, index in records}
            pending = [moment for index, moment in enumerate(times) if index not in done]
            result.pending_at_handout.append((position, pending))
            result.handed.extend((index, position) for _, index in records)

        hand_out(page)
        if not more:
            walker.read_to_end(len(page))
            continue
        if walker.page_overflowed(page[-1][0]):
            continue
        rest = matching[page_size:]
        result.requests += len(rest) // page_size + 1
        hand_out(rest)
        walker.read_to_end(page_size)
    return result


moments = st.lists(st.integers(min_value=0, max_value=RANGE), max_size=60).map(
    lambda seconds: [T0 + timedelta(seconds=s) for s in seconds]
)


@settings(max_examples=200, deadline=None)
@given(times=moments, page_size=st.integers(min_value=1, max_value=8))
def test_every_record_is_handed_out_and_none_is_passed_by_the_position(
    times: list[datetime], page_size: int
) -> None:
    walked = walk(times, page_size, T0, T0 + timedelta(seconds=RANGE))

    assert {index for index, _ in walked.handed} == set(range(len(times)))
    positions = [position for _, position in walked.handed]
    assert positions == sorted(positions)
    # When anything was handed out at a position, nothing still to come lay before it:
    # a run stopped there resumes from the position and misses nothing.
    for position, pending in walked.pending_at_handout:
        assert all(moment >= position for moment in pending)


@settings(max_examples=100, deadline=None)
@given(
    many=st.integers(min_value=1, max_value=30),
    page_size=st.integers(min_value=1, max_value=5),
)
def test_an_instant_holding_more_than_a_page_is_paged_through(many: int, page_size: int) -> None:
    instant = T0 + timedelta(seconds=500)
    walked = walk([instant] * many, page_size, T0, T0 + timedelta(seconds=RANGE))
    assert {index for index, _ in walked.handed} == set(range(many))


def test_a_window_that_fits_one_page_costs_one_request() -> None:
    times = [T0 + timedelta(minutes=minute) for minute in range(5)]
    walked = walk(times, 5, T0, T0 + timedelta(hours=1))
    assert walked.requests == 1
    assert {position for _, position in walked.handed} == {T0}


def test_a_full_page_narrows_to_the_bottom_of_the_window_and_the_position_moves_up() -> None:
    walker = WindowWalk.over(T0, T0 + timedelta(days=10), page_size=2)
    assert walker.next() == SubWindow(T0, T0 + timedelta(days=10))
    # The page held the two newest, from day 8 on: day 8 to 10 is read.
    assert walker.page_overflowed(T0 + timedelta(days=8))
    assert walker.next() == SubWindow(T0, T0 + timedelta(days=2))
    walker.read_to_end(2)
    assert walker.position == T0 + timedelta(days=2)
    assert walker.next() == SubWindow(T0 + timedelta(days=2), T0 + timedelta(days=4))
