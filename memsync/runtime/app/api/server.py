"""Serving the API in the foreground until SIGTERM or SIGINT, then returning."""

from __future__ import annotations

import signal
from types import FrameType

import uvicorn
from fastapi import FastAPI

__all__ = ["serve_until_stopped"]


class _ReturningServer(uvicorn.Server):
    """uvicorn's server, except that a SIGTERM or SIGINT ends ``run()`` normally.

    Stock uvicorn shuts down gracefully and then raises the signal again, so the
    process dies of it (exit -15) before the caller can stop its worker and scheduler
    and exit 0. A second SIGINT still forces the exit, as in uvicorn.
    """

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True


def serve_until_stopped(app: FastAPI, host: str, port: int) -> None:
    """Serve ``app`` on ``host:port``; return after SIGTERM/SIGINT and a graceful shutdown."""
    # uvicorn leaves logging to the process's one pipeline (log_config=None), and the
    # access log to memsync's middleware, which adds the route and the duration.
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False)
    _ReturningServer(config).run()
