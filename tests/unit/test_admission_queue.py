"""AdmissionQueue: the places of an API process and its two lanes of waiting requests.

The property test drives random arrivals (prioritized or not), finishes and
cancellations of waiting requests against a real queue on an event loop, one step at a
time (each step settles with ``wait_all_tasks_blocked``, nothing sleeps), and holds every
admission to the policy: no more than ``places`` inside, no place idle while a request
waits, each lane in arrival order, a prioritized request first unless the oldest other
arrived before it and was passed over ``overtake_limit`` times already, and never more.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.runtime.app.api.admission import AdmissionQueue


@dataclass(eq=False)
class Request:
    arrival: int
    prioritized: bool
    state: str = "waiting"  # waiting, inside, done, cancelled
    release: anyio.Event = field(default_factory=anyio.Event)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    overtaken: int = 0  # by prioritized requests let in while it was its lane's oldest


class Harness:
    """A queue, the requests sent to it, and the bookkeeping the policy is checked on."""

    def __init__(self, places: int, overtake_limit: int) -> None:
        self.places = places
        self.overtake_limit = overtake_limit
        self.queue = AdmissionQueue(places, overtake_limit)
        self.requests: list[Request] = []
        self.admitted: list[Request] = []

    def waiting(self, *, prioritized: bool) -> list[Request]:
        return [
            request
            for request in self.requests
            if request.state == "waiting" and request.prioritized is prioritized
        ]

    def inside(self) -> list[Request]:
        return [request for request in self.requests if request.state == "inside"]

    async def send(self, request: Request) -> None:
        with request.scope:
            await self.queue.take(prioritized=request.prioritized)
            self.check_admission(request)
            request.state = "inside"
            self.admitted.append(request)
            try:
                await request.release.wait()
            finally:
                request.state = "done"
                self.queue.give_back()
        if request.state == "waiting":
            request.state = "cancelled"

    def check_admission(self, request: Request) -> None:
        prioritized = self.waiting(prioritized=True)
        others = self.waiting(prioritized=False)
        lane = prioritized if request.prioritized else others
        assert request is lane[0], "each lane is let in in arrival order"
        oldest_other = others[0] if others else None
        if request.prioritized:
            if oldest_other is not None and oldest_other.arrival < request.arrival:
                assert oldest_other.overtaken < self.overtake_limit
                oldest_other.overtaken += 1
        elif prioritized:
            # An other request goes ahead of a waiting prioritized one only when its
            # turn has come: it arrived first and was passed over as often as allowed.
            assert request.arrival < prioritized[0].arrival
            assert request.overtaken == self.overtake_limit

    def check_places(self) -> None:
        waiting = len(self.waiting(prioritized=True)) + len(self.waiting(prioritized=False))
        assert self.queue.waiting == waiting
        assert len(self.inside()) <= self.places
        if waiting:
            assert len(self.inside()) == self.places, "a place is idle while a request waits"


steps = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.integers(min_value=0, max_value=1)),
        st.tuples(st.just("finish"), st.integers(min_value=0, max_value=63)),
        st.tuples(st.just("cancel"), st.integers(min_value=0, max_value=63)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    places=st.integers(min_value=1, max_value=4),
    overtake_limit=st.integers(min_value=0, max_value=3),
    steps=steps,
)
def test_every_admission_follows_the_lanes_policy(
    places: int, overtake_limit: int, steps: list[tuple[str, int]]
) -> None:
    """``arrive`` sends a request (1: prioritized); ``finish`` and ``cancel`` pick one
    inside, or one waiting, by the number drawn."""
    harness = Harness(places, overtake_limit)

    async def scenario() -> None:
        async with anyio.create_task_group() as tasks:
            for action, argument in steps:
                if action == "arrive":
                    request = Request(len(harness.requests), prioritized=bool(argument))
                    harness.requests.append(request)
                    tasks.start_soon(harness.send, request)
                else:
                    if action == "finish":
                        pool = harness.inside()
                    else:
                        pool = harness.waiting(prioritized=True)
                        pool += harness.waiting(prioritized=False)
                    if pool:
                        chosen = pool[argument % len(pool)]
                        if action == "finish":
                            chosen.release.set()
                        else:
                            chosen.scope.cancel()
                await anyio.wait_all_tasks_blocked()
                harness.check_places()
            for request in harness.requests:
                request.release.set()  # the rest finish, the waiting in turn
                await anyio.wait_all_tasks_blocked()
                harness.check_places()

    anyio.run(scenario)
    assert all(request.state in {"done", "cancelled"} for request in harness.requests)


def test_with_no_overtakes_allowed_everyone_enters_in_arrival_order() -> None:
    harness = Harness(places=1, overtake_limit=0)

    async def scenario() -> None:
        async with anyio.create_task_group() as tasks:
            for prioritized in [False, False, True, False, True, True]:
                request = Request(len(harness.requests), prioritized)
                harness.requests.append(request)
                tasks.start_soon(harness.send, request)
                await anyio.wait_all_tasks_blocked()
            for request in harness.requests:
                request.release.set()
                await anyio.wait_all_tasks_blocked()

    anyio.run(scenario)
    assert [request.arrival for request in harness.admitted] == list(range(6))


def test_prioritized_requests_go_first_until_the_oldest_other_has_waited_its_turns() -> None:
    harness = Harness(places=1, overtake_limit=2)

    async def scenario() -> None:
        async with anyio.create_task_group() as tasks:
            # One inside, then two others waiting, then four prioritized.
            for prioritized in [False, False, False, True, True, True, True]:
                request = Request(len(harness.requests), prioritized)
                harness.requests.append(request)
                tasks.start_soon(harness.send, request)
                await anyio.wait_all_tasks_blocked()
            while harness.inside():
                harness.inside()[0].release.set()
                await anyio.wait_all_tasks_blocked()

    anyio.run(scenario)
    # 1 and 2 are passed over twice each, at most; 3-6 are prioritized.
    assert [request.arrival for request in harness.admitted] == [0, 3, 4, 1, 5, 6, 2]


@pytest.mark.parametrize("prioritized", [True, False])
def test_a_waiter_cancelled_as_its_place_is_handed_over_hands_it_on(prioritized: bool) -> None:
    """asyncio's ``Task.cancel`` throws into a task whose wait has just ended (anyio's
    cancel scopes wait for its next checkpoint instead): the place it was handed must
    go on to the next waiter, not be lost."""
    queue = AdmissionQueue(places=1, overtake_limit=1)
    entered: list[str] = []

    async def wait_then_enter(name: str) -> None:
        await queue.take(prioritized=prioritized)
        entered.append(name)
        queue.give_back()

    async def scenario() -> None:
        await queue.take(prioritized=False)  # the one place, held here
        first = asyncio.create_task(wait_then_enter("first"))
        await anyio.wait_all_tasks_blocked()
        second = asyncio.create_task(wait_then_enter("second"))
        await anyio.wait_all_tasks_blocked()
        queue.give_back()  # to the first waiter, cancelled before it can run
        first.cancel()
        with anyio.fail_after(5):
            await asyncio.gather(first, second, return_exceptions=True)
            assert queue.waiting == 0
            await queue.take(prioritized=False)  # the place is free again

    asyncio.run(scenario())
    assert entered == ["second"]
