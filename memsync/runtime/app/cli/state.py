"""``memsync state show | reset``: where a connector stands, and moving it by hand."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from memsync.runtime.app.cli.common import (
    EXIT_FAILED,
    ConnectorName,
    JsonOption,
    app,
    console,
    errors,
    open_services,
    parse_moment,
    print_table,
)

__all__ = ["state_app"]

state_app = typer.Typer(help="Connector state: cursors, last runs, lag.", no_args_is_help=True)
app.add_typer(state_app, name="state")


@state_app.command("show")
def state_show(
    name: ConnectorName,
    as_json: JsonOption = False,
) -> None:
    """The connector's cursor, its last run and last success, and its lag (now - the end
    of the last window it read completely)."""
    with open_services() as services:
        config = services.connector(name)
        state = services.runs.state(config.tenant, config.name, services.clock.now())
    if as_json:
        from pydantic import TypeAdapter

        from memsync.runtime.sync.repository import ConnectorState

        dumped = TypeAdapter(ConnectorState).dump_python(state, mode="json")
        typer.echo(json.dumps(dumped, indent=2))
        return
    last, success = state.last_run, state.last_success
    print_table(
        f"state of connector {name!r} (tenant {config.tenant!r})",
        ("cursor", "last run", "last success", "lag"),
        [
            (
                state.cursor.position.isoformat() if state.cursor else "none (reads from start)",
                f"{last.status.value} {last.started_at.isoformat(timespec='seconds')}"
                if last
                else "never",
                success.started_at.isoformat(timespec="seconds") if success else "never",
                f"{state.lag_seconds:,.0f}s" if state.lag_seconds is not None else "-",
            )
        ],
    )


@state_app.command("reset")
def state_reset(
    name: ConnectorName,
    to: Annotated[
        str | None,
        typer.Option(help="move the cursor to this date (default: remove it; read from start)"),
    ] = None,
) -> None:
    """Move the connector's cursor by hand, backwards too, or remove it so the next sync
    reads from its configured ``start``. Re-reading is safe: keys keep it idempotent."""
    from memsync.runtime.sync import RunInProgress

    moment = None if to is None else parse_moment(to, "--to")
    with open_services() as services:
        config = services.connector(name)
        try:
            cursor = services.runs.reset_cursor(
                config.tenant, config.name, to=moment, now=services.clock.now()
            )
        except RunInProgress as error:
            errors.print(str(error), markup=False)
            raise typer.Exit(EXIT_FAILED) from None
    where = cursor.position.isoformat() if cursor else "removed: the next sync reads from start"
    console.print(f"cursor of {name!r}: {where}", markup=False)
