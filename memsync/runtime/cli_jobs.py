"""CLI commands for jobs: ``worker``, ``scheduler``, ``run`` and ``jobs list|show|wait``.

Registered on the main ``memsync`` app by :func:`register`. Long-running commands stop
on SIGTERM or SIGINT: they stop claiming, finish the job in hand and exit 0.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from memsync.connectors import load_registry
from memsync.runtime.cli_sync import connector_configs
from memsync.runtime.compile import CompileService
from memsync.runtime.config import Settings
from memsync.runtime.jobs import (
    COMPILE,
    SYNC,
    JobQueue,
    JobStatus,
    ScheduleFirer,
    Scheduler,
    Worker,
    compile_handler,
    ingest_service,
    run_workers,
    schedules_from_settings,
    sync_handler,
    worker_name,
)
from memsync.runtime.storage import Store
from memsync.runtime.sync import SyncRunner

__all__ = ["register"]

EXIT_FAILED = 1

console = Console(soft_wrap=True)
errors = Console(stderr=True, soft_wrap=True, highlight=False)

SettingsLoader = Callable[[], Settings]
StoreOpener = Callable[[Settings], Store]


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (the main thread's handlers)."""
    stop = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        errors.print(f"{signal.Signals(signum).name}: finishing the job in hand, then exiting")
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def _logging() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )


def _worker_factory(store: Store, settings: Settings) -> Callable[[int], Worker]:
    """Workers for both job kinds: compile, and sync of the configured connectors.

    Exits 2 naming the file and field when the connectors section is invalid.
    """
    queue = JobQueue.from_settings(store, settings.jobs)
    compiler = CompileService.from_settings(store, settings.compile)
    registry = load_registry()
    connectors = connector_configs(registry, settings)
    process = worker_name()

    def make(index: int) -> Worker:
        # One runner per worker thread: each holds its own ingest service and the
        # every-N trigger, so synced episodes trigger compiles as the API's do.
        runner = SyncRunner(store, ingest=ingest_service(store, settings.jobs, queue))
        return Worker(
            queue,
            {
                COMPILE: compile_handler(compiler),
                SYNC: sync_handler(runner, connectors, registry.build),
            },
            lease=timedelta(seconds=settings.jobs.lease_seconds),
            poll_interval=settings.jobs.poll_seconds,
            name=f"{process}/{index}",
        )

    return make


def _scheduler(store: Store, settings: Settings) -> Scheduler:
    """The nightly compile and every connector's sync schedule, from the configuration."""
    queue = JobQueue.from_settings(store, settings.jobs)
    connectors = connector_configs(load_registry(), settings)
    return Scheduler(
        ScheduleFirer(store, queue),
        schedules_from_settings(settings.jobs, connectors),
        misfire_grace=timedelta(seconds=settings.jobs.misfire_grace_seconds),
    )


def _job_id(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        errors.print(f"{value!r} is not a job id (a UUID, as `memsync jobs list` shows)")
        raise typer.Exit(2) from None


def register(
    app: typer.Typer,
    load_settings: SettingsLoader,
    open_store: StoreOpener,
    serving_settings: Callable[[str | None, int | None], Settings],
) -> None:
    """Add the job commands to ``app``, using the main CLI's config and store helpers."""
    jobs_app = typer.Typer(help="Background jobs: what is queued, running and failed.")
    jobs_app.info.no_args_is_help = True
    app.add_typer(jobs_app, name="jobs")

    @app.command()
    def worker(
        concurrency: Annotated[int, typer.Option(min=1, help="jobs run at once")] = 1,
    ) -> None:
        """Claim and run jobs until SIGTERM/SIGINT (then finish the job in hand)."""
        _logging()
        settings = load_settings()
        store = open_store(settings)
        stop = _stop_on_signals()
        # Said once the signal handlers are in place: from here SIGTERM means "finish
        # the job in hand, then exit 0" (supervisors and tests wait for this line).
        errors.print(f"worker ready: {concurrency} job(s) at once; SIGTERM stops it")
        run_workers(_worker_factory(store, settings), concurrency, stop)
        store.dispose()

    @app.command()
    def scheduler() -> None:
        """Fire the configured schedules (they only enqueue jobs) until SIGTERM/SIGINT."""
        _logging()
        settings = load_settings()
        store = open_store(settings)
        stop = _stop_on_signals()
        running = _scheduler(store, settings)
        running.start()
        stop.wait()
        running.shutdown()
        store.dispose()

    @app.command()
    def run(
        host: Annotated[str | None, typer.Option(help="interface (default: api.host)")] = None,
        port: Annotated[int | None, typer.Option(help="port (default: api.port)")] = None,
    ) -> None:
        """One machine, all in one: the HTTP API, the scheduler and one worker thread.

        SIGTERM/SIGINT: the API shuts down gracefully, the worker finishes the job in
        hand, the scheduler stops; exit 0.
        """
        from memsync.runtime.api.app import create_app
        from memsync.runtime.api.deps import Services
        from memsync.runtime.api.server import serve_until_stopped

        _logging()
        settings = serving_settings(host, port)
        store = open_store(settings)
        stop = threading.Event()
        running = _scheduler(store, settings)
        running.start()
        worker_thread = threading.Thread(
            target=_worker_factory(store, settings)(0).run, args=(stop,), name="worker"
        )
        worker_thread.start()
        try:
            # The server owns SIGTERM/SIGINT here; when it returns, the rest stops too.
            serve_until_stopped(
                create_app(Services.build(settings, store)), settings.api.host, settings.api.port
            )
        finally:
            stop.set()
            worker_thread.join()
            running.shutdown()
            store.dispose()

    @jobs_app.command("list")
    def jobs_list(
        status: Annotated[list[JobStatus] | None, typer.Option(help="only these")] = None,
        kind: Annotated[str | None, typer.Option(help="only this kind, e.g. compile")] = None,
        tenant: Annotated[str, typer.Option(help="tenant")] = "default",
        limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    ) -> None:
        """Jobs, newest first: kind, target, status, attempts, error."""
        store = open_store(load_settings())
        found = JobQueue(store).list(tenant, statuses=status, kind=kind, limit=limit)
        if as_json:
            typer.echo(json.dumps([job.to_dict() for job in found], indent=2))
            return
        table = Table(title=f"jobs (tenant {tenant!r})")
        for column in ("id", "kind", "target", "status", "attempts", "trigger", "queued", "error"):
            table.add_column(column, overflow="fold")
        for job in found:
            table.add_row(
                str(job.id),
                job.kind,
                job.target,
                job.status.value,
                f"{job.attempts}/{job.max_attempts}",
                job.trigger,
                job.queued_at.isoformat(timespec="seconds"),
                job.error or "",
            )
        console.print(table)

    @jobs_app.command("show")
    def jobs_show(
        job_id: Annotated[str, typer.Argument(help="job id")],
        tenant: Annotated[str, typer.Option(help="tenant")] = "default",
    ) -> None:
        """One job as JSON: attempts, lease, times, result and error."""
        store = open_store(load_settings())
        job = JobQueue(store).get(tenant, _job_id(job_id))
        if job is None:
            errors.print(f"no job {job_id} in tenant {tenant!r}")
            raise typer.Exit(EXIT_FAILED)
        typer.echo(json.dumps(job.to_dict(), indent=2))

    @jobs_app.command("wait")
    def jobs_wait(
        job_id: Annotated[str, typer.Argument(help="job id")],
        tenant: Annotated[str, typer.Option(help="tenant")] = "default",
        timeout: Annotated[float, typer.Option(help="seconds to wait at most")] = 300.0,
        poll: Annotated[float, typer.Option(help="seconds between looks")] = 0.5,
    ) -> None:
        """Wait until a job completes (exit 0) or fails (exit 1); exit 1 on timeout."""
        store = open_store(load_settings())
        queue, wanted = JobQueue(store), _job_id(job_id)
        deadline = time.monotonic() + timeout
        waiting = threading.Event()
        while True:
            job = queue.get(tenant, wanted)
            if job is None:
                errors.print(f"no job {job_id} in tenant {tenant!r}")
                raise typer.Exit(EXIT_FAILED)
            if job.finished or time.monotonic() >= deadline:
                break
            waiting.wait(poll)
        typer.echo(json.dumps(job.to_dict(), indent=2))
        if job.status is not JobStatus.COMPLETED:
            if not job.finished:
                errors.print(f"job {job_id} is still {job.status.value} after {timeout}s")
            raise typer.Exit(EXIT_FAILED)
