"""Serving the API in the foreground until SIGTERM or SIGINT, then returning: in this
process (:func:`serve_until_stopped`) or in several behind one port
(:func:`serve_in_processes`)."""

from __future__ import annotations

import gc
import signal
import sys
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess

from memsync.compile.tokenizer import default_counter

__all__ = ["prepare_serving_process", "serve_in_processes", "serve_until_stopped"]


class _ReturningServer(uvicorn.Server):
    """uvicorn's server, except that a SIGTERM or SIGINT ends ``run()`` normally.

    Stock uvicorn shuts down gracefully and then raises the signal again, so the
    process dies of it (exit -15) before the caller can stop its worker and scheduler
    and exit 0. A second SIGINT still forces the exit, as in uvicorn. ``on_signal`` is
    called at the signal, so work beside the server stops while it drains requests.
    """

    def __init__(self, config: uvicorn.Config, on_signal: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_signal = on_signal

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._on_signal()
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


SWITCH_INTERVAL_SECONDS = 0.0005
"""How long a thread may keep the GIL while others wait (CPython's default is 5 ms).

Requests run on a thread pool: a compile's Python work holds the GIL (on two threads,
the compile's and its read-ahead's), and a small read waits up to the interval for it
after each of its database round trips. Half a millisecond kept the p99 of reads during
a 4,000-episode compile at 30 to 33 ms where one millisecond let it reach 41 to 53 ms, and
cost the compile nothing measurable (docs/benchmarks.md)."""


YOUNG_COLLECTION_THRESHOLD = 10_000
"""How many more container objects than were freed a serving process allocates between
two young collections (CPython's default is 700; the older generations keep theirs).

What a request or a compile keeps past its young collection is caches turning over: a
subject's index, rebuilt after a compile, and the memories a compile leaves for the
next. At 700 the collector traversed them again and again as they aged, and a full
collection (up to 150 ms, holding the GIL, so every request in the process waited)
came every second or so: under ``bench.load``'s mixed load, 2.2 to 2.4 s of each
serving process's CPU in a run, against 0.6 to 0.75 s at 10,000. 20,000 and 50,000 saved
no more, and their young collections paused the process for 60 to 180 ms instead of
40 (docs/benchmarks.md, "Tenth round"). The cyclic garbage left waiting between
collections is bounded by the threshold: some megabytes."""


def serve_until_stopped(
    app: FastAPI, host: str, port: int, *, on_signal: Callable[[], None] = lambda: None
) -> None:
    """Serve ``app`` on ``host:port``; return after SIGTERM/SIGINT and a graceful shutdown.

    ``on_signal`` is called as the signal arrives, before the graceful shutdown (the
    caller's workers stop at once instead of after the last request is answered).

    The process is made ready first (:func:`prepare_serving_process`).
    """
    prepare_serving_process()
    # uvicorn leaves logging to the process's one pipeline (log_config=None), and the
    # access log to memsync's middleware, which adds the route and the duration.
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False)
    _ReturningServer(config, on_signal).run()


def prepare_serving_process() -> None:
    """Make this process ready to serve requests: a short GIL switch interval (see
    :data:`SWITCH_INTERVAL_SECONDS`), the tokenizer loaded (not on the first bundle
    request), the objects of the started process frozen out of the garbage collector's
    reach (a full collection, which holds the GIL and so stalls every request, then
    traverses only what requests and compiles allocate, not the imported libraries),
    and young collections further apart (:data:`YOUNG_COLLECTION_THRESHOLD`)."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    default_counter()
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, middle, old)


class ServingProcessFailed(RuntimeError):
    """A process of :func:`serve_in_processes` could not start (the store did not
    answer, the configuration broke): every process would fail alike, so the server
    stopped instead of restarting it."""


def serve_in_processes(app: ASGIApp, host: str, port: int, processes: int) -> None:
    """Serve ``app`` from ``processes`` child processes sharing one listening socket;
    return after SIGTERM/SIGINT, once every child has shut down gracefully.

    The supervisor is uvicorn's own (:class:`uvicorn.supervisors.multiprocess.
    Multiprocess`), maintained with the server we already run: the parent binds the
    socket once and starts the children (``spawn``: each imports what it needs afresh,
    no state is shared by a fork); the kernel hands each connection to one of them.
    The parent pings each child every half second and replaces one that died or hangs;
    SIGTERM/SIGINT makes it send SIGTERM to every child, whose server finishes the
    requests in flight and runs its lifespan shutdown (where ``app`` stops the work it
    runs beside), and wait for them. SIGHUP replaces the children one by one; SIGTTIN
    and SIGTTOU add and remove one.

    ``app`` is pickled to every child (so it must be picklable, and build what it
    serves on its first ASGI event, the lifespan startup, in the child). A child that
    fails before it serves stops the server (raises :class:`ServingProcessFailed`).
    """
    # Logging and the access log as in serve_until_stopped.
    config = uvicorn.Config(
        app, host=host, port=port, workers=processes, log_config=None, access_log=False
    )
    listening = config.bind_socket()
    supervisor = Multiprocess(config, sockets=[listening])
    try:
        supervisor.run()
    finally:
        listening.close()
    failed = [child.pid for child in supervisor.processes if child.exitcode == STARTUP_FAILURE]
    if failed:
        raise ServingProcessFailed(
            f"API process {failed[0]} failed to start (its log says why); the server stopped"
        )
