"""The ``memsync`` command line.

Exit codes: 0 success, 1 failure, 2 bad usage or configuration (the message names
the file and the field), 3 partial success.
"""

from __future__ import annotations

import json
import secrets
import sys
import uuid
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.table import Table

from memsync.clock import SystemClock
from memsync.compile.types import MemoryStatus
from memsync.runtime import cli_sync
from memsync.runtime.api.schemas import CreateEpisodeRequest
from memsync.runtime.cli_jobs import register as register_job_commands
from memsync.runtime.compile import CompileService, ConflictNotFound, result_summary
from memsync.runtime.config import ConfigError, Settings, hash_api_key, load_settings, redacted_dump
from memsync.runtime.episodes import EpisodeRepository
from memsync.runtime.ingest import IngestSummary
from memsync.runtime.inspector import conflict_to_dict, inspect_subject, render_inspection
from memsync.runtime.jobs import COMPILE, JobQueue, ingest_service
from memsync.runtime.memories import MemoryRepository
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


def _serving_settings(host: str | None, port: int | None) -> Settings:
    """Settings with --host/--port applied; refuses a public interface without keys."""
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
    return settings


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="interface (default: api.host)")] = None,
    port: Annotated[int | None, typer.Option(help="port (default: api.port, 8100)")] = None,
) -> None:
    """Serve the HTTP API (Statewave v1 compatible) until SIGTERM/SIGINT, then exit 0."""
    from memsync.runtime.api.app import create_app
    from memsync.runtime.api.deps import Services
    from memsync.runtime.api.server import serve_until_stopped

    settings = _serving_settings(host, port)
    store = _open_store(settings)
    api = settings.api
    serve_until_stopped(create_app(Services.build(settings, store)), api.host, api.port)
    store.dispose()


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


def _ingest_file(store: Store, settings: Settings, tenant: str, path: Path) -> IngestSummary:
    requests = _read_episodes(path)
    service = ingest_service(store, settings.jobs, JobQueue.from_settings(store, settings.jobs))
    outcomes = service.ingest(tenant, [request.to_draft() for request in requests])
    return IngestSummary.of(outcomes)


@app.command()
def ingest(
    path: Annotated[Path, typer.Argument(help=".json (a list) or .jsonl of episodes", exists=True)],
    tenant: Annotated[str, typer.Option(help="tenant to ingest for")] = "default",
) -> None:
    """Ingest episodes from a file, exactly as POST /v1/episodes/batch would."""
    settings = _settings()
    store = _open_store(settings)
    summary = _ingest_file(store, settings, tenant, path)
    console.print(
        f"created {summary.created}, duplicates {summary.duplicates}, revised {summary.revised}"
    )


@app.command()
def demo(
    tenant: Annotated[str, typer.Option(help="tenant to use")] = "default",
) -> None:
    """The main job on the embedded default: sync the workspace connector over a bundled
    example workspace, ingest a bundled sample, compile everything, print what is stored.
    Run it twice: the second run creates nothing."""
    settings = _settings()
    store = _open_store(settings)
    console.print(f"store: {settings.store}")
    cli_sync.print_run(cli_sync.sync_bundled_workspace(store, tenant))
    sample = resources.files("memsync.runtime") / "samples" / "episodes.json"
    with resources.as_file(sample) as sample_path:
        summary = _ingest_file(store, settings, tenant, sample_path)
    console.print(
        f"ingested the bundled sample: created {summary.created}, "
        f"duplicates {summary.duplicates}, revised {summary.revised}"
    )
    compiler = _compile_service(store, settings)
    compiled = [
        compiler.compile(tenant, name) for name in compiler.subjects_with_uncompiled(tenant)
    ]
    console.print(
        f"compiled {sum(r.episodes_compiled for r in compiled)} episodes: "
        f"memories created {sum(r.memories_created for r in compiled)}, "
        f"superseded {sum(r.memories_superseded for r in compiled)}, "
        f"conflicts opened {sum(r.conflicts_opened for r in compiled)}"
    )
    _print_store_summary(store, tenant)


def _print_store_summary(store: Store, tenant: str) -> None:
    """One row per subject: what the inspector would show, counted."""
    episodes, memories = EpisodeRepository(store), MemoryRepository(store)
    table = Table(title=f"what is stored for tenant {tenant!r} (memsync inspect SUBJECT)")
    for column in ("subject", "episodes", "active", "superseded", "open conflicts"):
        table.add_column(column)
    for subject in episodes.subjects(tenant, limit=200, offset=0).subjects:
        every = memories.memories(tenant, subject.subject_id, statuses=tuple(MemoryStatus))
        table.add_row(
            subject.subject_id,
            str(subject.episode_count),
            str(sum(m.status is MemoryStatus.ACTIVE for m in every)),
            str(sum(m.status is MemoryStatus.SUPERSEDED for m in every)),
            str(len(memories.conflicts(tenant, subject.subject_id))),
        )
    console.print(table)


cli_sync.register(app, _settings, _open_store)


conflicts_app = typer.Typer(help="Conflicts flagged between memories.", no_args_is_help=True)
app.add_typer(conflicts_app, name="conflicts")


def _compile_service(store: Store, settings: Settings) -> CompileService:
    return CompileService.from_settings(store, settings.compile)


@app.command("compile")
def compile_command(
    subject: Annotated[str | None, typer.Argument(help="subject to compile")] = None,
    all_subjects: Annotated[
        bool, typer.Option("--all", help="every subject with uncompiled episodes")
    ] = False,
    tenant: Annotated[str, typer.Option(help="tenant")] = "default",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    async_: Annotated[
        bool, typer.Option("--async", help="enqueue a compile job; print its id")
    ] = False,
) -> None:
    """Compile episodes into memories now (or enqueue it). A second run creates nothing."""
    if (subject is None) == (not all_subjects):
        errors.print("name one SUBJECT or pass --all")
        raise typer.Exit(EXIT_USAGE)
    settings = _settings()
    store = _open_store(settings)
    service = _compile_service(store, settings)
    subjects = service.subjects_with_uncompiled(tenant) if all_subjects else [subject or ""]
    if async_:
        queue = JobQueue.from_settings(store, settings.jobs)
        for name in subjects:
            job, _ = queue.enqueue(tenant, COMPILE, name, now=SystemClock().now())
            typer.echo(str(job.id))
        return
    results = [result_summary(service.compile(tenant, name)) for name in subjects]
    if as_json:
        typer.echo(json.dumps(results, indent=2))
        return
    table = Table(title=f"compile (tenant {tenant!r})")
    for column in ("subject", "episodes", "created", "superseded", "conflicts"):
        table.add_column(column)
    for result in results:
        table.add_row(
            result["subject_id"],
            str(result["episodes_compiled"]),
            str(result["memories_created"]),
            str(result["memories_superseded"]),
            str(result["conflicts_opened"]),
        )
    console.print(table)


@app.command()
def inspect(
    subject: Annotated[str, typer.Argument(help="subject to inspect")],
    tenant: Annotated[str, typer.Option(help="tenant")] = "default",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for machines")] = False,
) -> None:
    """Everything about a subject: episodes, memories by status, supersessions, conflicts."""
    store = _open_store(_settings())
    report = inspect_subject(EpisodeRepository(store), MemoryRepository(store), tenant, subject)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    render_inspection(console, report)


@conflicts_app.command("list")
def conflicts_list(
    subject: Annotated[str | None, typer.Option(help="only this subject")] = None,
    tenant: Annotated[str, typer.Option(help="tenant")] = "default",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Open conflicts: memories the bundle abstains on until a person decides."""
    store = _open_store(_settings())
    records = [conflict_to_dict(r) for r in MemoryRepository(store).conflicts(tenant, subject)]
    if as_json:
        typer.echo(json.dumps(records, indent=2))
        return
    table = Table(title="open conflicts")
    for column in ("id", "subject", "claim / rule", "score", "memory ids", "contents"):
        table.add_column(column, overflow="fold")
    for record in records:
        table.add_row(
            record["id"],
            record["subject_id"],
            f"{record['claim_key'] or '-'} / {record['rule']}",
            f"{record['score']} >= {record['threshold']}" if record["score"] is not None else "-",
            "\n".join(record["memory_ids"]),
            "\n".join(record["contents"]),
        )
    console.print(table)


@conflicts_app.command("resolve")
def conflicts_resolve(
    conflict_id: Annotated[str, typer.Argument(help="conflict id")],
    keep: Annotated[str, typer.Option(help="id of the memory to keep active")],
    tenant: Annotated[str, typer.Option(help="tenant")] = "default",
) -> None:
    """Keep one memory of a conflict; the other is superseded with rule 'manual'."""
    settings = _settings()
    store = _open_store(settings)
    try:
        resolution = _compile_service(store, settings).resolve_conflict(
            tenant, uuid.UUID(conflict_id), uuid.UUID(keep)
        )
    except (ConflictNotFound, ValueError) as error:
        errors.print(str(error))
        raise typer.Exit(EXIT_FAILED) from None
    console.print(f"kept {resolution.kept_memory_id}; superseded {resolution.superseded_memory_id}")


register_job_commands(app, _settings, _open_store, _serving_settings)


def main() -> None:
    try:
        app()
    except ConfigError as error:  # raised outside _settings, e.g. by a library hook
        errors.print(str(error))
        sys.exit(EXIT_USAGE)


if __name__ == "__main__":
    main()
