"""``GET /metrics`` scrape time with a big store behind it.

Each backend gets a throwaway store holding ``--connectors`` connector cursors and
``--jobs`` jobs spread over two kinds, four statuses and ten tenants (most completed,
as in a store that has run for a while). ``memsync serve`` runs in its own process, as
deployed, and an httpx client on loopback scrapes ``/metrics`` ``--scrapes`` times;
every scrape reads the job depth and the connector lag from the store. Reported: p50,
p95 and max of a scrape as the client sees it; the p50 of ``/v1/health`` over the same
connection (the HTTP floor, no store read); and p50/p95 of building the exposition in
process (the store reads and the rendering, without HTTP).

Prints a Markdown table; see docs/benchmarks.md.

    python -m bench.metrics [--connectors 100] [--jobs 100000] [--db sqlite postgresql]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from bench.common import machine, print_table, throwaway_store, wait_until_serving
from bench.ingest import free_port
from memsync.clock import FakeClock
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store, tables

NOW = datetime(2026, 6, 1, tzinfo=UTC)
STATUSES = ("completed",) * 17 + ("failed", "pending", "running")


def fill(store: Store, connectors: int, jobs: int) -> None:
    streams = [
        {
            "tenant_id": f"tenant-{i % 10}",
            "connector": f"connector-{i:03d}",
            "stream": "records",
            "position": NOW - timedelta(minutes=i),
            "cursor": {"position": (NOW - timedelta(minutes=i)).isoformat(), "token": None},
            "checkpointed_at": NOW,
            "complete_through": NOW - timedelta(minutes=i),
        }
        for i in range(connectors)
    ]
    rows: list[dict[str, Any]] = []
    for i in range(jobs):
        status = STATUSES[i % len(STATUSES)]
        rows.append(
            {
                "tenant_id": f"tenant-{i % 10}",
                "id": uuid.uuid4(),
                "kind": "compile" if i % 3 else "sync",
                # Unique per pending job (the queue allows one pending job per target).
                "target": f"subject-{i}",
                "status": status,
                "trigger": "bench",
                "dedup_key": None,
                "attempts": 0 if status == "pending" else 1,
                "max_attempts": 5,
                "lease_owner": "bench" if status == "running" else None,
                "lease_expires_at": NOW + timedelta(minutes=1) if status == "running" else None,
                "heartbeat_at": None,
                "run_after": NOW,
                "queued_at": NOW - timedelta(seconds=i),
                "started_at": None,
                "finished_at": NOW if status in ("completed", "failed") else None,
                "result": None,
                "error": "boom" if status == "failed" else None,
            }
        )
    with store.write() as connection:
        connection.execute(tables.sync_streams.insert(), streams)
        for start in range(0, len(rows), 5000):
            connection.execute(tables.jobs.insert(), rows[start : start + 5000])
    # A store that has run a while has planner statistics; a bulk load has none yet.
    with store.write() as connection:
        connection.exec_driver_sql("ANALYZE")


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    return statistics.median(ordered), p95, ordered[-1]


def timed_gets(client: httpx.Client, path: str, times: int) -> tuple[list[float], str]:
    samples, body = [], ""
    for _ in range(times):
        started = time.perf_counter()
        response = client.get(path)
        samples.append(time.perf_counter() - started)
        response.raise_for_status()
        body = response.text
    return samples, body


def measure(backend: str, connectors: int, jobs: int, scrapes: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        store = Store.from_url(url)
        fill(store, connectors, jobs)
        services = Services(Settings(store=url), store, FakeClock(NOW))
        collected: list[float] = []
        for _ in range(scrapes):
            started = time.perf_counter()
            services.metrics.exposition()
            collected.append(time.perf_counter() - started)
        store.dispose()
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "memsync", "serve", "--port", str(port), "--processes", "1"],
            env={**os.environ, "MEMSYNC_STORE": url},
            stderr=subprocess.DEVNULL,
        )
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
                wait_until_serving(client)
                client.get("/metrics").raise_for_status()  # first plans warm
                health, _ = timed_gets(client, "/v1/health", scrapes)
                scraped, body = timed_gets(client, "/metrics", scrapes)
        finally:
            server.terminate()
            server.wait(timeout=30)
    assert 'memsync_jobs{kind="compile",status="pending"}' in body
    assert body.count("memsync_connector_lag_seconds{") == connectors
    return {
        "http": percentiles(scraped),
        "store": percentiles(collected),
        "health": percentiles(health),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connectors", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    arguments = parser.parse_args()
    print(
        f"metrics benchmark: {arguments.connectors} connectors, {arguments.jobs:,} jobs, "
        f"{arguments.scrapes} scrapes; {machine()}"
    )
    rows = []
    for backend in arguments.db:
        result = measure(backend, arguments.connectors, arguments.jobs, arguments.scrapes)
        http, store, health = result["http"], result["store"], result["health"]
        rows.append(
            (
                backend,
                *(f"{value * 1000:.1f}" for value in http),
                f"{health[0] * 1000:.1f}",
                *(f"{value * 1000:.1f}" for value in store[:2]),
            )
        )
    print_table(
        [
            "db",
            "scrape p50 ms",
            "scrape p95 ms",
            "scrape max ms",
            "/v1/health p50 ms",
            "in-process p50 ms",
            "in-process p95 ms",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
