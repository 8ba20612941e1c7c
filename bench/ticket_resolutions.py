"""What recording ticket resolutions adds to a sync batch: the one upsert the runner
runs in a batch's transaction (``record_source_resolutions``), against ingesting the
batch's episodes.

Per backend, a throwaway migrated store: ``--tickets`` ticket episodes ingested as one
batch (the runner's default size is 1,000), then the upsert of their sessions'
resolutions timed three ways: the first (every row inserted), a newer read of every
ticket (every row updated), and an older re-read (every row left: the source dated the
stored one later). Median of ``--repeats`` rounds, each on new sessions.

    python -m bench.ticket_resolutions [--tickets 1000] [--repeats 5] [--db sqlite postgresql]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from bench.common import machine, print_table, throwaway_store
from memsync.clock import FakeClock
from memsync.compile.support import ResolutionStatus
from memsync.connectors.sessions import SessionResolution
from memsync.episode import EpisodeDraft
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.support.resolutions import SourceResolution, record_source_resolutions

T0 = datetime(2026, 3, 1, tzinfo=UTC)
TENANT = "default"


def reads(round_: int, tickets: int, hours: int) -> list[SourceResolution]:
    statuses = list(ResolutionStatus)
    return [
        SourceResolution(
            f"org:{n % 50}",
            f"zendesk:acme:ticket:{round_}-{n}",
            SessionResolution(statuses[n % 3], f"Ticket {n}", T0 + timedelta(hours=hours), "x"),
        )
        for n in range(tickets)
    ]


def ms(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def measure(url: str, tickets: int, repeats: int) -> list[float]:
    store = Store.from_url(url)
    clock = FakeClock(T0)
    ingest = IngestService(store, clock)

    def upsert(batch: list[SourceResolution]) -> None:
        with store.write() as connection:
            record_source_resolutions(connection, TENANT, batch, clock.now(), connector="desk")

    columns: list[list[float]] = [[], [], [], []]
    for round_ in range(repeats):
        drafts = [
            EpisodeDraft(
                subject_id=f"org:{n % 50}",
                source="zendesk",
                type="zendesk.ticket",
                payload={"id": n, "subject": f"Ticket {n}", "status": "open"},
                idempotency_key=f"zendesk:acme:ticket:{round_}-{n}",
                occurred_at=T0,
                session_id=f"zendesk:acme:ticket:{round_}-{n}",
            )
            for n in range(tickets)
        ]
        columns[0].append(ms(lambda: ingest.ingest(TENANT, drafts)))  # noqa: B023
        columns[1].append(ms(lambda: upsert(reads(round_, tickets, 2))))  # noqa: B023
        columns[2].append(ms(lambda: upsert(reads(round_, tickets, 3))))  # noqa: B023
        columns[3].append(ms(lambda: upsert(reads(round_, tickets, 1))))  # noqa: B023
    store.dispose()
    return [statistics.median(column) for column in columns]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tickets", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    arguments = parser.parse_args()
    print(
        f"machine: {machine()}; {arguments.tickets} tickets a batch, median of "
        f"{arguments.repeats}\n"
    )
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for backend in arguments.db:
            with throwaway_store(backend, directory) as url:
                episodes, first, newer, older = measure(url, arguments.tickets, arguments.repeats)
            rows.append(
                [
                    backend,
                    arguments.tickets,
                    f"{episodes:.1f}",
                    f"{first:.1f}",
                    f"{newer:.1f}",
                    f"{older:.1f}",
                    f"{first / episodes:.0%}",
                ]
            )
    print_table(
        [
            "backend",
            "tickets",
            "ingest ms",
            "resolutions: first ms",
            "newer ms",
            "older re-read ms",
            "first / ingest",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
