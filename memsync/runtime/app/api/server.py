"""Serving the API in the foreground until SIGTERM or SIGINT, then returning."""

from __future__ import annotations

import gc
import signal
import sys
from collections.abc import Callable
from types import FrameType

import uvicorn
from fastapi import FastAPI

from memsync.compile.tokenizer import default_counter

__all__ = ["serve_until_stopped"]


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


def serve_until_stopped(
    app: FastAPI, host: str, port: int, *, on_signal: Callable[[], None] = lambda: None
) -> None:
    """Serve ``app`` on ``host:port``; return after SIGTERM/SIGINT and a graceful shutdown.

    ``on_signal`` is called as the signal arrives, before the graceful shutdown (the
    caller's workers stop at once instead of after the last request is answered).

    Before serving, the tokenizer is loaded (not on the first bundle request) and the
    objects of the started process are frozen out of the garbage collector's reach: a
    full collection, which holds the GIL and so stalls every request, then traverses
    only what requests and compiles allocate, not the imported libraries.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    default_counter()
    gc.collect()
    gc.freeze()
    # uvicorn leaves logging to the process's one pipeline (log_config=None), and the
    # access log to memsync's middleware, which adds the route and the duration.
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False)
    _ReturningServer(config, on_signal).run()
