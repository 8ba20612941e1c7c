"""Long-running commands: ``serve`` (the HTTP API), ``worker``, ``scheduler`` and ``run``
(all three in one process).

They stop on SIGTERM or SIGINT: they stop claiming, finish the job in hand and exit 0.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from memsync.runtime.app.cli.common import EXIT_USAGE, app, errors, open_services, settings

if TYPE_CHECKING:
    from memsync.runtime.app.config import Settings
    from memsync.runtime.app.services import Services

__all__ = ["run", "scheduler", "serve", "worker"]

HostOption = Annotated[str | None, typer.Option(help="interface (default: api.host)")]
PortOption = Annotated[int | None, typer.Option(help="port (default: api.port, 8100)")]


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT (the main thread's handlers)."""
    stop = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        errors.print(f"{signal.Signals(signum).name}: finishing the job in hand, then exiting")
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


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
    """``count`` worker threads for the duration of the block; on leaving it they stop
    claiming, finish the job in hand and are joined."""
    if count:
        _warn_of_connectors_it_cannot_sync(services)
    stop = threading.Event()
    threads = [
        threading.Thread(target=services.worker(index).run, args=(stop,), name=f"worker-{index}")
        for index in range(count)
    ]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def _serve(services: Services, settings: Settings, workers: int | None) -> None:
    """The HTTP API until SIGTERM/SIGINT, with ``workers`` job workers beside it."""
    from memsync.runtime.app.api.app import create_app
    from memsync.runtime.app.api.server import serve_until_stopped

    count = settings.jobs.serve_workers if workers is None else workers
    with _workers_beside(services, count):
        # The server owns SIGTERM/SIGINT here; when it returns, the workers stop too.
        serve_until_stopped(create_app(services), settings.api.host, settings.api.port)


WorkersOption = Annotated[
    int | None,
    typer.Option(min=0, help="job worker threads beside the API (default: jobs.serve_workers, 1)"),
]


@app.command()
def serve(host: HostOption = None, port: PortOption = None, workers: WorkersOption = None) -> None:
    """Serve the HTTP API (Statewave v1 compatible) and run queued jobs beside it, until
    SIGTERM/SIGINT, then exit 0. ``--workers 0`` leaves jobs to ``memsync worker``."""
    loaded = _serving_settings(host, port)
    with open_services(loaded) as services:
        _serve(services, loaded, workers)


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
    """Claim and run jobs until SIGTERM/SIGINT (then finish the job in hand)."""
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
        stop = _stop_on_signals()
        # Said once the signal handlers are in place: from here SIGTERM means "finish
        # the job in hand, then exit 0" (supervisors and tests wait for this line).
        errors.print(f"worker ready: {concurrency} job(s) at once; SIGTERM stops it")
        run_workers(services.worker, concurrency, stop)


@app.command()
def scheduler() -> None:
    """Fire the configured schedules (they only enqueue jobs) until SIGTERM/SIGINT."""
    with open_services() as services:
        stop = _stop_on_signals()
        running = services.scheduler()
        running.start()
        stop.wait()
        running.shutdown()


@app.command()
def run(host: HostOption = None, port: PortOption = None, workers: WorkersOption = None) -> None:
    """One machine, all in one: the HTTP API, the scheduler and the job workers.

    SIGTERM/SIGINT: the API shuts down gracefully, the workers finish the job in hand,
    the scheduler stops; exit 0.
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
