"""``memsync ingest`` and ``memsync demo``: episodes from a file, and the main job on the
embedded default."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memsync.runtime.app.cli.common import (
    EXIT_USAGE,
    app,
    console,
    errors,
    open_services,
    print_table,
    settings,
)
from memsync.runtime.app.cli.sync import print_run

if TYPE_CHECKING:
    from memsync.runtime.app.api.schemas import CreateEpisodeRequest
    from memsync.runtime.app.services import Services
    from memsync.runtime.ingest import IngestSummary
    from memsync.runtime.sync import RunRecord

__all__ = ["DEMO_WORKSPACE_CONNECTOR"]

DEMO_WORKSPACE_CONNECTOR = "demo-workspace"


@contextmanager
def _sample(name: str) -> Iterator[Path]:
    """A file or directory of the samples shipped with memsync, as a path."""
    # importlib.resources is imported here: only ``demo`` needs it.
    from importlib import resources

    with resources.as_file(resources.files("memsync.runtime.app") / "samples" / name) as path:
        yield path


def _read_episodes(path: Path) -> list[CreateEpisodeRequest]:
    from pydantic import TypeAdapter, ValidationError

    from memsync.runtime.app.api.schemas import CreateEpisodeRequest

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        errors.print(f"{path}: not UTF-8 (byte {error.start}): episodes are JSON, which is UTF-8")
        raise typer.Exit(EXIT_USAGE) from None
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


def _ingest_file(services: Services, tenant: str, path: Path) -> IngestSummary:
    from memsync.runtime.ingest import IngestSummary

    requests = _read_episodes(path)
    outcomes = services.ingest.ingest(tenant, [request.to_draft() for request in requests])
    return IngestSummary.of(outcomes)


@app.command()
def ingest(
    path: Annotated[Path, typer.Argument(help=".json (a list) or .jsonl of episodes", exists=True)],
    tenant: Annotated[str, typer.Option(help="tenant to ingest for")] = "default",
) -> None:
    """Ingest episodes from a file, exactly as POST /v1/episodes/batch would."""
    with open_services() as services:
        summary = _ingest_file(services, tenant, path)
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
    loaded = settings()
    with open_services(loaded) as services:
        console.print(f"store: {loaded.store}")
        print_run(_sync_bundled_workspace(services, tenant))
        with _sample("episodes.json") as sample_path:
            summary = _ingest_file(services, tenant, sample_path)
        console.print(
            f"ingested the bundled sample: created {summary.created}, "
            f"duplicates {summary.duplicates}, revised {summary.revised}"
        )
        compile_service = services.compile_service
        compiled = [
            compile_service.compile(tenant, name)
            for name in compile_service.subjects_with_uncompiled(tenant)
        ]
        console.print(
            f"compiled {sum(r.episodes_compiled for r in compiled)} episodes: "
            f"memories created {sum(r.memories_created for r in compiled)}, "
            f"superseded {sum(r.memories_superseded for r in compiled)}, "
            f"conflicts opened {sum(r.conflicts_opened for r in compiled)}"
        )
        _print_store_summary(services, tenant)


def _sync_bundled_workspace(services: Services, tenant: str) -> RunRecord:
    """Sync the workspace connector over the example workspace shipped with memsync."""
    with _sample("workspace") as root:
        [config] = services.registry.parse_configs(
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
        return services.run_sync(config)


def _print_store_summary(services: Services, tenant: str) -> None:
    """One row per subject: what the inspector would show, counted."""
    from memsync.compile.types import MemoryStatus

    rows = []
    for subject in services.episodes.subjects(tenant, limit=200, offset=0).subjects:
        every = services.memories.memories(tenant, subject.subject_id, statuses=tuple(MemoryStatus))
        rows.append(
            (
                subject.subject_id,
                str(subject.episode_count),
                str(sum(m.status is MemoryStatus.ACTIVE for m in every)),
                str(sum(m.status is MemoryStatus.SUPERSEDED for m in every)),
                str(len(services.memories.conflicts(tenant, subject.subject_id))),
            )
        )
    print_table(
        f"what is stored for tenant {tenant!r} (memsync inspect SUBJECT)",
        ("subject", "episodes", "active", "superseded", "open conflicts"),
        rows,
    )
