"""Driving a connector the way the runner does, against simulated ingest."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

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
