"""The ``memsync`` command line.

Exit codes: 0 success, 1 failure, 2 bad usage or configuration (the message names
the file and the field), 3 partial success.
"""

from __future__ import annotations

import json
import secrets
import sys
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.table import Table

from memsync.runtime import cli_sync
from memsync.runtime.api.schemas import CreateEpisodeRequest
from memsync.runtime.config import ConfigError, Settings, hash_api_key, load_settings, redacted_dump
from memsync.runtime.episodes import EpisodeRepository
from memsync.runtime.ingest import IngestService, IngestSummary
from memsync.runtime.storage import Store, current_revision, head_revision, upgrade

__all__ = ["app", "main"]

EXIT_FAILED = 1
EXIT_USAGE = 2

app = typer.Typer(
    help="memsync: scheduled connector sync for agent memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
config_app = typer.Typer(help="Configuration.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(keys_app, name="keys")
app.add_typer(config_app, name="config")

console = Console(soft_wrap=True)
errors = Console(stderr=True, soft_wrap=True, highlight=False)


class _State:
    config_path: Path | None = None


_state = _State()


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
) -> None:
    _state.config_path = config


def _settings() -> Settings:
    try:
        return load_settings(_state.config_path)
    except ConfigError as error:
        errors.print(f"[red]configuration error[/red]\n{error}", highlight=False, markup=True)
        raise typer.Exit(EXIT_USAGE) from None


def _open_store(settings: Settings, *, migrate: bool = True) -> Store:
    store = Store.from_url(settings.store)
    if migrate:
        upgrade(store)
    return store


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the schema to the newest version. Safe to repeat."""
    settings = _settings()
    store = _open_store(settings)
    console.print(f"schema at revision {current_revision(store)} (head {head_revision()})")


@keys_app.command("new")
def keys_new(
    name: Annotated[str, typer.Option(help="a name for the key, e.g. the team using it")],
    tenant: Annotated[list[str], typer.Option(help="tenant(s) the key may act for")] = [  # noqa: B006
        "default"
    ],
) -> None:
    """Make a new API key: prints the key once and the config entry holding its hash."""
    key = "ms_" + secrets.token_urlsafe(32)
    digest = hash_api_key(key).removeprefix("sha256:")
    errors.print("API key (shown once, store it in a secret manager):")
    typer.echo(key)
    errors.print("Add to your configuration under api.keys:")
    errors.print(
        f"  - name: {name}\n    sha256: {digest}\n    tenants: {json.dumps(tenant)}",
        highlight=False,
    )


@config_app.command("show")
def config_show() -> None:
    """Print the effective configuration with every secret redacted."""
    console.print_json(json.dumps(redacted_dump(_settings())))


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="interface (default: api.host)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default: api.port, 8100)")] = None,
) -> None:
    """Serve the HTTP API (Statewave v1 compatible)."""
    import uvicorn

    from memsync.runtime.api.app import Services, create_app

    settings = _settings()
    api = settings.api.model_copy(
        update={key: value for key, value in {"host": host, "port": port}.items() if value}
    )
    settings = settings.model_copy(update={"api": api})
    if not api.auth_enabled:
        if not api.binds_loopback_only():
            errors.print(
                f"refusing to serve on {api.host}: no API keys are configured, so memsync "
                "only listens on loopback. Add api.keys (see `memsync keys new`) or use "
                "--host 127.0.0.1."
            )
            raise typer.Exit(EXIT_USAGE)
        errors.print(
            f"no API keys configured: accepting unauthenticated requests on {api.host} only"
        )
    store = _open_store(settings)
    uvicorn.run(create_app(Services.build(settings, store)), host=api.host, port=api.port)


def _read_episodes(path: Path) -> list[CreateEpisodeRequest]:
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            documents: Any = [json.loads(line) for line in text.splitlines() if line.strip()]
        else:
            documents = json.loads(text)
    except json.JSONDecodeError as error:
        errors.print(f"{path}: not valid JSON: {error}")
        raise typer.Exit(EXIT_USAGE) from None
    try:
        return TypeAdapter(list[CreateEpisodeRequest]).validate_python(documents)
    except ValidationError as error:
        for problem in error.errors():
            where = ".".join(str(part) for part in problem["loc"])
            errors.print(f"{path}: episode {where}: {problem['msg']}", highlight=False)
        raise typer.Exit(EXIT_USAGE) from None


def _ingest_file(store: Store, tenant: str, path: Path) -> IngestSummary:
    requests = _read_episodes(path)
    outcomes = IngestService(store).ingest(tenant, [request.to_draft() for request in requests])
    return IngestSummary.of(outcomes)


@app.command()
def ingest(
    path: Annotated[Path, typer.Argument(help=".json (a list) or .jsonl of episodes", exists=True)],
    tenant: Annotated[str, typer.Option(help="tenant to ingest for")] = "default",
) -> None:
    """Ingest episodes from a file, exactly as POST /v1/episodes/batch would."""
    store = _open_store(_settings())
    summary = _ingest_file(store, tenant, path)
    console.print(
        f"created {summary.created}, duplicates {summary.duplicates}, revised {summary.revised}"
    )


@app.command()
def demo(
    tenant: Annotated[str, typer.Option(help="tenant to use")] = "default",
) -> None:
    """The main job on the embedded default: create the store, ingest a bundled
    sample, print what is stored. Run it twice: the second run stores nothing new."""
    settings = _settings()
    store = _open_store(settings)
    sample = resources.files("memsync.runtime") / "samples" / "episodes.json"
    with resources.as_file(sample) as sample_path:
        summary = _ingest_file(store, tenant, sample_path)
    console.print(f"store: {settings.store}")
    console.print(
        f"ingested the bundled sample: created {summary.created}, "
        f"duplicates {summary.duplicates}, revised {summary.revised}"
    )
    repository = EpisodeRepository(store)
    table = Table(title=f"episodes stored for tenant {tenant!r}")
    for column in ("subject", "occurred at", "source", "type", "rev", "idempotency key"):
        table.add_column(column)
    for subject in repository.subjects(tenant, limit=200, offset=0).subjects:
        page = repository.timeline(
            tenant, subject.subject_id, limit=200, offset=0, newest_first=False
        )
        for episode in page.episodes:
            table.add_row(
                episode.subject_id,
                episode.occurred_at.isoformat(),
                episode.source,
                episode.type,
                str(episode.revision),
                episode.idempotency_key or "-",
            )
    console.print(table)
    cli_sync.print_run(cli_sync.sync_bundled_workspace(store, tenant))


cli_sync.register(app, _settings, _open_store)


def main() -> None:
    try:
        app()
    except ConfigError as error:  # raised outside _settings, e.g. by a library hook
        errors.print(str(error))
        sys.exit(EXIT_USAGE)


if __name__ == "__main__":
    main()
