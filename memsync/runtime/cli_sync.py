"""``memsync sync``, ``backfill``, ``runs`` and ``connectors``: the sync runner's commands.

Registered on the main app by :func:`register`, which receives the main CLI's
``settings`` and ``open_store`` functions (this module never imports ``cli``, so
``python -m memsync.runtime.cli`` does not load the CLI twice).

Exit codes of ``sync`` and ``backfill``: 0 succeeded, 3 partial, 1 failed or another run
of the connector is running, 2 bad usage or configuration.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from memsync.clock import SystemClock
from memsync.connectors import (
    ConnectorConfigError,
    ConnectorRegistry,
    load_registry,
    parse_duration,
)
from memsync.connectors.base import Connector
from memsync.connectors.config import ConnectorConfig
from memsync.runtime.config import Settings
from memsync.runtime.jobs.queue import SYNC, JobQueue
from memsync.runtime.jobs.triggers import ingest_service
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunInProgress, RunLost, RunRecord, RunStatus, SyncRunner
from memsync.runtime.sync.records import COUNTERS

__all__ = [
    "EXIT_FOR_STATUS",
    "connector_configs",
    "print_run",
    "register",
    "sync_bundled_workspace",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3
EXIT_FOR_STATUS = {
    RunStatus.SUCCEEDED: 0,
    RunStatus.PARTIAL: EXIT_PARTIAL,
    RunStatus.FAILED: EXIT_FAILED,
    RunStatus.RUNNING: EXIT_FAILED,
}
DEMO_WORKSPACE_CONNECTOR = "demo-workspace"

console = Console(soft_wrap=True)
errors = Console(stderr=True, soft_wrap=True, highlight=False)

AnyConnector = Connector[Any, Any]


def _usage_error(message: str) -> typer.Exit:
    errors.print(message, markup=False)
    return typer.Exit(EXIT_USAGE)


def _source_label(settings: Settings) -> str:
    return str(settings.source_path) if settings.source_path else "the configuration"


def connector_configs(registry: ConnectorRegistry, settings: Settings) -> list[ConnectorConfig]:
    """The configured connectors, validated; exit 2 naming the file, connector and field
    of every problem if the connectors section is invalid."""
    try:
        return registry.parse_configs(settings.connectors, source=_source_label(settings))
    except ConnectorConfigError as error:
        raise _usage_error("configuration error\n" + "\n".join(error.problems)) from None


def _configured(registry: ConnectorRegistry, settings: Settings, name: str) -> ConnectorConfig:
    """The configuration of the connector called ``name``; exit 2 if there is none."""
    configs = connector_configs(registry, settings)
    for config in configs:
        if config.name == name:
            return config
    known = ", ".join(config.name for config in configs) or "none"
    source = _source_label(settings)
    raise _usage_error(f"no connector named '{name}' in {source} (connectors configured: {known})")


def _build_connector(registry: ConnectorRegistry, settings: Settings, name: str) -> AnyConnector:
    """The configured connector called ``name``; exit 2 if there is none."""
    return registry.build(_configured(registry, settings, name))


def _parse_moment(text: str, option: str) -> datetime:
    """A date (midnight UTC) or an ISO 8601 datetime (naive: UTC)."""
    value = text.strip()
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), time(0), tzinfo=UTC)
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise _usage_error(
            f"{option} '{text}' is not a date (e.g. 2026-01-31 or 2026-01-31T12:00:00Z)"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _log_unless_interactive() -> bool:
    """Structured ``key=value`` log lines on stderr unless a person is watching;
    returns whether one is (then progress is drawn instead)."""
    interactive = errors.is_terminal
    if not interactive:
        logging.basicConfig(
            stream=sys.stderr,
            level=logging.INFO,
            format="%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
        )
    return interactive


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
        f"skipped {record.skipped}, errors {record.errors}; window {window_start} .. "
        f"{record.window_end.isoformat()}; {record.duration_seconds or 0:.2f}s",
        markup=False,
        highlight=False,
    )
    if record.error:
        out.print(f"  error: {record.error}", markup=False, highlight=False)
    for reason in record.skipped_reasons:
        out.print(f"  skipped: {reason}", markup=False, highlight=False)


def sync_bundled_workspace(store: Store, tenant: str) -> RunRecord:
    """Sync the workspace connector over the example workspace shipped with memsync."""
    root = Path(str(resources.files("memsync.runtime") / "samples" / "workspace"))
    registry = load_registry()
    [config] = registry.parse_configs(
        [
            {
                "name": DEMO_WORKSPACE_CONNECTOR,
                "type": "workspace",
                "subject": "workspace:{workspace_id}",
                "root": str(root),
                "tenant": tenant,
            }
        ],
        source="the bundled demo",
    )
    return SyncRunner(store).sync(registry.build(config))


def register(
    app: typer.Typer,
    settings: Callable[[], Settings],
    open_store: Callable[[Settings], Store],
) -> None:
    """Add the sync commands to ``app``."""
    runs_app = typer.Typer(help="Sync run records.", no_args_is_help=True)
    connectors_app = typer.Typer(help="Connector types.", no_args_is_help=True)
    app.add_typer(runs_app, name="runs")
    app.add_typer(connectors_app, name="connectors")

    def run_to_exit(
        action: Callable[[SyncRunner, AnyConnector], RunRecord], name: str, as_json: bool
    ) -> NoReturn:
        loaded = settings()
        connector = _build_connector(load_registry(), loaded, name)
        store = open_store(loaded)
        queue = JobQueue.from_settings(store, loaded.jobs)
        runner = SyncRunner(store, ingest=ingest_service(store, loaded.jobs, queue))
        try:
            record = action(runner, connector)
        except (RunInProgress, RunLost) as error:
            errors.print(str(error), markup=False)
            raise typer.Exit(EXIT_FAILED) from None
        finally:
            connector.close()
            store.dispose()
        print_run(record, as_json=as_json)
        raise typer.Exit(EXIT_FOR_STATUS[record.status])

    @app.command("sync")
    def sync_command(
        name: Annotated[str, typer.Argument(help="connector name from the configuration")],
        as_json: Annotated[
            bool, typer.Option("--json", help="print the run record as JSON")
        ] = False,
        async_: Annotated[
            bool, typer.Option("--async", help="enqueue a sync job for a worker; print its id")
        ] = False,
    ) -> None:
        """Run one incremental sync of a connector now and print its run record.

        Exit 0 succeeded, 3 partial, 1 failed (or the connector is already running:
        a second run fails fast instead of waiting), 2 bad configuration. With
        ``--async``: enqueue it as a job (joining one already pending) and print its id.
        """
        if async_:
            enqueue_sync(name)
            return
        _log_unless_interactive()
        run_to_exit(lambda runner, connector: runner.sync(connector), name, as_json)

    def enqueue_sync(name: str) -> None:
        loaded = settings()
        config = _configured(load_registry(), loaded, name)
        store = open_store(loaded)
        try:
            job, _ = JobQueue.from_settings(store, loaded.jobs).enqueue(
                config.tenant, SYNC, name, now=SystemClock().now()
            )
        finally:
            store.dispose()
        typer.echo(str(job.id))

    @app.command("backfill")
    def backfill_command(
        name: Annotated[str, typer.Argument(help="connector name from the configuration")],
        since: Annotated[str, typer.Option(help="start date, e.g. 2026-01-01")],
        until: Annotated[str | None, typer.Option(help="end (default: now)")] = None,
        slice_: Annotated[str, typer.Option("--slice", help="slice length, e.g. 1d, 6h")] = "1d",
        as_json: Annotated[
            bool, typer.Option("--json", help="print the run record as JSON")
        ] = False,
    ) -> None:
        """Re-read a range in checkpointed slices; re-running the same command resumes.

        The incremental cursor is never moved. Exit codes as for ``sync``.
        """
        try:
            slice_length = parse_duration(slice_, field="--slice")
        except ValueError as error:
            raise _usage_error(str(error)) from None
        if slice_length <= timedelta(0):
            raise _usage_error("--slice must be a positive duration (e.g. 1d)")
        start = _parse_moment(since, "--since")
        end = None if until is None else _parse_moment(until, "--until")
        interactive = _log_unless_interactive()

        def backfill(runner: SyncRunner, connector: AnyConnector) -> RunRecord:
            try:
                if not interactive:
                    return runner.backfill(
                        connector, since=start, until=end, slice_length=slice_length
                    )
                with Progress(console=errors, transient=True) as progress:
                    task = progress.add_task(f"backfill {name}", total=None)
                    return runner.backfill(
                        connector,
                        since=start,
                        until=end,
                        slice_length=slice_length,
                        on_slice=lambda done, total: progress.update(
                            task, completed=done, total=total
                        ),
                    )
            except ValueError as error:
                raise _usage_error(str(error)) from None

        run_to_exit(backfill, name, as_json)

    @runs_app.command("list")
    def runs_list(
        connector: Annotated[str | None, typer.Option(help="only this connector")] = None,
        tenant: Annotated[str, typer.Option(help="tenant")] = "default",
        limit: Annotated[int, typer.Option(min=1, max=1000)] = 20,
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    ) -> None:
        """Recent runs, newest first."""
        store = open_store(settings())
        records = SyncRunner(store).repository.list_runs(tenant, connector=connector, limit=limit)
        store.dispose()
        if as_json:
            console.print_json(json.dumps([record.to_json() for record in records]))
            return
        table = Table(title=f"sync runs of tenant {tenant!r}")
        for column in ("id", "connector", "kind", "status", "started", *COUNTERS):
            table.add_column(column)
        for record in records:
            table.add_row(
                str(record.id),
                record.connector,
                record.kind.value,
                record.status.value,
                record.started_at.isoformat(timespec="seconds"),
                *(str(count) for count in record.counts().values()),
            )
        console.print(table)

    @runs_app.command("show")
    def runs_show(
        run_id: Annotated[str, typer.Argument(help="run id (from `memsync runs list`)")],
        tenant: Annotated[str, typer.Option(help="tenant")] = "default",
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    ) -> None:
        """One run record."""
        try:
            parsed = uuid.UUID(run_id)
        except ValueError:
            raise _usage_error(f"run id '{run_id}' is not a UUID") from None
        store = open_store(settings())
        record = SyncRunner(store).repository.get_run(tenant, parsed)
        store.dispose()
        if record is None:
            errors.print(f"no run {run_id} for tenant '{tenant}'", markup=False)
            raise typer.Exit(EXIT_FAILED)
        print_run(record, as_json=as_json)

    @connectors_app.command("list")
    def connectors_list(
        as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    ) -> None:
        """Every installed connector type: key policy, example key and rationale."""
        infos = list(load_registry())
        if as_json:
            console.print_json(
                json.dumps(
                    [
                        {
                            "type": info.type,
                            "key_policy": info.key_policy.value,
                            "example_key": info.example_key,
                            "key_rationale": info.key_rationale,
                            "origin": info.origin,
                        }
                        for info in infos
                    ]
                )
            )
            return
        table = Table(title="connector types", show_lines=True)
        for column in ("type", "key policy", "example key", "rationale"):
            table.add_column(column, overflow="fold")
        for info in infos:
            table.add_row(info.type, info.key_policy.value, info.example_key, info.key_rationale)
        console.print(table)
