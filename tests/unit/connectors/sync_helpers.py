"""Driving a connector the way the runner does, against simulated ingest."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

from memsync.connectors.base import Connector, Window
from memsync.connectors.errors import SkipRecord
from memsync.connectors.testing import SimulatedIngest


def sync(
    connector: Connector[Any, Any],
    store: SimulatedIngest,
    start: datetime | None,
    end: datetime,
) -> Counter[str]:
    """Fetch one window and ingest every record; count outcomes (and skips)."""
    outcomes: Counter[str] = Counter()
    for record in connector.fetch(Window(start, end), None):
        try:
            draft = connector.to_episode(record)
        except SkipRecord:
            outcomes["skipped"] += 1
            continue
        outcomes[str(store.ingest(draft))] += 1
    return outcomes
