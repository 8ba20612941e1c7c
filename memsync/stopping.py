"""Stopping: waits that a stop request cuts short.

Work that waits (a connector's retry wait after a rate limit, a worker's idle poll,
the scheduler's loop) waits through one narrow interface, :class:`Sleeper`, handed in
from the composition root. A process stopping on SIGTERM or SIGINT requests a stop on
its :class:`StopEvent`: every wait in progress returns at once, and work that cannot
go on without waiting raises :class:`StopRequested`, which the sync runner records
(the run is ``partial``) and a worker answers by giving its job back to the queue.

:class:`FakeSleeper` ships beside the real one, as httpx ships ``MockTransport``
beside its transports: it waits for no real time, records every wait, moves a
:class:`~memsync.clock.FakeClock` by it and can be told to stop during a given wait.
"""

from __future__ import annotations

import math
import threading
from datetime import timedelta
from typing import Protocol

from memsync.clock import FakeClock

__all__ = ["FakeSleeper", "Sleeper", "StopEvent", "StopRequested"]


class StopRequested(Exception):
    """Work stopped because its process asked it to (SIGTERM, SIGINT), not because it
    failed: what was committed stays, and the rest is for whoever runs it next."""


class Sleeper(Protocol):
    """Waits that end early when a stop is requested."""

    @property
    def stop_requested(self) -> bool:
        """Whether a stop was requested. Once true, it stays true."""
        ...

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` (``math.inf``: until a stop); return True when a stop
        was requested, at once if it already was, False when the time passed without
        one. Repeats: each call waits anew; after a stop every call returns True at
        once."""
        ...


class StopEvent:
    """The real :class:`Sleeper`: a ``threading.Event`` that :meth:`request_stop` sets.

    One per process (the composition root owns it); any thread may wait on it, and a
    signal handler may request the stop.
    """

    def __init__(self) -> None:
        self._event = threading.Event()

    def request_stop(self) -> None:
        """Wake every wait in progress and cut every later one short. Repeats: harmless."""
        self._event.set()

    @property
    def stop_requested(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        # threading.Event cannot wait for an infinite timeout, only without one.
        return self._event.wait(None if math.isinf(seconds) else max(seconds, 0.0))


class FakeSleeper:
    """A :class:`Sleeper` that takes no time, for tests.

    Every wait asked for is appended to :attr:`waits`. A wait that completes moves
    ``clock`` forward by its length, as real time would. ``stop_during_wait`` *n*
    requests a stop during the *n*-th wait (1-based): that wait returns True at once
    and the clock does not move. :meth:`request_stop` stops it from outside.
    ``max_waits``: a wait beyond that many raises ``AssertionError`` (0: work that must
    never wait, such as a benchmark that would measure a rate limit unawares).
    """

    def __init__(
        self,
        clock: FakeClock | None = None,
        *,
        stop_during_wait: int | None = None,
        max_waits: int | None = None,
    ) -> None:
        self.clock = clock or FakeClock()
        self.waits: list[float] = []
        self._stop_during_wait = stop_during_wait
        self._max_waits = max_waits
        self._stopped = False

    def request_stop(self) -> None:
        self._stopped = True

    @property
    def stop_requested(self) -> bool:
        return self._stopped

    def wait(self, seconds: float) -> bool:
        if self._max_waits is not None and len(self.waits) >= self._max_waits:
            raise AssertionError(f"an unexpected wait of {seconds:g}s (at most {self._max_waits})")
        self.waits.append(seconds)
        if len(self.waits) == self._stop_during_wait:
            self._stopped = True
        if self._stopped:
            return True
        if math.isinf(seconds):
            raise AssertionError("waiting forever on a FakeSleeper nobody stops")
        self.clock.advance(timedelta(seconds=seconds))
        return False
