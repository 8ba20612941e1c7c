"""Observability: one structured log pipeline and Prometheus metrics.

- :mod:`.logs` — :func:`configure_logging`: structlog formats every record of the
  process (memsync's, uvicorn's, the libraries') as console lines or JSON;
- :mod:`.metrics` — :class:`Metrics`: the counters and histograms a process records,
  and the gauges read from the store at scrape time;
- :mod:`.http` — the ASGI middleware that times requests and writes the access log.

See docs/operations.md for every metric and the log format options.
"""

from __future__ import annotations

from memsync.runtime.app.observability.logs import (
    LOG_FORMAT_ENV,
    LOG_LEVEL_ENV,
    LogFormat,
    configure_logging,
    default_log_format,
    parse_log_level,
)

__all__ = [
    "LOG_FORMAT_ENV",
    "LOG_LEVEL_ENV",
    "LogFormat",
    "configure_logging",
    "default_log_format",
    "parse_log_level",
]
