"""One log pipeline for the whole process: memsync, uvicorn and every library.

Everything logs through the standard library (memsync's modules use
``logging.getLogger`` with ``extra=`` fields, uvicorn and the libraries do what they
do); one handler on the root logger formats every record with structlog's
:class:`~structlog.stdlib.ProcessorFormatter`, so a line looks the same whoever wrote
it. The context of the work in hand (``tenant``, ``connector``, ``run_id``,
``job_id``, ``subject``) is bound with :func:`memsync.logcontext.bound_log_context` by
the stage doing the work and added to every line logged meanwhile, in that thread
(context bound with structlog's ``bound_contextvars`` is added too).

structlog (and rich and Pygments, which its console renderer imports) is imported when
the first line is formatted, not when the pipeline is configured: a command that writes
no log line (``runs list``, ``state show``) never pays for it.

Two formats: ``console`` (for a person at a terminal) and ``json`` (one object per
line: ``timestamp`` ISO-8601 UTC, ``level``, ``event``, ``logger`` and the bound
context). Libraries' chatter (Alembic's migration notes, APScheduler's job
bookkeeping, HTTP clients' request lines) is demoted to DEBUG.

:func:`configure_logging` may be called again (a test, ``memsync run``): it replaces
its own handler and leaves any other handler on the root logger alone.
"""

from __future__ import annotations

import enum
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING

from memsync.logcontext import log_context

if TYPE_CHECKING:
    from structlog.typing import EventDict, Processor

__all__ = [
    "LOG_FORMAT_ENV",
    "LOG_LEVEL_ENV",
    "LibraryNoise",
    "LogFormat",
    "configure_logging",
    "default_log_format",
    "parse_log_level",
]

LOG_FORMAT_ENV = "MEMSYNC_LOG_FORMAT"
LOG_LEVEL_ENV = "MEMSYNC_LOG_LEVEL"

#: Loggers whose INFO lines are bookkeeping a platform team never needs at INFO.
NOISY_LIBRARIES = ("alembic", "apscheduler", "httpx", "httpcore", "urllib3", "github", "slack_sdk")


class LogFormat(enum.StrEnum):
    CONSOLE = "console"
    JSON = "json"


def default_log_format(stream: IO[str] | None = None) -> LogFormat:
    """``console`` when a person watches the stream (a terminal), else ``json``."""
    target = stream if stream is not None else sys.stderr
    isatty = getattr(target, "isatty", None)
    return LogFormat.CONSOLE if callable(isatty) and isatty() else LogFormat.JSON


def parse_log_level(text: str) -> int:
    """``debug``, ``info``, ``warning``, ``error`` or ``critical`` (any case) as a
    level number; ``ValueError`` saying which names are accepted otherwise."""
    level = logging.getLevelNamesMapping().get(text.strip().upper())
    if level is None or text.strip().upper() not in _LEVEL_NAMES:
        raise ValueError(
            f"log level {text!r} is not one of {', '.join(name.lower() for name in _LEVEL_NAMES)}"
        )
    return level


_LEVEL_NAMES = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class LibraryNoise(logging.Filter):
    """Demotes the INFO (and lower) lines of :data:`NOISY_LIBRARIES` to DEBUG, then
    drops whatever is below ``threshold``.

    The handler's level is checked before its filters run, so the threshold is
    applied here again after the demotion.
    """

    def __init__(self, threshold: int, libraries: Sequence[str] = NOISY_LIBRARIES) -> None:
        super().__init__()
        self.threshold = threshold
        self._prefixes = tuple(libraries)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and self._noisy(record.name):
            record.levelno = logging.DEBUG
            record.levelname = "DEBUG"
        return record.levelno >= self.threshold

    def _noisy(self, name: str) -> bool:
        return any(name == prefix or name.startswith(prefix + ".") for prefix in self._prefixes)


class _CurrentStderr(logging.StreamHandler[IO[str]]):
    """Writes to whatever ``sys.stderr`` is at the time of the write, so a handler
    installed while stderr was captured never writes to a closed stream later."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> IO[str]:
        return sys.stderr

    @stream.setter
    def stream(self, _value: IO[str]) -> None:
        pass


_OURS = "memsync_log_handler"


def _drop_leftovers(_logger: object, _method: str, event: EventDict) -> EventDict:
    # Not extras, though they look like them: uvicorn passes its message again with
    # terminal colour codes, and a handler that formatted the record first (pytest's)
    # leaves the rendered message on it.
    event.pop("color_message", None)
    event.pop("message", None)
    return event


def _merge_log_context(_logger: object, _method: str, event: EventDict) -> EventDict:
    for key, value in log_context().items():
        event.setdefault(key, value)
    return event


def _shared() -> list[Processor]:
    """What every record goes through before rendering, whether structlog or the
    standard library created it."""
    import structlog

    # The order matters: context first, so a field given with the record itself
    # (``extra=``) wins over the bound context of the same name.
    return [
        structlog.contextvars.merge_contextvars,
        _merge_log_context,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.add_log_level,
        structlog.stdlib.ExtraAdder(),
        _drop_leftovers,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="timestamp"),
    ]


_LEADING_KEYS = ("timestamp", "level", "event", "logger")


def _leading_keys_first(_logger: object, _method: str, event: EventDict) -> EventDict:
    # A person reading raw JSON lines finds when, how bad and what at the start.
    return {
        **{key: event[key] for key in _LEADING_KEYS if key in event},
        **{key: value for key, value in event.items() if key not in _LEADING_KEYS},
    }


def _renderer(log_format: LogFormat, colors: bool) -> list[Processor]:
    import structlog

    if log_format is LogFormat.JSON:
        return [
            structlog.processors.format_exc_info,
            _leading_keys_first,
            structlog.processors.JSONRenderer(default=str),
        ]
    return [structlog.dev.ConsoleRenderer(colors=colors)]


def _filters(threshold: int) -> list[logging.Filter]:
    """Every filter a record passes before it is formatted, in order: the one place
    for anything that must see every line (a scrubber of secrets belongs here)."""
    return [LibraryNoise(threshold)]


def configure_logging(
    log_format: LogFormat | str | None = None,
    level: int | str | None = None,
    *,
    stream: IO[str] | None = None,
) -> logging.Handler:
    """Route every log record of the process through one handler and format.

    ``log_format`` defaults to ``$MEMSYNC_LOG_FORMAT``, else :func:`default_log_format`;
    ``level`` to ``$MEMSYNC_LOG_LEVEL``, else INFO. ``stream`` defaults to the current
    ``sys.stderr``. Returns the handler installed (tests read from its stream).
    Raises ``ValueError`` for an unknown format or level name.
    """
    chosen_format = LogFormat(
        (log_format or os.environ.get(LOG_FORMAT_ENV) or default_log_format(stream)).lower()
    )
    chosen_level = (
        level
        if isinstance(level, int)
        else parse_log_level(level or os.environ.get(LOG_LEVEL_ENV) or "info")
    )
    handler: logging.Handler = (
        logging.StreamHandler(stream) if stream is not None else _CurrentStderr()
    )
    setattr(handler, _OURS, True)
    colors = chosen_format is LogFormat.CONSOLE and default_log_format(stream) is LogFormat.CONSOLE

    def structlog_formatter() -> logging.Formatter:
        _configure_structlog()
        return _structlog_formatter(chosen_format, colors)

    handler.setFormatter(_FormatterOnFirstRecord(structlog_formatter))
    for log_filter in _filters(chosen_level):
        handler.addFilter(log_filter)

    root = logging.getLogger()
    for existing in list(root.handlers):
        if getattr(existing, _OURS, False):
            root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(chosen_level)
    # Libraries that bring their own handlers would print twice, in their format.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        library = logging.getLogger(name)
        library.handlers.clear()
        library.propagate = True
        library.setLevel(logging.NOTSET)  # the root's level decides, as for everyone
    # Code that already uses structlog's own loggers joins the same handler now; code
    # that imports structlog later joins it at the first line formatted.
    if "structlog" in sys.modules:
        _configure_structlog()
    return handler


def _structlog_formatter(log_format: LogFormat, colors: bool) -> logging.Formatter:
    import structlog

    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared(),
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            *_renderer(log_format, colors),
        ],
    )


def _configure_structlog() -> None:
    """structlog's own loggers (``structlog.get_logger()``) write through the standard
    library, so they reach the one handler. Repeats: harmless."""
    import structlog

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )


class _FormatterOnFirstRecord(logging.Formatter):
    """Formats with the formatter ``build`` returns, built for the first record.

    No lock: ``logging.Handler.handle`` holds the handler's lock while it formats, so
    two threads never build it at once.
    """

    def __init__(self, build: Callable[[], logging.Formatter]) -> None:
        super().__init__()
        self._build = build
        self._built: logging.Formatter | None = None

    def format(self, record: logging.LogRecord) -> str:
        if self._built is None:
            self._built = self._build()
        return self._built.format(record)
