"""What a backfill stopped inside a slice reads again when it is run again.

    python -m bench.backfill_resume [--db sqlite postgresql] [--records 15000]
                                    [--stop-at 4258] [--batch 500] [--overlap 5m]

One slice of ``--records`` records of the fake connector (one a second, so the slice
holds them all), read by a backfill that a stop ends after the batch holding record
``--stop-at`` commits (as SIGINT does: the runner stops at its next safe point); then
the same backfill again. Prints, per database, what each run fetched, created and found
duplicate, and what the resumed run re-read (its duplicates) against the bound the
slice's page checkpoint promises: one batch plus the records within the overlap.
(Before the page checkpoint, the resumed run re-read the whole slice: the issue #34
measurement was 15,001 fetched and 4,259 duplicates for these numbers.)
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime, timedelta

from bench.common import machine, print_table, throwaway_store
from memsync.clock import FakeClock
from memsync.connectors import parse_duration
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunInterrupted, SyncRepository, SyncRunner, Tally
from memsync.stopping import FakeSleeper

START = datetime(2025, 1, 1, tzinfo=UTC)
EVERY = timedelta(seconds=1)


def measure(url: str, records: int, stop_at: int, batch: int, overlap: str) -> list[object]:
    store = Store.from_url(url)
    clock = FakeClock(START + timedelta(days=2))
    sleeper = FakeSleeper(clock)
    config = FakeConfig.model_validate({"name": "src", "subject": "thing:{id}", "overlap": overlap})
    source = [FakeRecord(id=f"r{i:06d}", updated_at=START + i * EVERY) for i in range(records)]
    runner = SyncRunner(
        SyncRepository(store),
        IngestService(store, clock),
        clock=clock,
        heartbeat_every=None,
        batch_size=batch,
    )

    def stop_once_past(tally: Tally) -> None:
        if tally.fetched > stop_at:
            sleeper.request_stop()

    until = START + timedelta(days=1)
    try:
        runner.backfill(
            FakeConnector(config, source, sleeper=sleeper),
            since=START,
            until=until,
            on_batch=stop_once_past,
        )
        raise SystemExit("the backfill was not stopped: --stop-at is past the last record")
    except RunInterrupted as interrupted:
        first = interrupted.record
    second = runner.backfill(FakeConnector(config, source), since=START, until=until)
    store.dispose()
    within_overlap = int(parse_duration(overlap) / EVERY)
    return [
        f"{first.fetched:,} / {first.created:,}",
        f"{second.fetched:,} / {second.created:,} / {second.duplicates:,}",
        f"{batch:,} + {within_overlap:,} = {batch + within_overlap:,}",
        f"{first.created + second.created:,}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", nargs="+", default=["sqlite"])
    parser.add_argument("--records", type=int, default=15_000)
    parser.add_argument("--stop-at", type=int, default=4_258)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--overlap", default="5m")
    arguments = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for backend in arguments.db:
            with throwaway_store(backend, directory) as url:
                measured = measure(
                    url, arguments.records, arguments.stop_at, arguments.batch, arguments.overlap
                )
            rows.append([backend, *measured])
    print(f"machine: {machine()}")
    print(
        f"one slice of {arguments.records:,} records, stopped after record "
        f"{arguments.stop_at:,}, batches of {arguments.batch}, overlap {arguments.overlap}\n"
    )
    print_table(
        [
            "db",
            "stopped run: fetched / created",
            "resumed run: fetched / created / duplicates",
            "bound on duplicates: batch + overlap",
            "stored in all",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
