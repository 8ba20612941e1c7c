"""Workers: claim a job, keep its lease alive while it runs, record how it ended.

A worker runs one job at a time; ``concurrency`` K means K workers (threads) in one
process. Waiting for work is an ``Event.wait(poll_interval)``, so a stop request
wakes a waiting worker at once; a running job is finished before the worker exits.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from memsync.clock import Clock, SystemClock
from memsync.connectors.base import Connector
from memsync.connectors.config import ConnectorConfig
from memsync.runtime.compile import CompileService, result_summary
from memsync.runtime.jobs.queue import Job, JobQueue
from memsync.runtime.sync import RunStatus, SyncRunner
from memsync.runtime.sync.records import COUNTERS

__all__ = [
    "JobHandler",
    "PermanentJobError",
    "SyncRunFailed",
    "Worker",
    "compile_handler",
    "run_workers",
    "sync_handler",
    "worker_name",
]

logger = logging.getLogger("memsync.jobs")

JobHandler = Callable[[Job], Mapping[str, Any]]
"""Runs one job and returns its result (JSON-ready). Raising fails the attempt."""


class PermanentJobError(Exception):
    """An error that retrying cannot fix: the job fails at once, the message kept.

    Any other exception is taken as transient and retried with backoff until the
    job's attempts are used up.
    """


def worker_name() -> str:
    """A lease owner unique to this process (host, pid and a random suffix)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def compile_handler(compiler: CompileService) -> JobHandler:
    """Compile jobs: the single compile path, with the job id on every record it makes.

    Compile is idempotent, so a job reclaimed after its worker died compiles what is
    left and creates no memory twice.
    """

    def handle(job: Job) -> Mapping[str, Any]:
        result = compiler.compile(job.tenant_id, job.target, job_id=str(job.id))
        return {
            **result_summary(result),
            "memory_ids": [str(memory.id) for memory in result.memories],
        }

    return handle


class SyncRunFailed(Exception):
    """The sync run a job started ended ``failed`` (its record says why); the job is
    retried with backoff, as a source that is down for a while usually comes back."""


def sync_handler(
    runner: SyncRunner,
    connectors: Iterable[ConnectorConfig],
    build: Callable[[ConnectorConfig], Connector[Any, Any]],
) -> JobHandler:
    """Sync jobs: one incremental sync of the connector the job names, in its tenant.

    The result is the run's id, status and counters. A ``partial`` run completes the
    job (what was read is stored; the run record lists the errors); a ``failed`` run,
    or another run of the connector still going, fails the attempt, to be retried. A
    connector no longer in the configuration fails the job for good. Re-running is
    safe: the window overlaps the last one on purpose and ingest recognises repeats.
    """
    configured = {(config.tenant, config.name): config for config in connectors}

    def handle(job: Job) -> Mapping[str, Any]:
        config = configured.get((job.tenant_id, job.target))
        if config is None:
            raise PermanentJobError(
                f"no connector named {job.target!r} for tenant {job.tenant_id!r} "
                "in this worker's configuration"
            )
        connector = build(config)
        try:
            record = runner.sync(connector)
        finally:
            connector.close()
        if record.status is RunStatus.FAILED:
            raise SyncRunFailed(f"sync run {record.id} failed: {record.error}")
        return {
            "run_id": str(record.id),
            "run_status": record.status.value,
            **{counter: getattr(record, counter) for counter in COUNTERS},
            "error": record.error,
        }

    return handle


class Worker:
    """Claims jobs of the kinds it has handlers for and runs them one at a time."""

    def __init__(
        self,
        queue: JobQueue,
        handlers: Mapping[str, JobHandler],
        *,
        clock: Clock | None = None,
        lease: timedelta = timedelta(seconds=60),
        poll_interval: float = 1.0,
        name: str | None = None,
    ) -> None:
        self._queue = queue
        self._handlers = dict(handlers)
        self._clock = clock or SystemClock()
        self._lease = lease
        self._poll_interval = poll_interval
        self.name = name or worker_name()

    def run_once(self) -> Job | None:
        """Claim one ready job and run it to its end; return it as claimed, or None."""
        job = self._queue.claim(
            self.name, now=self._clock.now(), lease=self._lease, kinds=self._handlers
        )
        if job is None:
            return None
        stop_heartbeat = threading.Event()
        heartbeat = threading.Thread(
            target=self._keep_lease, args=(job, stop_heartbeat), daemon=True
        )
        heartbeat.start()
        try:
            result = self._handlers[job.kind](job)
        except Exception as error:
            stop_heartbeat.set()
            heartbeat.join()
            status = self._queue.fail(
                job,
                self.name,
                f"{type(error).__name__}: {error}",
                now=self._clock.now(),
                retryable=not isinstance(error, PermanentJobError),
            )
            logger.warning(
                "job %s (%s %s) failed: %s -> %s", job.id, job.kind, job.target, error, status
            )
            return job
        stop_heartbeat.set()
        heartbeat.join()
        if not self._queue.complete(job, self.name, result, now=self._clock.now()):
            # Our lease expired and another worker reclaimed the job; its run counts.
            logger.warning("job %s finished after its lease was lost; result dropped", job.id)
        return job

    def _keep_lease(self, job: Job, stop: threading.Event) -> None:
        interval = self._lease.total_seconds() / 3
        while not stop.wait(interval):
            if not self._queue.heartbeat(job, self.name, now=self._clock.now(), lease=self._lease):
                logger.warning("lost the lease of job %s", job.id)
                return

    def run(self, stop: threading.Event) -> None:
        """Run jobs until ``stop`` is set; the job in hand is finished first."""
        while not stop.is_set():
            try:
                job = self.run_once()
            except Exception:
                # The database went away for a moment: wait, then claim again.
                logger.exception("worker %s could not claim a job", self.name)
                job = None
            if job is None:
                stop.wait(self._poll_interval)


def run_workers(
    make_worker: Callable[[int], Worker], concurrency: int, stop: threading.Event
) -> None:
    """Run ``concurrency`` workers in threads until ``stop`` is set and all are idle."""
    threads = [
        threading.Thread(target=make_worker(index).run, args=(stop,), name=f"worker-{index}")
        for index in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
