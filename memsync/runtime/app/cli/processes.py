"""Long-running commands: ``serve`` (the HTTP API), ``worker``, ``scheduler`` and ``run``
(all three in one process).

They stop on SIGTERM or SIGINT and exit 0. The signal requests a stop on the process's
stop event (:attr:`Services.stop`), which every wait of their work waits on: idle
workers exit at once; a sync whose connector is waiting (a rate limit's reset, a
backoff) or about to send its next request stops there, is recorded ``partial`` and
its job is released to the queue for another worker; any other job in hand (a
compile) is finished first. docs/operations.md says what each command does.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memsync.runtime.app.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    app,
    errors,
    logging_options,
    open_services,
    say_from_signal_handler,
    settings,
)

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from memsync.runtime.app.config import Settings
    from memsync.runtime.app.observability import LogFormat
    from memsync.runtime.app.services import Services

__all__ = ["run", "scheduler", "serve", "worker"]

HostOption = Annotated[str | None, typer.Option(help="interface (default: api.host)")]
PortOption = Annotated[int | None, typer.Option(help="port (default: api.port, 8100)")]


def _stop_on_signals(services: Services) -> None:
    """SIGTERM and SIGINT (the main thread's handlers) request ``services.stop``."""

    def handle(signum: int, _frame: FrameType | None) -> None:
        services.stop.request_stop()
        say_from_signal_handler(
            f"{signal.Signals(signum).name}: stopping; a sync in progress is released to "
            "the queue, a compile in progress is finished first"
        )

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def _serving_settings(host: str | None, port: int | None) -> Settings:
    """Settings with --host/--port applied; refuses a public interface without keys."""
    loaded = settings()
    api = loaded.api.model_copy(
        update={key: value for key, value in {"host": host, "port": port}.items() if value}
    )
    loaded = loaded.model_copy(update={"api": api})
    if not api.auth_enabled:
        if not api.binds_loopback_only():
            errors.print(
                f"refusing to serve on {api.host}: no API keys are configured, so memsync "
                "only listens on loopback. Add api.keys (see `memsync keys new`) or use "
                "--host 127.0.0.1."
            )
            raise typer.Exit(EXIT_USAGE)
        errors.print(
            f"no API keys configured: accepting unauthenticated requests on {api.host} only"
        )
    return loaded


def _warn_of_connectors_it_cannot_sync(services: Services) -> None:
    """Say at start which connectors this process's workers cannot build (a variable
    not set here), rather than only in each of their failed jobs."""
    for missing in services.missing_variables.values():
        errors.print(
            f"warning: {missing}; this process's workers fail its sync jobs "
            "(needs_attention) until that is set",
            markup=False,
            highlight=False,
        )


@contextmanager
def _workers_beside(services: Services, count: int) -> Iterator[None]:
    """``count`` worker threads for the duration of the block; on leaving it a stop is
    requested and they are joined (each releases or finishes the job in hand)."""
    from memsync.runtime.jobs import run_workers

    if count:
        _warn_of_connectors_it_cannot_sync(services)
    workers = threading.Thread(
        target=run_workers, args=(services.worker, count, services.stop), name="workers"
    )
    workers.start()
    try:
        yield
    finally:
        services.stop.request_stop()
        workers.join()


def _serve(services: Services, settings: Settings, workers: int | None) -> None:
    """The HTTP API until SIGTERM/SIGINT, with ``workers`` job workers beside it."""
    from memsync.runtime.app.api.app import create_app
    from memsync.runtime.app.api.server import serve_until_stopped

    count = settings.jobs.serve_workers if workers is None else workers
    with _workers_beside(services, count):
        # The server owns SIGTERM/SIGINT here: the signal stops the workers at once,
        # while the server answers the requests in flight.
        serve_until_stopped(
            create_app(services),
            settings.api.host,
            settings.api.port,
            on_signal=services.stop.request_stop,
        )


WorkersOption = Annotated[
    int | None,
    typer.Option(min=0, help="job worker threads beside the API (default: jobs.serve_workers, 1)"),
]


ProcessesOption = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=64,
        help="API processes sharing the port (default: the CPUs this process may use)",
    ),
]


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, which containers narrow), at
    least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@app.command()
def serve(
    host: HostOption = None,
    port: PortOption = None,
    workers: WorkersOption = None,
    processes: ProcessesOption = None,
) -> None:
    """Serve the HTTP API (Statewave v1 compatible) and run queued jobs beside it, until
    SIGTERM/SIGINT, then exit 0. ``--workers 0`` leaves jobs to ``memsync worker``.

    ``--processes N`` (default: one per usable CPU) serves from N processes sharing the
    port, each with its own ``--workers`` job workers (jobs are leased, so none runs
    twice); a process that dies is replaced; SIGTERM stops them all gracefully."""
    loaded = _serving_settings(host, port)
    count = usable_cpus() if processes is None else processes
    with open_services(loaded) as services:
        # Here once, before any process serves: the store answers and is migrated.
        if count == 1:
            _serve(services, loaded, workers)
            return
    _serve_in_processes(loaded, workers, count)


def _serve_in_processes(settings: Settings, workers: int | None, count: int) -> None:
    from memsync.runtime.app.api.server import ServingProcessFailed, serve_in_processes
    from memsync.runtime.app.observability.metrics import shared_between_processes

    log_format, log_level = logging_options()
    each = ServingProcess(
        settings,
        settings.jobs.serve_workers if workers is None else workers,
        log_format,
        log_level,
    )
    errors.print(f"serving from {count} processes on {settings.api.host}:{settings.api.port}")
    with shared_between_processes():
        try:
            serve_in_processes(each, settings.api.host, settings.api.port, count)
        except ServingProcessFailed as failure:
            errors.print(str(failure), markup=False)
            raise typer.Exit(EXIT_FAILED) from None


class ServingProcess:
    """The application of one process of ``memsync serve --processes N``.

    Pickled to each child by the supervisor, it builds everything there, at the first
    ASGI event (the lifespan startup): the log pipeline, the child's own services (its
    pools, its context cache), the API, and its job workers, which run until the
    lifespan shutdown (after the requests in flight were answered) and then release or
    finish the job in hand. A write answered by one process is read at once through
    another: a cached read is checked against the store's memory version first
    (:class:`~memsync.runtime.reading.indexes.SubjectIndexes`).
    """

    def __init__(
        self,
        settings: Settings,
        workers: int,
        log_format: LogFormat | None,
        log_level: int | None,
    ) -> None:
        self._settings = settings
        self._workers = workers
        self._log_format = log_format
        self._log_level = log_level
        self._app: ASGIApp | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_app": None}  # what a child builds, it builds itself

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            self._app = self._start()
        await self._app(scope, receive, send)

    def _start(self) -> ASGIApp:
        _leave_with_the_parent(os.getppid())
        from memsync.runtime.app.api.app import create_app
        from memsync.runtime.app.api.server import prepare_serving_process
        from memsync.runtime.app.observability import configure_logging
        from memsync.runtime.app.services import Services
        from memsync.scrub import scrub_every_log_record

        configure_logging(self._log_format, self._log_level)
        # memsync's middleware writes the access log (with the route and the duration);
        # uvicorn's own, which its configuration turned off before this pipeline was
        # set up, stays off.
        logging.getLogger("uvicorn.access").propagate = False
        services = Services.open(self._settings)
        scrub_every_log_record(services.scrubber)
        prepare_serving_process()
        return create_app(services, beside=partial(_beside_the_api, services, self._workers))


PARENT_CHECK_SECONDS = 1.0
"""How often a serving process checks that the process that started it is still there."""


def _leave_with_the_parent(parent: int) -> None:
    """Stop this serving process gracefully (SIGTERM to itself) once ``parent`` is gone.

    The supervisor stops its children on SIGTERM; a supervisor killed outright (SIGKILL,
    the OOM killer) cannot, and a child left behind would go on serving the port and
    running jobs with nothing to restart or stop it. A daemon thread polls the parent
    id: a child whose parent died is adopted, so its parent id changes."""
    stop_checking = threading.Event()

    def watch() -> None:
        while not stop_checking.wait(PARENT_CHECK_SECONDS):
            if os.getppid() != parent:
                stop_checking.set()
                os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


@contextmanager
def _beside_the_api(services: Services, workers: int) -> Iterator[None]:
    """``workers`` job workers for as long as the API serves, then the store closed."""
    try:
        with _workers_beside(services, workers):
            yield
    finally:
        services.close()


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(min=1, help="jobs run at once")] = 1,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0, max=65535, help="serve Prometheus metrics on this port (0: any free one)"
        ),
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="interface of --metrics-port")] = "127.0.0.1",
) -> None:
    """Claim and run jobs until SIGTERM/SIGINT, then exit 0: a sync in progress is
    released to the queue, a compile in progress is finished first."""
    from memsync.runtime.app.observability.http import serving_metrics
    from memsync.runtime.jobs import run_workers

    with open_services() as services, ExitStack() as serving:
        services.connectors  # noqa: B018 - exit 2 on a bad connectors section, before work
        _warn_of_connectors_it_cannot_sync(services)
        if metrics_port is not None:
            url = serving.enter_context(
                serving_metrics(services.metrics, metrics_host, metrics_port)
            )
            errors.print(f"metrics on {url}", markup=False, highlight=False)
        _stop_on_signals(services)
        # Said once the signal handlers are in place: from here SIGTERM means "release
        # or finish the job in hand, then exit 0" (supervisors and tests wait for it).
        errors.print(f"worker ready: {concurrency} job(s) at once; SIGTERM stops it")
        run_workers(services.worker, concurrency, services.stop)


@app.command()
def scheduler() -> None:
    """Fire the configured schedules (they only enqueue jobs) until SIGTERM/SIGINT."""
    with open_services() as services:
        _stop_on_signals(services)
        services.scheduler().run(services.stop)


@app.command()
def run(host: HostOption = None, port: PortOption = None, workers: WorkersOption = None) -> None:
    """One machine, all in one: the HTTP API, the scheduler and the job workers.

    SIGTERM/SIGINT: the API shuts down gracefully, the workers release a sync in
    progress to the queue (a compile is finished first), the scheduler stops; exit 0.
    """
    loaded = _serving_settings(host, port)
    with open_services(loaded) as services:
        running = services.scheduler()
        running.start()
        try:
            # All in one means jobs run here: at least one worker, whatever the config.
            _serve(
                services, loaded, max(1, loaded.jobs.serve_workers if workers is None else workers)
            )
        finally:
            running.shutdown()
