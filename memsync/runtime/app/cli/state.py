"""``memsync state show | reset`` and ``memsync forget``: where a connector stands,
moving it by hand, and removing what it stored."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from memsync.runtime.app.cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    ConnectorName,
    JsonOption,
    app,
    console,
    errors,
    open_services,
    parse_moment,
    print_table,
    usage_error,
)

if TYPE_CHECKING:
    from memsync.runtime.sync.webhook_deliveries import WebhookState

__all__ = ["state_app"]

state_app = typer.Typer(
    help="Connector state: checkpoints per stream, last runs, lag.", no_args_is_help=True
)
app.add_typer(state_app, name="state")


@state_app.command("show")
def state_show(
    name: ConnectorName,
    as_json: JsonOption = False,
) -> None:
    """The connector's last run, last success and lag, and per stream its checkpoint, its
    last run and how that ended for it, its last success and its lag (now - the end of
    the last window it read completely); with a ``webhook:``, its deliveries counted by
    outcome, its last refusal, and a push gap (to stderr) when re-reads keep finding
    records no delivery brought."""
    with open_services() as services:
        config = services.connector(name)
        state = services.connector_state(config)
    if as_json:
        from pydantic import TypeAdapter

        from memsync.runtime.sync.repository import ConnectorState

        dumped = TypeAdapter(ConnectorState).dump_python(state, mode="json")
        typer.echo(json.dumps(dumped, indent=2))
        return
    last, success = state.last_run, state.last_success
    print_table(
        f"state of connector {name!r} (tenant {config.tenant!r})",
        ("last run", "last success", "lag"),
        [
            (
                f"{last.status.value} {_moment(last.started_at)}" if last else "never",
                _moment(success.started_at) if success else "never",
                _lag(state.lag_seconds),
            )
        ],
    )
    print_table(
        "streams",
        ("stream", "checkpoint", "last run", "last success", "lag"),
        [
            (
                stream.stream if stream.declared else f"{stream.stream} (no longer read)",
                _moment(stream.cursor.position) if stream.cursor else "none (reads from start)",
                f"{stream.last_status.value} {_moment(stream.last_run_at)}"
                if stream.last_status is not None and stream.last_run_at is not None
                else "never",
                _moment(stream.last_success_at) if stream.last_success_at else "never",
                _lag(stream.lag_seconds),
            )
            for stream in state.streams
        ],
    )
    # Where a stream stands within a read that takes several runs, as its connector says.
    for stream in state.streams:
        if stream.cursor is not None and stream.cursor.note is not None:
            console.print(f"{stream.stream}: {stream.cursor.note}", markup=False)
    if state.webhook is not None:
        _print_webhook(state.webhook)


def _print_webhook(webhook: WebhookState) -> None:
    def last(moment: datetime | None, what: str = "") -> str:
        return f"{what}{_moment(moment)}" if moment is not None else "never"

    refused = f"{webhook.last_refusal} ({webhook.last_refusal_status}) "
    print_table(
        "webhook deliveries",
        ("outcome", "deliveries", "last"),
        [
            ("stored", f"{webhook.stored:,}", last(webhook.last_stored_at)),
            ("revised", f"{webhook.revised:,}", ""),
            ("duplicate", f"{webhook.duplicate:,}", ""),
            ("ignored", f"{webhook.ignored:,}", ""),
            ("refused", f"{webhook.refused:,}", last(webhook.last_refused_at, refused)),
            ("any", f"{webhook.total:,}", last(webhook.last_delivery_at)),
        ],
    )
    gap = webhook.push_gap
    if gap is None:
        return
    # A broken webhook sends nothing to count: the re-reads finding its records show it.
    accepted = gap.last_accepted_at
    since = f"accepted since {_moment(accepted)}" if accepted is not None else "ever accepted"
    errors.print(
        f"push gap: no delivery with records {since}, while {gap.runs:,} "
        f"re-read(s) from {_moment(gap.first_found_at)} on found "
        f"{gap.new_records:,} new or changed record(s); check the webhook at the vendor "
        "(its URL, its events, its secret) and the refusals above",
        markup=False,
    )


def _moment(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _lag(seconds: float | None) -> str:
    return f"{seconds:,.0f}s" if seconds is not None else "-"


@state_app.command("reset")
def state_reset(
    name: ConnectorName,
    stream: Annotated[
        str | None,
        typer.Option(help="reset only this stream (default: every stream of the connector)"),
    ] = None,
    to: Annotated[
        str | None,
        typer.Option(help="move the checkpoint to this date (default: remove it; read from start)"),
    ] = None,
) -> None:
    """Move the checkpoint of one stream, or of every stream, by hand, backwards too, or
    remove it so the next sync reads from the configured ``start``. Re-reading is safe:
    keys keep it idempotent."""
    from memsync.runtime.sync import RunInProgress

    moment = None if to is None else parse_moment(to, "--to")
    from memsync.timerange import check_source_time

    with open_services() as services:
        config = services.connector(name)
        if moment is not None:
            # The check the service makes too, here to name the option as typed.
            moment = check_source_time(
                "--to", moment, now=services.clock.now(), overlap=config.overlap
            )
        try:
            services.reset_connector_state(config, stream=stream, to=moment)
        except RunInProgress as error:
            errors.print(str(error), markup=False)
            raise typer.Exit(EXIT_FAILED) from None
    which = f"stream {stream!r} of {name!r}" if stream else f"every stream of {name!r}"
    where = moment.isoformat() if moment else "removed: the next sync reads from start"
    console.print(f"checkpoint of {which}: {where}", markup=False)


@app.command("forget")
def forget(
    connector: Annotated[
        str, typer.Option("--connector", help="the connector instance whose data to remove")
    ],
    yes: Annotated[
        bool, typer.Option("--yes", help="remove it (without: say what would go, change nothing)")
    ] = False,
    tenant: Annotated[
        str | None,
        typer.Option(
            help="the tenant, for a connector no longer in the configuration (default: the "
            "configured connector's, else 'default')"
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Remove a connector's data: its episodes and their revisions, the memories derived
    only from them, its checkpoints, run records and backfills, the resolution records it
    recorded; nothing of any other connector. Without --yes, print what would be removed
    and exit 2, changing nothing."""
    from pydantic import TypeAdapter

    from memsync.runtime.app.removals import ConnectorForgotten
    from memsync.runtime.app.services import UnknownConnector
    from memsync.runtime.sync import RunInProgress

    with open_services() as services:
        try:
            config = services.connector(connector)
        except UnknownConnector:
            where = tenant or "default"
        else:
            if tenant is not None and tenant != config.tenant:
                raise usage_error(
                    f"connector {connector!r} belongs to tenant {config.tenant!r}, not {tenant!r}"
                )
            where = config.tenant
        try:
            result = services.forget_connector(where, connector, dry_run=not yes)
        except RunInProgress as error:
            errors.print(str(error), markup=False)
            raise typer.Exit(EXIT_FAILED) from None
    if as_json:
        dumped = TypeAdapter(ConnectorForgotten).dump_python(result, mode="json")
        typer.echo(json.dumps(dumped, indent=2))
    else:
        verb = "would remove" if result.dry_run else "removed"
        print_table(
            f"{verb} for connector {connector!r} (tenant {where!r})",
            ("what", "count"),
            [(label, f"{getattr(result, field):,}") for field, label in _FORGOTTEN_ROWS],
        )
        if result.dry_run:
            errors.print("nothing was changed: add --yes to remove it", markup=False)
    if result.dry_run:
        raise typer.Exit(EXIT_USAGE)


_FORGOTTEN_ROWS = (
    ("episodes", "episodes"),
    ("revisions", "earlier revisions"),
    ("memories_deleted", "memories derived only from them (deleted)"),
    ("memories_kept", "memories that keep other sources (lose these)"),
    ("memories_reactivated", "memories superseded only by deleted ones (active again)"),
    ("supersessions", "supersession records"),
    ("conflicts", "conflicts"),
    ("subjects_changed", "subjects whose memories change"),
    ("streams", "stream checkpoints"),
    ("runs", "run records"),
    ("backfills", "backfills"),
    ("resolutions", "resolution records it recorded"),
)
