"""``memsync sync``, ``backfill``, ``runs`` and ``connectors``: the sync runner's commands.

Exit codes of ``sync`` and ``backfill``: 0 succeeded, 3 partial, 1 failed or another run
of the connector is running, 2 bad usage or configuration, 130 stopped by SIGINT
(Ctrl-C) and 143 stopped by SIGTERM (the run is recorded ``partial``; the next run
continues from its checkpoint).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from memsync.runtime.app.cli.common import (
    EXIT_FAILED,
    EXIT_PARTIAL,
    EXIT_UNAVAILABLE,
    ConnectorName,
    JsonOption,
    TenantOption,
    app,
    console,
    described,
    errors,
    open_services,
    parse_moment,
    print_table,
    progress,
    resolve_id,
    say_from_signal_handler,
    usage_error,
)

if TYPE_CHECKING:
    from rich.console import Console

    from memsync.connectors.config import ConnectorConfig
    from memsync.runtime.app.services import Services
    from memsync.runtime.sync import RunRecord, RunStatus, Tally
    from memsync.runtime.sync.plans import SliceState

__all__ = ["connectors_app", "exit_code", "print_run", "runs_app"]

runs_app = typer.Typer(help="Sync run records.", no_args_is_help=True)
connectors_app = typer.Typer(help="Connector types.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
app.add_typer(connectors_app, name="connectors")

JsonRunOption = Annotated[bool, typer.Option("--json", help="print the run record as JSON")]


def print_run(record: RunRecord, *, as_json: bool = False, out: Console = console) -> None:
    """Print one run record: JSON, or a summary line a person reads."""
    if as_json:
        out.print_json(json.dumps(record.to_json()))
        return
    window_start = record.window_start.isoformat() if record.window_start else "the beginning"
    out.print(
        f"{record.kind.value} run {record.id} of {record.connector} ({record.connector_type}, "
        f"tenant {record.tenant_id}): {record.status.value}; fetched {record.fetched}, "
        f"created {record.created}, duplicates {record.duplicates}, revised {record.revised}, "
        f"tombstoned {record.tombstoned}, skipped {record.skipped}, errors {record.errors}; "
        f"window {window_start} .. "
        f"{record.window_end.isoformat()}; {record.duration_seconds or 0:.2f}s",
        markup=False,
        highlight=False,
    )
    if record.error:
        out.print(f"  error: {record.error}", markup=False, highlight=False)
    for reason in record.skipped_reasons:
        out.print(f"  skipped: {reason}", markup=False, highlight=False)


def _counted(tally: Tally) -> str:
    counted = (
        f"{tally.fetched:,} read, {tally.committed:,} stored ({tally.created:,} new, "
        f"{tally.duplicates:,} duplicates, {tally.revised:,} revised)"
    )
    # Where the stream being read stands, when its connector says (a long re-read).
    return counted if tally.progress is None else f"{counted}; {tally.progress}"


def exit_code(status: RunStatus) -> int:
    """The exit code of a sync or backfill that ended ``status``: 0 succeeded, 3 partial,
    1 failed (or still running: another process's run)."""
    from memsync.runtime.sync import RunStatus

    return {RunStatus.SUCCEEDED: 0, RunStatus.PARTIAL: EXIT_PARTIAL}.get(status, EXIT_FAILED)


def _run_to_exit(
    name: str, as_json: bool, run: Callable[[Services, ConnectorConfig], RunRecord]
) -> NoReturn:
    """Run ``run`` on the configured connector ``name``, print the record, exit by status.

    SIGINT (Ctrl-C) or SIGTERM during the run stops it at its next safe point (after
    the batch in hand commits, or at once in a retry wait): the run is recorded
    ``partial`` (``interrupted: ...``), its committed batches and checkpoint stay, and
    the command exits 130 (SIGINT) or 143 (SIGTERM). A second signal aborts at once.
    """
    from memsync.runtime.sync import RunInProgress, RunInterrupted, RunLost

    with open_services() as services, _stopping_on_signals(name, services) as received:
        config = services.connector(name)
        try:
            record = run(services, config)
        except (RunInProgress, RunLost) as error:
            errors.print(str(error), markup=False)
            raise typer.Exit(EXIT_FAILED) from None
        except RunInterrupted as interrupted:
            print_run(interrupted.record, as_json=as_json)
            raise typer.Exit(_signal_exit_code(received)) from None
        except KeyboardInterrupt:
            errors.print(f"{name}: aborted", markup=False)
            raise typer.Exit(_signal_exit_code(received)) from None
    print_run(record, as_json=as_json)
    raise typer.Exit(exit_code(record.status))


def _signal_exit_code(received: list[signal.Signals]) -> int:
    """128 + the number of the last signal received (the shells' convention): 130 for
    SIGINT, 143 for SIGTERM."""
    return 128 + (received[-1] if received else signal.SIGINT)


@contextmanager
def _stopping_on_signals(name: str, services: Services) -> Iterator[list[signal.Signals]]:
    """While the block runs, SIGINT and SIGTERM request ``services.stop`` (saying so in
    one line) and a second one raises ``KeyboardInterrupt``; yields the signals
    received, in order. The handlers in place before are put back after."""
    received: list[signal.Signals] = []

    def handle(signum: int, _frame: FrameType | None) -> None:
        received.append(signal.Signals(signum))
        if len(received) > 1:
            raise KeyboardInterrupt
        services.stop.request_stop()
        say_from_signal_handler(
            f"{received[0].name}: stopping {name} at the next safe point; what is committed "
            "stays (again to abort at once)"
        )

    before = {each: signal.signal(each, handle) for each in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for each, handler in before.items():
            signal.signal(each, handler)


@app.command("sync")
def sync_command(
    name: ConnectorName,
    as_json: JsonRunOption = False,
    async_: Annotated[
        bool, typer.Option("--async", help="enqueue a sync job for a worker; print its id")
    ] = False,
    full_refresh: Annotated[
        bool,
        typer.Option(
            "--full-refresh", help="re-read from the configured start, whatever the checkpoints"
        ),
    ] = False,
) -> None:
    """Run one incremental sync of a connector now and print its run record.

    Exit 0 succeeded, 3 partial, 1 failed (or the connector is already running: a second
    run fails fast instead of waiting), 2 bad configuration, 130/143 stopped by Ctrl-C or
    SIGTERM at the next safe point (recorded partial; run again to continue from the
    checkpoint; a second Ctrl-C aborts at once). With ``--async``: enqueue it
    as a job (joining one already pending) and print its id. ``--full-refresh`` re-reads
    from the connector's ``start`` (keys keep it idempotent; checkpoints never move back).
    """
    if async_ and full_refresh:
        raise usage_error("--full-refresh runs in the foreground; leave out --async")
    if async_:
        from memsync.runtime.app.handlers import SYNC_JOB

        with open_services() as services:
            config = services.connector(name)
            job, _ = services.queue.enqueue(config.tenant, SYNC_JOB, name, now=services.clock.now())
        typer.echo(str(job.id))
        return

    def sync(services: Services, config: ConnectorConfig) -> RunRecord:
        # A person at a terminal sees what the run has read and stored as each batch
        # commits; pipes and log collectors get the log lines.
        with progress(f"sync {name}", hidden=as_json) as update:
            return services.run_sync(
                config,
                full_refresh=full_refresh,
                on_batch=lambda tally: update(description=f"sync {name}: {_counted(tally)}"),
            )

    _run_to_exit(name, as_json, sync)


@app.command("check")
def check_command(name: ConnectorName) -> None:
    """Reach the connector's source once with its credentials, storing nothing: exit 0
    when it answers, 1 when it refuses (credentials, a missing resource), 4 when it
    does not answer."""
    from memsync.connectors import RateLimitExhausted, RetryableError, StopRun

    with open_services() as services:
        config = services.connector(name)
        try:
            with services.connector_instance(config) as connector:
                said = connector.check(services.clock.now())
        except StopRun as error:
            errors.print(f"{name}: refused: {error}", markup=False)
            raise typer.Exit(EXIT_FAILED) from None
        except (RetryableError, RateLimitExhausted) as error:
            errors.print(f"{name}: no answer: {error}", markup=False)
            raise typer.Exit(EXIT_UNAVAILABLE) from None
    console.print(f"{name} ({config.type}): {said}", markup=False)


@app.command("backfill")
def backfill_command(
    name: ConnectorName,
    since: Annotated[str, typer.Option(help="start date, e.g. 2026-01-01")],
    until: Annotated[str | None, typer.Option(help="end (default: now)")] = None,
    slice_: Annotated[str, typer.Option("--slice", help="slice length, e.g. 1d, 6h")] = "1d",
    as_json: JsonRunOption = False,
) -> None:
    """Re-read a range in checkpointed slices; re-running the same command resumes.

    The incremental checkpoints are never moved. Exit codes as for ``sync``.
    """
    from memsync.connectors import parse_duration

    try:
        slice_length = parse_duration(slice_, field="--slice")
    except ValueError as error:
        raise usage_error(str(error)) from None
    if slice_length <= timedelta(0):
        raise usage_error("--slice must be a positive duration (e.g. 1d)")
    start = parse_moment(since, "--since")
    end = None if until is None else parse_moment(until, "--until")

    def backfill(services: Services, config: ConnectorConfig) -> RunRecord:
        # A person watching sees slices done and records stored; a log collector gets
        # the slice lines.
        try:
            with progress(f"backfill {name}", hidden=as_json) as update:
                return services.run_backfill(
                    config,
                    since=start,
                    until=end,
                    slice_length=slice_length,
                    on_slice=lambda done, total: update(completed=done, total=total),
                    on_batch=lambda tally: update(
                        description=f"backfill {name}: {_counted(tally)}"
                    ),
                )
        except ValueError as error:
            raise usage_error(str(error)) from None

    _run_to_exit(name, as_json, backfill)


@runs_app.command("list")
def runs_list(
    connector: Annotated[str | None, typer.Option(help="only this connector")] = None,
    tenant: TenantOption = "default",
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    as_json: JsonOption = False,
) -> None:
    """Recent runs, newest first."""
    from memsync.runtime.sync.records import COUNTERS

    with open_services() as services:
        records = services.runs.list_runs(tenant, connector=connector, limit=limit)
    if as_json:
        typer.echo(json.dumps([record.to_json() for record in records], indent=2))
        return
    print_table(
        f"sync runs of tenant {tenant!r}",
        ("id", "connector", "kind", "status", "started", *COUNTERS),
        (
            (
                str(record.id),
                record.connector,
                record.kind.value,
                record.status.value,
                record.started_at.isoformat(timespec="seconds"),
                *(str(count) for count in record.counts().values()),
            )
            for record in records
        ),
    )


@runs_app.command("show")
def runs_show(
    run_id: Annotated[
        str, typer.Argument(help="run id (from `memsync runs list`), or its unique first digits")
    ],
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """One run record; for a backfill, how far each slice of it got."""
    with open_services() as services:
        runs = services.runs
        parsed = resolve_id(run_id, "run", lambda start: runs.run_ids_starting_with(tenant, start))
        record = runs.get_run(tenant, parsed)
        slices = (
            runs.backfill_slices(tenant, record.backfill_id)
            if record is not None and record.backfill_id is not None
            else []
        )
    if record is None:
        errors.print(f"no run {run_id} for tenant '{tenant}'", markup=False)
        raise typer.Exit(EXIT_FAILED)
    if as_json:
        typer.echo(json.dumps({**record.to_json(), **_slices_json(slices)}, indent=2))
        return
    print_run(record)
    for line in _slices_said(slices):
        console.print(line, markup=False, highlight=False)


def _slices_json(slices: list[SliceState]) -> dict[str, Any]:
    """Where a backfill's slices stand, for ``--json`` (nothing for another run): the
    counts, and each slice not done with how far it got."""
    if not slices:
        return {}
    return {
        "slices_total": len(slices),
        "slices_done": sum(piece.done_at is not None for piece in slices),
        "slices_not_done": [
            {"start": piece.start.isoformat(), "end": piece.end.isoformat()}
            | piece.progress.to_json()
            for piece in slices
            if piece.done_at is None
        ],
    }


def _slices_said(slices: list[SliceState]) -> list[str]:
    """Where a backfill's slices stand, for people: how many are done, and each slice
    begun but not done with the streams it read and how far it got in the next."""
    if not slices:
        return []
    done = sum(piece.done_at is not None for piece in slices)
    lines = [f"  slices: {done:,} of {len(slices):,} done"]
    begun = [
        piece
        for piece in slices
        if piece.done_at is None
        and (piece.progress.streams_done or piece.progress.position is not None)
    ]
    for piece in begun:
        reach = piece.progress
        parts = [f"read completely: {', '.join(reach.streams_done)}"] if reach.streams_done else []
        if reach.stream is not None and reach.position is not None:
            parts.append(
                f"{reach.stream!r} committed up to {reach.position.isoformat()} "
                "(resumes there, less the overlap)"
            )
        lines.append(
            f"  slice {piece.start.isoformat()} .. {piece.end.isoformat()}: {'; '.join(parts)}"
        )
    not_begun = len(slices) - done - len(begun)
    if not_begun:
        lines.append(f"  {not_begun:,} not begun")
    return lines


@connectors_app.command("list")
def connectors_list(
    as_json: JsonOption = False,
) -> None:
    """Every installed connector type: key policy, example key and rationale, and the
    deletions it observes. A plugin that fails to load is listed as broken, with the
    reason; the others work."""
    from memsync.connectors import load_registry

    registry = load_registry()
    infos = list(registry)
    if as_json:
        listed: list[dict[str, str]] = [
            {
                "type": info.type,
                "key_policy": info.key_policy.value,
                "example_key": info.example_key,
                "key_rationale": info.key_rationale,
                "deletions": info.deletions,
                "origin": info.origin,
            }
            for info in infos
        ]
        listed += [{"type": name, "broken": reason} for name, reason in registry.broken.items()]
        typer.echo(json.dumps(listed, indent=2, ensure_ascii=False))
        return
    # A block per type, not a table: five columns of prose folded into a terminal's
    # width read badly, and rich (its import and layout) would be most of what this
    # command costs.
    blocks = [
        described(
            f"{info.type} (key policy: {info.key_policy.value})",
            (
                ("example key", info.example_key),
                ("rationale", info.key_rationale),
                ("deletions", info.deletions or "none observed"),
            ),
        )
        for info in infos
    ]
    blocks += [
        described(f"{name} (BROKEN)", (("reason", reason),))
        for name, reason in registry.broken.items()
    ]
    typer.echo("\n\n".join(blocks))
