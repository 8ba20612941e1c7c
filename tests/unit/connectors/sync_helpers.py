"""Driving a connector the way the runner does, against simulated ingest."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from memsync.clock import FakeClock
from memsync.connectors.base import Connector, Window
from memsync.connectors.testing import SimulatedIngest


def sync(
    connector: Connector[Any, Any],
    store: SimulatedIngest,
    start: datetime | None,
    end: datetime,
) -> Counter[str]:
    """Fetch one window and apply it as the runner does; count outcomes (and skips)."""
    return store.sync(connector, connector.fetch(Window(start, end), None))


class RecordedSleep:
    """A sleep for connectors: records each wait and moves the clock by it, as a real
    sleep would, without waiting."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(timedelta(seconds=seconds))
