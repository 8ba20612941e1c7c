"""Job queue throughput and claim latency on PostgreSQL.

    python -m bench.jobs [--jobs 10000] [--workers 1 2 4]

For each worker count K: enqueue N small compile jobs (one subject each, one episode
per subject) in a throwaway database, start K worker processes (one worker each), and
time from start until the queue is empty: jobs/s, and the p50/p99 of one claim (the
claim transaction, as the worker sees it). Then the same with an empty job kind (the
handler does nothing), which is the queue's own overhead per job.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from multiprocessing.synchronize import Barrier
from typing import Any

from bench.common import machine, print_table, throwaway_store
from memsync.episode import EpisodeDraft
from memsync.runtime.app.handlers import compile_handler
from memsync.runtime.compiling import COMPILE_JOB as COMPILE
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.jobs import JobQueue, Worker
from memsync.runtime.jobs.queue import Job
from memsync.runtime.storage import Store

EMPTY = "empty"
LEASE = timedelta(seconds=60)


def prepare(url: str, jobs: int, kind: str) -> None:
    store = Store.from_url(url)
    subjects = [f"user:{i}" for i in range(jobs)]
    if kind == COMPILE:
        IngestService(store).ingest(
            "bench",
            [
                EpisodeDraft(
                    subject_id=subject,
                    source="chat",
                    type="message",
                    payload={"messages": [{"role": "user", "content": "I use Postgres at work."}]},
                    idempotency_key=subject,
                )
                for subject in subjects
            ],
        )
    JobQueue(store).enqueue_many(
        kind, [("bench", subject) for subject in subjects], now=datetime.now(UTC), trigger="bench"
    )
    with store.write() as connection:
        connection.exec_driver_sql("ANALYZE jobs")
    store.dispose()


class _TimedQueue(JobQueue):
    """Measures each claim transaction."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.claims: list[float] = []

    def claim(self, owner: str, **kwargs: Any) -> Job | None:
        started = time.perf_counter()
        job = super().claim(owner, **kwargs)
        if job is not None:
            self.claims.append(time.perf_counter() - started)
        return job


def work(url: str, kind: str, start: Barrier, out: Any) -> None:
    store = Store.from_url(url)
    queue = _TimedQueue(store)
    handlers = {
        COMPILE: compile_handler(CompileService(store), queue),
        EMPTY: lambda _job: {},
    }
    worker = Worker(queue, {kind: handlers[kind]}, lease=LEASE, poll_interval=0.01)
    start.wait()
    while worker.run_once() is not None:
        pass
    out.put(queue.claims)
    store.dispose()


def scenario(url: str, jobs: int, workers: int, kind: str) -> dict[str, Any]:
    prepare(url, jobs, kind)
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(workers + 1)
    out = context.Queue()
    processes = [context.Process(target=work, args=(url, kind, start, out)) for _ in range(workers)]
    for process in processes:
        process.start()
    start.wait()
    began = time.perf_counter()
    claims: list[float] = []
    for _ in processes:
        claims.extend(out.get())
    elapsed = time.perf_counter() - began
    for process in processes:
        process.join()
    assert len(claims) == jobs, (len(claims), jobs)
    quantiles = statistics.quantiles(claims, n=100)
    return {
        "jobs_per_s": jobs / elapsed,
        "claim_p50_ms": quantiles[49] * 1000,
        "claim_p99_ms": quantiles[98] * 1000,
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    arguments = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for kind in (COMPILE, EMPTY):
            for workers in arguments.workers:
                with throwaway_store("postgresql", directory) as url:
                    result = scenario(url, arguments.jobs, workers, kind)
                print(json.dumps({"kind": kind, "workers": workers, **result}), flush=True)
                rows.append(
                    [
                        kind,
                        f"{arguments.jobs:,}",
                        workers,
                        f"{result['jobs_per_s']:,.0f}",
                        f"{result['claim_p50_ms']:.2f}",
                        f"{result['claim_p99_ms']:.2f}",
                        f"{result['seconds']:.1f}",
                    ]
                )
    print(f"\nmachine: {machine()}\n")
    print_table(
        ["job", "jobs", "worker processes", "jobs/s", "claim p50 ms", "claim p99 ms", "wall s"],
        rows,
    )


if __name__ == "__main__":
    main()
