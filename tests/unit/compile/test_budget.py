"""RequestBudget: pacing, the sliding 60-second window of tokens, and concurrency."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.compile.budget import WINDOW_SECONDS, RequestBudget


class FakeTime:
    """A monotonic clock that moves only when the budget waits (no real sleeping)."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds


def most_in_any_window(starts: list[float], weights: list[int]) -> int:
    """The largest sum of ``weights`` of starts within one half-open 60-second window."""
    return max(
        sum(w for s, w in zip(starts, weights, strict=True) if first <= s < first + WINDOW_SECONDS)
        for first in starts
    )


@settings(max_examples=60, deadline=None)
@given(
    requests_per_minute=st.integers(1, 50),
    tokens_per_minute=st.integers(100, 5_000),
    tokens=st.lists(st.integers(0, 6_000), min_size=1, max_size=80),
    idle=st.lists(st.floats(0, 90), min_size=1, max_size=80),
)
def test_no_window_of_60_seconds_holds_more_than_the_limits(
    requests_per_minute: int, tokens_per_minute: int, tokens: list[int], idle: list[float]
) -> None:
    time = FakeTime()
    budget = RequestBudget(
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        clock=time.clock,
        wait=time.wait,
    )
    starts: list[float] = []
    for number, estimate in enumerate(tokens):
        time.now += idle[number % len(idle)]
        with budget.slot(estimate):
            starts.append(time.now)
    assert most_in_any_window(starts, [1] * len(starts)) <= requests_per_minute
    # A request larger than the whole budget is let out alone, in an empty window.
    fitting = [min(estimate, tokens_per_minute) for estimate in tokens]
    assert most_in_any_window(starts, fitting) <= tokens_per_minute


def test_requests_are_paced_evenly_not_let_out_a_minute_at_once() -> None:
    time = FakeTime()
    budget = RequestBudget(requests_per_minute=6, clock=time.clock, wait=time.wait)
    starts = []
    for _ in range(4):
        with budget.slot(0):
            starts.append(time.now)
    assert starts == [0.0, 10.0, 20.0, 30.0]


def test_a_settled_request_counts_for_what_the_model_reported() -> None:
    time = FakeTime()
    budget = RequestBudget(tokens_per_minute=1_000, clock=time.clock, wait=time.wait)
    with budget.slot(100) as first:
        pass
    budget.settle(first, 900)  # the model reported more than estimated
    with budget.slot(200):
        started = time.now
    assert started == WINDOW_SECONDS  # waited for the first to leave the window


def test_no_more_requests_in_flight_than_the_concurrency() -> None:
    budget = RequestBudget(max_concurrency=3)
    inside, most = 0, 0
    lock, release = threading.Lock(), threading.Event()
    entered = threading.Semaphore(0)

    def request() -> None:
        nonlocal inside, most
        with budget.slot(0):
            with lock:
                inside += 1
                most = max(most, inside)
            entered.release()
            release.wait(timeout=30)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=request) for _ in range(8)]
    for thread in threads:
        thread.start()
    for _ in range(3):
        assert entered.acquire(timeout=30)
    release.set()
    for thread in threads:
        thread.join(timeout=30)
    assert most == 3
