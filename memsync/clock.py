"""Time as a parameter.

Only run loops read the wall clock; everything that decides takes a ``Clock`` (or a
datetime) so tests can drive time without sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Annotated, Protocol

from pydantic import PlainSerializer, WithJsonSchema

__all__ = ["Clock", "FakeClock", "IsoDatetime", "SystemClock", "utc"]


def _isoformat(moment: datetime) -> str:
    return moment.isoformat()


IsoDatetime = Annotated[
    datetime,
    PlainSerializer(_isoformat, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
"""A datetime that JSON shows as ``datetime.isoformat()`` (``+00:00``, not pydantic's
``Z``): how memories, bundles, jobs, conflicts and the inspector have always written
moments."""


def utc(moment: datetime) -> datetime:
    """Return ``moment`` as an aware UTC datetime; a naive value is taken to be UTC."""
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


class Clock(Protocol):
    """A source of the current time. Implementations return aware UTC datetimes."""

    def now(self) -> datetime:
        """Return the current time; successive calls never go backwards."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when told to, for tests and replays."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = utc(start or datetime(2026, 1, 1, tzinfo=UTC))
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        """Move the clock forward by ``delta`` (never backwards) and return the new time."""
        if delta < timedelta(0):
            raise ValueError("a clock never moves backwards")
        with self._lock:
            self._now += delta
            return self._now

    def set(self, moment: datetime) -> None:
        """Jump to ``moment``, which must not be earlier than the current time."""
        with self._lock:
            target = utc(moment)
            if target < self._now:
                raise ValueError("a clock never moves backwards")
            self._now = target
