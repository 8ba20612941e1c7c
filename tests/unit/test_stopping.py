"""Waits that a stop request cuts short: the real stop event and its fake."""

from __future__ import annotations

import math
import threading
from datetime import UTC, datetime, timedelta

import pytest

from memsync.clock import FakeClock
from memsync.stopping import FakeSleeper, StopEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_wait_nobody_stops_runs_out_and_says_so() -> None:
    assert StopEvent().wait(0) is False
    assert StopEvent().wait(-1) is False  # a wait already past is no wait


def test_a_wait_in_progress_returns_as_soon_as_a_stop_is_requested() -> None:
    stop = StopEvent()
    outcome: list[bool] = []
    waiting = threading.Thread(target=lambda: outcome.append(stop.wait(math.inf)))
    waiting.start()

    stop.request_stop()
    waiting.join(timeout=30)

    assert not waiting.is_alive()
    assert outcome == [True]


def test_after_a_stop_every_wait_returns_at_once_and_the_stop_stays() -> None:
    stop = StopEvent()
    stop.request_stop()
    stop.request_stop()  # a second signal changes nothing

    assert stop.stop_requested
    assert stop.wait(math.inf) is True
    assert stop.wait(3600) is True


def test_the_fake_records_each_wait_and_moves_its_clock_by_it() -> None:
    sleeper = FakeSleeper(FakeClock(T0))

    assert sleeper.wait(60) is False
    assert sleeper.wait(1.5) is False

    assert sleeper.waits == [60, 1.5]
    assert sleeper.clock.now() == T0 + timedelta(seconds=61.5)
    assert not sleeper.stop_requested


def test_the_fake_stops_during_the_wait_it_was_told_to_and_the_clock_stays() -> None:
    sleeper = FakeSleeper(FakeClock(T0), stop_during_wait=2)

    assert sleeper.wait(10) is False
    assert sleeper.wait(60) is True
    assert sleeper.wait(5) is True

    assert sleeper.stop_requested
    assert sleeper.waits == [10, 60, 5]
    assert sleeper.clock.now() == T0 + timedelta(seconds=10)


def test_the_fake_stopped_from_outside_waits_no_more() -> None:
    sleeper = FakeSleeper(FakeClock(T0))
    sleeper.request_stop()

    assert sleeper.wait(math.inf) is True
    assert sleeper.clock.now() == T0


def test_the_fake_refuses_waits_beyond_its_allowance() -> None:
    sleeper = FakeSleeper(max_waits=1)
    sleeper.wait(1)

    with pytest.raises(AssertionError, match="unexpected wait of 2s"):
        sleeper.wait(2)


def test_the_fake_refuses_to_wait_forever_for_a_stop_that_never_comes() -> None:
    with pytest.raises(AssertionError, match="forever"):
        FakeSleeper().wait(math.inf)
