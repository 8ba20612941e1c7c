"""Driving a connector the way the runner does, against simulated ingest."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from memsync.clock import FakeClock
from memsync.connectors.base import Connector, Listing, Window
from memsync.connectors.errors import SkipRecord
from memsync.connectors.testing import SimulatedIngest
from memsync.episode import Tombstone


def sync(
    connector: Connector[Any, Any],
    store: SimulatedIngest,
    start: datetime | None,
    end: datetime,
) -> Counter[str]:
    """Fetch one window and ingest every record, then apply the deletions it reports as
    the runner does; count outcomes (skips, and records tombstoned)."""
    outcomes: Counter[str] = Counter()
    listings: list[Listing] = []
    for record in connector.fetch(Window(start, end), None):
        if isinstance(record, Tombstone):
            outcomes["tombstoned"] += len(store.tombstone(record))
            continue
        if isinstance(record, Listing):
            listings.append(record)
            continue
        try:
            draft = connector.to_episode(record)
        except SkipRecord:
            outcomes["skipped"] += 1
            continue
        outcomes[str(store.ingest(draft))] += 1
    for listing in listings:
        outcomes["tombstoned"] += len(store.apply_listing(listing))
    return +outcomes  # without zero counts


class RecordedSleep:
    """A sleep for connectors: records each wait and moves the clock by it, as a real
    sleep would, without waiting."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(timedelta(seconds=seconds))
