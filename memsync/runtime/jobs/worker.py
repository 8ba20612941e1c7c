"""Workers: claim a job, keep its lease alive while it runs, record how it ended.

A worker runs one job at a time; ``concurrency`` K means K workers (threads) in one
process. Waiting for work is a wait on the process's stop event
(:class:`~memsync.stopping.Sleeper`), so a stop request wakes an idle worker at once.
A job in hand is finished, unless its handler stops with
:class:`~memsync.stopping.StopRequested` (a sync whose connector was waiting, or about
to send a request): the job is then released to the queue for another worker, its
attempt not counted.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from memsync.clock import Clock, SystemClock
from memsync.logcontext import bound_log_context
from memsync.runtime.jobs.queue import Job, JobOutcome, JobQueue
from memsync.stopping import Sleeper, StopRequested

__all__ = [
    "JobHandler",
    "JobResult",
    "NeedsAttention",
    "PermanentJobError",
    "RetryAt",
    "Worker",
    "run_workers",
    "worker_name",
]

logger = logging.getLogger("memsync.jobs")


@dataclass(frozen=True, slots=True)
class JobResult:
    """What a handler returns when "done" needs saying more precisely: the result, the
    outcome (``partial`` when only part of the work was done), and when a follow-up job
    of the same target should carry on (``None``: no follow-up)."""

    result: Mapping[str, Any]
    outcome: JobOutcome = JobOutcome.SUCCEEDED
    follow_up_at: datetime | None = None


JobHandler = Callable[[Job], "Mapping[str, Any] | JobResult"]
"""Runs one job and returns its result (JSON-ready). Raising fails the attempt, except
:class:`~memsync.stopping.StopRequested`, which releases the job (see
:meth:`JobQueue.release`)."""


class RetryAt(Exception):
    """A transient failure whose end is known (a rate limit's reset): the attempt fails
    and the job is retried at ``at``, not after the backoff."""

    def __init__(self, message: str, *, at: datetime) -> None:
        super().__init__(message)
        self.at = at


class PermanentJobError(Exception):
    """An error that retrying cannot fix: the job fails at once, the message kept.

    Any other exception is taken as transient and retried with backoff until the
    job's attempts are used up.
    """


class NeedsAttention(PermanentJobError):
    """An error a person must fix (refused credentials, a missing resource, an invalid
    configuration): the job fails at once with outcome ``needs_attention``."""


def worker_name() -> str:
    """A lease owner unique to this process (host, pid and a random suffix)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    """Claims jobs of the kinds it has handlers for and runs them one at a time.

    ``scrub`` is applied to the error text of a failed attempt before it is stored.
    """

    def __init__(
        self,
        queue: JobQueue,
        handlers: Mapping[str, JobHandler],
        *,
        clock: Clock | None = None,
        lease: timedelta = timedelta(seconds=60),
        poll_interval: float = 1.0,
        name: str | None = None,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        self._queue = queue
        self._handlers = dict(handlers)
        self._clock = clock or SystemClock()
        self._lease = lease
        self._poll_interval = poll_interval
        self.name = name or worker_name()
        # A job's error text is stored and shown: known secrets are scrubbed from it.
        self._scrub = scrub or str

    def run_once(self) -> Job | None:
        """Claim one ready job and run it to its end; return it as claimed, or None."""
        job = self._queue.claim(
            self.name, now=self._clock.now(), lease=self._lease, kinds=self._handlers
        )
        if job is None:
            return None
        # Every line logged while the job runs carries its id, kind and tenant.
        with bound_log_context(tenant=job.tenant_id, job_id=str(job.id), job_kind=job.kind):
            self._run_claimed(job)
        return job

    def _run_claimed(self, job: Job) -> None:
        failure: Exception | None = None
        returned: Mapping[str, Any] | JobResult = {}
        with self._lease_kept(job):
            try:
                returned = self._handlers[job.kind](job)
            except Exception as error:
                failure = error
        # The heartbeat has stopped: it must not renew a lease the outcome gives up.
        if isinstance(failure, StopRequested):
            self._release(job, failure)
        elif failure is not None:
            self._fail(job, failure)
        else:
            self._complete(job, returned)

    @contextmanager
    def _lease_kept(self, job: Job) -> Iterator[None]:
        stop_heartbeat = threading.Event()
        heartbeat = threading.Thread(
            target=self._keep_lease, args=(job, stop_heartbeat), daemon=True
        )
        heartbeat.start()
        try:
            yield
        finally:
            stop_heartbeat.set()
            heartbeat.join()

    def _complete(self, job: Job, returned: Mapping[str, Any] | JobResult) -> None:
        done = returned if isinstance(returned, JobResult) else JobResult(returned)
        completed = self._queue.complete(
            job,
            self.name,
            done.result,
            now=self._clock.now(),
            outcome=done.outcome,
            follow_up_at=done.follow_up_at,
        )
        if not completed:
            # Our lease expired and another worker reclaimed the job; its run counts.
            logger.warning("job finished after its lease was lost; result dropped")

    def _fail(self, job: Job, error: Exception) -> None:
        status = self._queue.fail(
            job,
            self.name,
            self._scrub(f"{type(error).__name__}: {error}"),
            now=self._clock.now(),
            retryable=not isinstance(error, PermanentJobError),
            needs_attention=isinstance(error, NeedsAttention),
            retry_at=error.at if isinstance(error, RetryAt) else None,
        )
        logger.warning(
            "job attempt failed",
            extra={
                "target": job.target,
                "attempt": job.attempts,
                "error": f"{type(error).__name__}: {error}",
                "status": status.value if status is not None else "lease lost",
            },
        )

    def _release(self, job: Job, stopped: StopRequested) -> None:
        reason = self._scrub(f"released by a stopping worker: {stopped}")
        status = self._queue.release(job, self.name, reason, now=self._clock.now())
        logger.warning(
            "job released",
            extra={
                "target": job.target,
                "attempt": job.attempts,
                "reason": reason,
                "status": status.value if status is not None else "lease lost",
            },
        )

    def _keep_lease(self, job: Job, stop: threading.Event) -> None:
        interval = self._lease.total_seconds() / 3
        while not stop.wait(interval):
            if not self._queue.heartbeat(job, self.name, now=self._clock.now(), lease=self._lease):
                logger.warning("lost the lease of a job", extra={"job_id": str(job.id)})
                return

    def run(self, stop: Sleeper) -> None:
        """Run jobs until a stop is requested on ``stop``, which the idle wait between
        polls waits on; the job in hand is finished or released first."""
        while not stop.stop_requested:
            try:
                job = self.run_once()
            except Exception:
                # The database went away for a moment: wait, then claim again.
                logger.exception("worker could not claim a job", extra={"worker": self.name})
                job = None
            if job is None:
                stop.wait(self._poll_interval)


def run_workers(make_worker: Callable[[int], Worker], concurrency: int, stop: Sleeper) -> None:
    """Run ``concurrency`` workers in threads until a stop is requested and all are idle."""
    threads = [
        threading.Thread(target=make_worker(index).run, args=(stop,), name=f"worker-{index}")
        for index in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
