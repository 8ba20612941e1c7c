"""How fast one process may ask a model: concurrent requests, requests and tokens per minute.

One :class:`RequestBudget` per process and endpoint, shared by every thread that
compiles (the compile service owns it; the workers of a process share that service).
Several processes each have their own: give each ``requests_per_minute / processes``
(see docs/operations.md).

Why not pyrate-limiter (installed, v4): a request must pass two limits of different
weights (1 request, *n* tokens) at once, and its buckets can only check a limit by
recording into it, so a request admitted by one bucket and refused by the other would
hold a slot it does not use yet, and the real sends could crowd more than the limit
into a window; its in-memory log also stores a weighted item as ``weight`` entries
(100,000 tokens a minute, 100,000 list entries). Both limits here are decided together,
under one lock, and a weight is one entry.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["WINDOW_SECONDS", "RequestBudget", "Reservation"]

WINDOW_SECONDS = 60.0


@dataclass(slots=True)
class Reservation:
    """One admitted request: when it was let out and the tokens it is counted for."""

    at: float
    tokens: int


class RequestBudget:
    """Concurrency, pacing and a sliding 60-second window, for the requests of a process.

    - at most ``max_concurrency`` requests in flight at once;
    - request starts evenly paced, at least ``60 / requests_per_minute`` seconds apart,
      so never more than ``requests_per_minute`` in any 60-second window and never a
      minute's worth at once (nothing is saved up while idle);
    - the tokens of the requests started in any 60-second window at most
      ``tokens_per_minute``: a request is counted for an estimate when it starts and for
      what the model reported (:meth:`settle`) once it answered. A request estimated
      above the whole budget is let out alone, into an empty window.

    ``None`` for a limit means none. ``clock`` (seconds, monotonic) and ``wait`` are
    injected so tests decide what time it is; callers block in :meth:`slot`.
    Thread-safe. Repeats: each :meth:`slot` is a new request, counted again.
    """

    def __init__(
        self,
        *,
        max_concurrency: int = 1,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        for name, limit in (
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
        ):
            if limit is not None and limit < 1:
                raise ValueError(f"{name} must be at least 1, not {limit}")
        self.max_concurrency = max_concurrency
        self._in_flight = threading.BoundedSemaphore(max_concurrency)
        self._spacing = WINDOW_SECONDS / requests_per_minute if requests_per_minute else 0.0
        self._tokens_per_minute = tokens_per_minute
        self._clock, self._wait = clock, wait
        self._lock = threading.Lock()
        self._next_start: float | None = None
        self._window: deque[Reservation] = deque()
        self._window_tokens = 0

    @contextmanager
    def slot(self, estimated_tokens: int) -> Iterator[Reservation]:
        """Block until a request estimated at ``estimated_tokens`` may start, then hold
        one of the concurrent slots for the block (the request). Pass the reservation
        to :meth:`settle` with what the model reported."""
        with self._in_flight:
            yield self._admit(max(estimated_tokens, 0))

    def settle(self, reservation: Reservation, tokens: int) -> None:
        """Count ``reservation`` for ``tokens`` (the model's usage) instead of its estimate."""
        with self._lock:
            if any(entry is reservation for entry in self._window):
                self._window_tokens += tokens - reservation.tokens
            reservation.tokens = tokens

    def _admit(self, tokens: int) -> Reservation:
        while True:
            with self._lock:
                now = self._clock()
                delay = self._delay(now, tokens)
                if delay <= 0:
                    reservation = Reservation(now, tokens)
                    self._next_start = now + self._spacing
                    self._window.append(reservation)
                    self._window_tokens += tokens
                    return reservation
            self._wait(delay)

    def _delay(self, now: float, tokens: int) -> float:
        """Seconds until a request of ``tokens`` may start (0 or less: now)."""
        while self._window and self._window[0].at <= now - WINDOW_SECONDS:
            self._window_tokens -= self._window.popleft().tokens
        delay = 0.0 if self._next_start is None else self._next_start - now
        limit = self._tokens_per_minute
        if limit is not None and self._window and self._window_tokens + tokens > limit:
            # The oldest requests must leave the window until this one fits.
            freed, leaves_at = self._window_tokens, now
            for entry in self._window:
                freed -= entry.tokens
                leaves_at = entry.at + WINDOW_SECONDS
                if freed + tokens <= limit:
                    break
            delay = max(delay, leaves_at - now)
        return delay
