"""A sync or backfill in its own process, for crash tests: ``python -m tests.e2e.sync_driver``.

The source is the fake connector over ``count`` generated records. When fetch reaches
record ``gate_at`` it creates ``marker`` and then opens the named pipe ``gate`` for
reading, which blocks until some process opens it for writing. The test never does:
it waits for the marker and kills this process with SIGKILL, at a point where exactly
the batches before ``gate_at`` are committed. No sleeping anywhere.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memsync.clock import FakeClock, SystemClock
from memsync.connectors import Cursor, Deletion, Window
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.sync import SyncRepository, SyncRunner

T0 = datetime(2026, 3, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=30)
BATCH = 100
BACKFILL_SINCE = T0
BACKFILL_UNTIL = T0 + timedelta(days=4)


def generated(count: int, every: timedelta) -> list[FakeRecord]:
    return [
        FakeRecord(id=f"r{i:05d}", updated_at=T0 + i * every, body=f"body {i}")
        for i in range(count)
    ]


def fake_config() -> FakeConfig:
    return FakeConfig.model_validate({"name": "src", "subject": "thing:{id}", "overlap": "1h"})


class GatedConnector(FakeConnector):
    """Blocks on a named pipe when it reaches one record."""

    def __init__(self, records: list[FakeRecord], gate_at: str, gate: Path, marker: Path) -> None:
        super().__init__(fake_config(), records)
        self.gate_at, self.gate, self.marker = gate_at, gate, marker

    def fetch(self, window: Window, cursor: Cursor | None) -> Iterator[FakeRecord | Deletion]:
        for record in super().fetch(window, cursor):
            if isinstance(record, FakeRecord) and record.id == self.gate_at:
                self.marker.touch()
                os.open(self.gate, os.O_RDONLY)  # blocks: nobody ever writes
            yield record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("sync", "backfill"))
    parser.add_argument("store_url")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--every-minutes", type=int, required=True)
    parser.add_argument("--gate-at", required=True)
    parser.add_argument("--gate", type=Path, required=True)
    parser.add_argument("--marker", type=Path, required=True)
    parser.add_argument(
        "--real-clock", action="store_true", help="stamp runs with the wall clock (default: NOW)"
    )
    arguments = parser.parse_args()
    records = generated(arguments.count, timedelta(minutes=arguments.every_minutes))
    connector = GatedConnector(records, arguments.gate_at, arguments.gate, arguments.marker)
    clock = SystemClock() if arguments.real_clock else FakeClock(NOW)
    store = Store.from_url(arguments.store_url)
    runner = SyncRunner(
        SyncRepository(store), IngestService(store, clock), clock=clock, batch_size=BATCH
    )
    if arguments.mode == "sync":
        runner.sync(connector)
    else:
        runner.backfill(connector, since=BACKFILL_SINCE, until=BACKFILL_UNTIL)


if __name__ == "__main__":
    main()
