"""``memsync db``, ``keys`` and ``config``: the schema, API keys, the configuration."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memsync.runtime.app.cli.common import (
    app,
    console,
    errors,
    open_services,
    settings,
)

if TYPE_CHECKING:
    from memsync.runtime.app.config import Settings

__all__ = ["config_app", "db_app", "keys_app"]

db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
config_app = typer.Typer(help="Configuration.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(keys_app, name="keys")
app.add_typer(config_app, name="config")


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the schema to the newest version; on a Citus coordinator,
    distribute every tenant table by tenant. Safe to repeat."""
    from memsync.runtime.storage import current_revision, head_revision
    from memsync.runtime.storage.migrate import distribute

    with open_services() as services:
        for message in distribute(services.store):
            console.print(message)
        revision = current_revision(services.store)
    console.print(f"schema at revision {revision} (head {head_revision()})")


@keys_app.command("new")
def keys_new(
    name: Annotated[str, typer.Option(help="a name for the key, e.g. the team using it")],
    tenant: Annotated[list[str], typer.Option(help="tenant(s) the key may act for")] = [  # noqa: B006
        "default"
    ],
) -> None:
    """Make a new API key: prints the key once and the config entry holding its hash."""
    import secrets

    from memsync.runtime.app.config import hash_api_key

    key = "ms_" + secrets.token_urlsafe(32)
    digest = hash_api_key(key).removeprefix("sha256:")
    errors.print("API key (shown once, store it in a secret manager):")
    typer.echo(key)
    errors.print("Add to your configuration under api.keys:")
    errors.print(
        f"  - name: {name}\n    sha256: {digest}\n    tenants: {json.dumps(tenant)}",
        highlight=False,
    )


def _validated(*, strict: bool = False) -> Settings:
    """The whole configuration, connectors included: exit 2 listing every problem.

    A variable a connector names that is not set here is a warning on stderr (the
    connector's syncs fail where it is not set; everything else works), or with
    ``strict`` a problem like any other.
    """
    from memsync.clock import SystemClock
    from memsync.connectors import ConnectorConfigError, load_registry

    def connector_problems(
        raw: list[Any], label: str, unknown: Mapping[int, Collection[str]]
    ) -> list[str]:
        try:
            parsed = load_registry().parse_configs(raw, source=label, unknown=unknown)
        except ConnectorConfigError as error:
            return error.problems
        # The one check of a start that needs the clock: a first run would read from
        # the future (a run refuses it too; validating says so before any run).
        now = SystemClock().now()
        return [
            f"connector '{config.name}' in {label}: start {config.start.isoformat()} is in "
            f"the future (now is {now.isoformat(timespec='seconds')})"
            for config in parsed
            if config.start is not None and config.start > now
        ]

    loaded = settings(check_connectors=connector_problems, strict_environment=strict)
    for missing in loaded.missing_variables().values():
        typer.echo(f"warning: {missing}; its syncs and checks fail where that is not set", err=True)
    return loaded


StrictOption = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="an environment variable a connector names that is not set is an error "
        "(exit 2), not a warning",
    ),
]


@config_app.command("validate")
def config_validate(strict: StrictOption = False) -> None:
    """Check the whole file, connectors included; report every problem at once (exit 2)
    with its file, field and, for a misspelling, the likely intended name. A variable
    a connector names that is not set here is a warning (``--strict``: an error)."""
    from memsync.runtime.app.config import redacted_store_url

    loaded = _validated(strict=strict)
    names = ", ".join(str(raw.get("name")) for raw in loaded.connectors) or "none"
    # One plain line: rich (about 20 ms to import) has nothing to render in it.
    typer.echo(
        f"configuration is valid: store {redacted_store_url(loaded.store)}; connectors: {names}"
    )


@config_app.command("show")
def config_show() -> None:
    """Print the effective configuration, checked like ``validate``, every secret redacted."""
    from memsync.runtime.app.config import redacted_dump

    # Plain indented JSON, as every ``--json`` prints: rich's highlighting would cost
    # this command more than everything else it does after validating.
    typer.echo(json.dumps(redacted_dump(_validated()), indent=2, ensure_ascii=False))
