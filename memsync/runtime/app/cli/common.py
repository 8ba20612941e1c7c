"""What every command shares: the ``memsync`` app, the consoles, exit codes, and the
one way a command gets its configuration and services.

Exit codes: 0 success, 1 failure, 2 bad usage or configuration (the message names the
file and the field), 3 partial success, 4 a service did not answer; a foreground
``sync`` or ``backfill`` stopped by a signal exits 128 + its number (:mod:`.sync`).

Start-up: ``memsync --help`` and the light commands must start in well under a second,
so the modules of this package import at their top only what declaring the commands
needs (typer and the enums of option types). Everything a command does is imported
inside it: rich when the command first prints through :data:`console` or
:data:`errors`, the store (SQLAlchemy) when it opens one, the HTTP stack when it
serves, a connector's client library when it builds that connector.
``tests/e2e/test_cli_startup.py`` holds this in place; docs/benchmarks.md has numbers.
"""

from __future__ import annotations

import copy
import os
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

import memsync
from memsync.runtime.app.observability import (
    LOG_FORMAT_ENV,
    LOG_LEVEL_ENV,
    LogFormat,
    parse_log_level,
)

if TYPE_CHECKING:
    from rich.console import Console

    from memsync.runtime.app.config import ConnectorCheck, Settings
    from memsync.runtime.app.services import Services

__all__ = [
    "EXIT_FAILED",
    "EXIT_PARTIAL",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "ConnectorName",
    "JsonOption",
    "TenantOption",
    "actionable",
    "app",
    "console",
    "debugging",
    "described",
    "errors",
    "grid",
    "loaded_store_url",
    "logging_options",
    "open_services",
    "parse_moment",
    "print_plain",
    "print_table",
    "progress",
    "resolve_id",
    "settings",
    "usage_error",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
EXIT_UNAVAILABLE = 4
"""A service memsync needs (the store, the LLM endpoint) did not answer."""

app = typer.Typer(
    help="memsync: scheduled connector sync for agent memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class _ConsoleOnFirstUse:
    """Stands for a rich ``Console`` made when it is first used: rich costs a command
    about 20 ms to import, and typer imports it only to print a help page. Calling a
    method works through it; to hand the console to rich itself (``Progress``), pass
    :func:`made_console` of it."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def is_made(self) -> bool:
        """Whether the console exists (something printed through rich already)."""
        return self._console is not None

    @property
    def is_stderr(self) -> bool:
        """Whether this console prints to stderr (:data:`errors`) or stdout."""
        return bool(self._options.get("stderr", False))

    def made(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.made(), name)


def made_console(console: Console) -> Console:
    """The rich ``Console`` itself that ``console`` (:data:`console`, :data:`errors`, or
    a console a test passed) prints to."""
    standing_in = cast("Any", console)
    return standing_in.made() if isinstance(standing_in, _ConsoleOnFirstUse) else console


def say_from_signal_handler(line: str) -> None:
    """Write ``line`` to stderr from a signal handler. A handler runs between two
    bytecodes of whatever the main thread was doing, an import included (the log
    pipeline imports structlog at its first line): a handler that imports, as rich's
    first print does, can fail inside that import and lose the signal. This imports
    nothing."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


console = cast("Console", _ConsoleOnFirstUse(soft_wrap=True))
errors = cast("Console", _ConsoleOnFirstUse(stderr=True, soft_wrap=True, highlight=False))

TenantOption = Annotated[str, typer.Option(help="tenant")]
JsonOption = Annotated[bool, typer.Option("--json", help="print JSON")]
ConnectorName = Annotated[str, typer.Argument(help="connector name from the configuration")]


class _Options:
    config_path: Path | None = None
    debug: bool = False
    store_url: str | None = None
    log_format: LogFormat | None = None
    log_level: int | None = None


_options = _Options()


def _print_version(wanted: bool) -> None:
    if wanted:
        typer.echo(f"memsync {memsync.__version__}")
        raise typer.Exit()


@app.callback()
def _global_options(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            help="YAML configuration file (default: $MEMSYNC_CONFIG, else built-in defaults).",
            dir_okay=False,
        ),
    ] = None,
    log_format: Annotated[
        LogFormat | None,
        typer.Option(
            "--log-format",
            envvar=LOG_FORMAT_ENV,
            case_sensitive=False,
            help="log lines on stderr: console or json (default: console on a terminal, "
            "else json).",
        ),
    ] = None,
    log_level: Annotated[
        str,
        typer.Option(
            "--log-level",
            envvar=LOG_LEVEL_ENV,
            help="debug, info, warning, error or critical.",
        ),
    ] = "info",
    debug: Annotated[
        bool, typer.Option("--debug", help="show tracebacks instead of one-line errors")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", help="print the version and exit", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    _options.config_path = config
    _options.debug = debug
    try:
        _options.log_level = parse_log_level(log_level)
    except ValueError as error:
        raise usage_error(f"--log-level: {error}") from None
    _options.log_format = log_format


# The global options above that take a value: what :func:`app_for` skips to find the
# command's name (tests/unit/test_cli_dispatch.py checks it against the options).
GLOBAL_OPTIONS_TAKING_VALUES = frozenset({"--config", "-c", "--log-format", "--log-level"})


def command_name(arguments: Sequence[str]) -> str | None:
    """The name of the command or group ``arguments`` run (the first argument that is
    neither a global option nor an option's value), or ``None`` when there is none."""
    position = 0
    while position < len(arguments):
        argument = arguments[position]
        if argument == "--":
            return arguments[position + 1] if position + 1 < len(arguments) else None
        if not argument.startswith("-") or argument == "-":
            return argument
        position += 2 if argument in GLOBAL_OPTIONS_TAKING_VALUES else 1
    return None


def app_for(arguments: Sequence[str]) -> typer.Typer:
    """``app`` with only the command or group ``arguments`` name, if it has one by that
    name; else the whole ``app`` (``--help``, a misspelt command that wants the list).

    typer turns every command's signature into click parameters before it parses the
    arguments, evaluating each command's annotations: 55 commands cost a light command
    about 20 ms. Narrowed, it converts the one that runs; what it parses and does is
    the same, the one-command app having the same global options and callback.
    """
    from typer.main import get_command_name

    name = command_name(arguments)
    commands = [
        info
        for info in app.registered_commands
        if info.callback is not None
        and (info.name or get_command_name(info.callback.__name__)) == name
    ]
    groups = [info for info in app.registered_groups if info.name == name]
    if not commands and not groups:
        return app
    narrowed = copy.copy(app)
    narrowed.registered_commands = commands
    narrowed.registered_groups = groups
    return narrowed


def start_logging() -> None:
    """Route the process's log records through one handler, in the format and at the
    level the global options chose. Called by every command that does work (through
    :func:`open_services`); one that only prints needs no log pipeline."""
    from memsync.runtime.app.observability import configure_logging

    configure_logging(*logging_options())


def logging_options() -> tuple[LogFormat | None, int | None]:
    """The log format and level the global options chose (``None``: the default), for
    a child process to log as this one does."""
    return _options.log_format, _options.log_level


def usage_error(message: str) -> typer.Exit:
    """Print ``message`` and return the exit (code 2) for the caller to raise."""
    errors.print(message, markup=False)
    return typer.Exit(EXIT_USAGE)


def settings(
    *, check_connectors: ConnectorCheck | None = None, strict_environment: bool = False
) -> Settings:
    """The configuration; exit 2 with the file and field of every problem (see
    :func:`~memsync.runtime.app.config.load_settings` for the arguments)."""
    from memsync.runtime.app.config import ConfigError, load_settings

    try:
        loaded = load_settings(
            _options.config_path,
            check_connectors=check_connectors,
            strict_environment=strict_environment,
        )
    except ConfigError as error:
        raise usage_error(f"configuration error\n{error}") from None
    _options.store_url = loaded.store
    return loaded


def actionable(error: BaseException) -> tuple[str, int] | None:
    """A one-line message and exit code for an error a person can act on (a store or an
    LLM endpoint that does not answer), or ``None`` for one that needs a traceback."""
    # Only reached on failure, so importing the two error modules costs nothing in
    # the common case.
    from sqlalchemy import exc as sa_exc

    from memsync.compile.llm import LLMExtractionError
    from memsync.runtime.app.config import redacted_store_url
    from memsync.runtime.storage.engine import is_store_unavailable

    if isinstance(error, sa_exc.DBAPIError) and is_store_unavailable(error):
        store = redacted_store_url(loaded_store_url())
        reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        return (
            f"memsync: cannot reach the store {store}: {reason}. Check that the database "
            "is running and that `store:` in the configuration (or $MEMSYNC_STORE) names "
            "it; --debug shows the traceback.",
            EXIT_UNAVAILABLE,
        )
    if isinstance(error, LLMExtractionError):
        return (
            f"memsync: compiling failed, nothing was consumed: {error}. Check compile.llm "
            "in the configuration and that the endpoint answers; --debug shows the traceback.",
            EXIT_UNAVAILABLE,
        )
    return None


def debugging() -> bool:
    """Whether tracebacks were asked for (``--debug`` or ``MEMSYNC_DEBUG=1``)."""
    return _options.debug or os.environ.get("MEMSYNC_DEBUG", "") not in ("", "0")


def loaded_store_url() -> str:
    """The store URL of the configuration this command loaded (or the default)."""
    from memsync.runtime.app.config import DEFAULT_STORE

    return _options.store_url or DEFAULT_STORE


@contextmanager
def open_services(loaded: Settings | None = None) -> Iterator[Services]:
    """The process's services over the configured (and migrated) store, closed after.

    A configuration problem found on the way (the connectors section, an unknown
    connector name, a variable the connector in use names that is not set) exits 2
    naming the file and the field; any other error exits 1 with its traceback, scrubbed
    of every known secret as every log line is.

    With the store open the command has started (:func:`~memsync.runtime.app.entry.
    started`): the cyclic collector, paused through start-up, collects again.
    """
    import traceback

    from memsync.runtime.app.config import ConfigError, MissingVariables
    from memsync.runtime.app.entry import started
    from memsync.runtime.app.services import Services, UnknownConnector, UnknownStream
    from memsync.scrub import scrub_every_log_record
    from memsync.timerange import TimeOutOfRange

    configuration = loaded or settings()
    start_logging()
    services = Services.open(configuration)
    # What a command imports and builds to get here lives until it exits.
    started()
    scrub_every_log_record(services.scrubber)
    # A migration that changed data says so once, on whichever command ran it.
    for note in services.migration_notes:
        errors.print(f"migrated: {note}")
    try:
        yield services
    except (MissingVariables, UnknownConnector, UnknownStream, TimeOutOfRange) as error:
        raise usage_error(str(error)) from None
    except ConfigError as error:
        raise usage_error(f"configuration error\n{error}") from None
    # typer's own exits and usage errors (typer carries its own copy of click's).
    except (typer.Exit, typer.Abort, typer.TyperException, typer.BadParameter):
        raise
    except Exception as error:
        said = actionable(error)
        if said is not None and not debugging():
            message, code = said
            errors.print(services.scrubber(message), markup=False, highlight=False)
            raise typer.Exit(code) from None
        # An upstream error may quote a secret; the traceback is printed scrubbed.
        errors.print(services.scrubber(traceback.format_exc()), markup=False, highlight=False)
        raise typer.Exit(EXIT_FAILED) from None
    finally:
        services.close()


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    lines: bool = False,
    out: Console = console,
) -> None:
    """A table for people: long cells fold instead of being cut. When the table is wider
    than the console (a pipe is 80 columns), each row is a block instead, one
    ``column: value`` line per cell (:func:`described`), so no column is squeezed to a
    few characters a line; ``--json`` is there for machines.

    A table that fits, printed to a pipe or a file before rich's console is made, is
    drawn here, as rich draws it there (:func:`grid`): rich's import and layout are
    about 100 M instructions, a store command's sixth beyond ``import sqlalchemy``, for
    box characters that need no colour. On a terminal rich draws it, in colour."""
    listed = [list(row) for row in rows]
    widths = _column_widths(columns, listed)
    if sum(widths) + 3 * len(columns) + 1 > _width(out):
        blocks = [
            described(f"{columns[0]} {row[0]}", list(zip(columns[1:], row[1:], strict=True)))
            for row in listed
        ]
        print_plain("\n\n".join([f"{title}:", *blocks]), out=out)
        return
    if not _prints_to_terminal(out):
        print_plain(grid(title, columns, listed, widths, lines=lines), out=out)
        return
    from rich.table import Table

    table = Table(title=title, show_lines=lines)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in listed:
        table.add_row(*row)
    out.print(table)


def grid(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    widths: Sequence[int],
    *,
    lines: bool = False,
) -> str:
    """``rows`` under ``columns`` in rich's default box (``HEAVY_HEAD``) as rich prints a
    table that fits to a console without colour: the title on its own line, each column
    as wide as its widest line (``widths``) with a space either side, a cell of several
    lines on as many, and with ``lines`` a rule between rows. Unlike rich, a cell's
    text is printed as it is: ``[...]`` is not taken for markup, nor ``:name:`` for an
    emoji."""

    def rule(left: str, line: str, cross: str, right: str) -> str:
        return left + cross.join(line * (width + 2) for width in widths) + right

    def cells(row: Sequence[str], edge: str) -> list[str]:
        split = [cell.splitlines() or [""] for cell in row]
        height = max((len(cell) for cell in split), default=1)
        return [
            edge
            + edge.join(
                f" {_padded(cell[line] if line < len(cell) else '', width)} "
                for cell, width in zip(split, widths, strict=True)
            )
            + edge
            for line in range(height)
        ]

    drawn = [title, rule("┏", "━", "┳", "┓"), *cells(columns, "┃"), rule("┡", "━", "╇", "┩")]
    for position, row in enumerate(rows):
        if lines and position:
            drawn.append(rule("├", "─", "┼", "┤"))
        drawn += cells(row, "│")
    drawn.append(rule("└", "─", "┴", "┘"))
    return "\n".join(drawn)


def print_plain(text: str, *, out: Console = console) -> None:
    """Print ``text`` as it is (no markup, no highlighting) to ``out``. Through
    :data:`console` or :data:`errors` before either printed anything, it is written
    without importing rich (about 100 M instructions, a sixth of what a store command
    costs beyond ``import sqlalchemy``): plain text needs none of it."""
    standing_in = cast("Any", out)
    if isinstance(standing_in, _ConsoleOnFirstUse) and not standing_in.is_made:
        typer.echo(text, err=standing_in.is_stderr)
        return
    out.print(text, markup=False, highlight=False)


def _prints_to_terminal(out: Console) -> bool:
    """Whether ``out`` prints to a terminal, asked without making rich's console when it
    is not made yet (its stream's ``isatty``, as rich asks it)."""
    standing_in = cast("Any", out)
    if isinstance(standing_in, _ConsoleOnFirstUse) and not standing_in.is_made:
        return (sys.stderr if standing_in.is_stderr else sys.stdout).isatty()
    return out.is_terminal


def _width(out: Console) -> int:
    """The columns ``out`` prints in: a made console's own width, else the terminal's
    (as :func:`described` wraps to; 80 for a pipe), so that deciding whether a table
    fits does not import rich."""
    standing_in = cast("Any", out)
    if isinstance(standing_in, _ConsoleOnFirstUse) and not standing_in.is_made:
        import shutil

        return shutil.get_terminal_size().columns
    return out.width


def _column_widths(columns: Sequence[str], rows: list[list[str]]) -> list[int]:
    """Each column's width in a rich table of these cells with no cell folded: its
    widest line, header included, in terminal cells (:func:`_cell_width`)."""
    widest = [_cell_width(column) for column in columns]
    for row in rows:
        for position, cell in enumerate(row):
            longest = max((_cell_width(line) for line in cell.splitlines()), default=0)
            widest[position] = max(widest[position], longest)
    return widest


def _cell_width(text: str) -> int:
    """How many terminal cells ``text`` takes: two for a wide character (CJK, most
    emoji), none for a combining mark, one for any other."""
    import unicodedata

    if text.isascii():
        return len(text)
    return sum(
        0 if unicodedata.combining(char) else 2 if unicodedata.east_asian_width(char) in "WF" else 1
        for char in text
    )


def _padded(text: str, width: int) -> str:
    """``text`` and the spaces that make it ``width`` terminal cells wide."""
    return text + " " * (width - _cell_width(text))


def described(title: str, fields: Sequence[tuple[str, str]]) -> str:
    """A block of text for people: ``title``, then a ``label: value`` line per field,
    each value wrapped under itself to the terminal's width (100 columns at most).
    Plain text, so a command that prints only such blocks never imports rich; a
    value's words (an example key, a URL) are never cut."""
    import shutil
    import textwrap

    width = min(max(shutil.get_terminal_size().columns, 40), 100)
    label_width = max((len(label) for label, _value in fields), default=0) + 1
    lines = [title]
    for label, value in fields:
        lead = f"  {label + ':':<{label_width}} "
        lines += textwrap.wrap(
            value,
            width=width,
            initial_indent=lead,
            subsequent_indent=" " * len(lead),
            break_long_words=False,
            break_on_hyphens=False,
        ) or [lead.rstrip()]
    return "\n".join(lines)


ProgressUpdate = Callable[..., None]
"""Updates a progress line: ``completed=``, ``total=``, ``advance=``, ``description=``."""


@contextmanager
def progress(
    description: str, *, total: float | None = None, hidden: bool = False
) -> Iterator[ProgressUpdate]:
    """A progress line on stderr while the block runs, gone when it ends, for a person
    watching a terminal. Not shown when stderr is not a terminal (a pipe, a log
    collector: they get the log lines) or when ``hidden`` (``--json``).

    Yields rich's ``Progress.update`` for the line, drawing at once, so every update a
    person should see (a batch committed, a subject compiled) is on screen.
    """
    from rich.progress import Progress

    terminal = made_console(errors)
    with Progress(
        console=terminal, transient=True, disable=hidden or not terminal.is_terminal
    ) as bar:
        yield partial(bar.update, bar.add_task(description, total=total), refresh=True)


def resolve_id(value: str, what: str, starting_with: Callable[[str], list[uuid.UUID]]) -> uuid.UUID:
    """A full id, or the one id that starts with ``value`` (as ``git`` takes a short
    commit hash): exit 1 when none does, 2 when several do or ``value`` is not hex."""
    try:
        return uuid.UUID(value)
    except ValueError:
        pass
    try:
        found = starting_with(value)
    except ValueError as error:
        raise usage_error(str(error)) from None
    if not found:
        errors.print(f"no {what} id starts with {value!r}", markup=False)
        raise typer.Exit(EXIT_FAILED)
    if len(found) > 1:
        raise usage_error(f"{value!r} starts more than one {what} id: give more of it")
    return found[0]


def parse_moment(text: str, option: str) -> datetime:
    """A date (midnight UTC) or an ISO 8601 datetime (naive: UTC); exit 2 otherwise,
    also for a time UTC cannot hold (see :func:`memsync.timerange.parse_time`)."""
    from memsync.timerange import parse_time

    try:
        return parse_time(text, option)
    except ValueError as error:
        raise usage_error(str(error)) from None
