"""``memsync ingest``: episodes from a file, exactly as the batch endpoint takes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memsync.runtime.app.cli.common import (
    EXIT_USAGE,
    app,
    console,
    errors,
    open_services,
)

if TYPE_CHECKING:
    from memsync.runtime.app.api.schemas import CreateEpisodeRequest
    from memsync.runtime.app.services import Services
    from memsync.runtime.ingest import IngestSummary

__all__ = ["ingest_file"]


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


def ingest_file(services: Services, tenant: str, path: Path) -> IngestSummary:
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
        summary = ingest_file(services, tenant, path)
    console.print(
        f"created {summary.created}, duplicates {summary.duplicates}, revised {summary.revised}"
    )
