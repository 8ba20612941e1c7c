"""``memsync llm export | import``: recorded extractions that travel between stores."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from memsync.runtime.app.cli.common import TenantOption, app, open_services, usage_error

__all__ = ["llm_app"]

llm_app = typer.Typer(
    help="The LLM compiler's recorded extractions: export them, import them elsewhere."
)
llm_app.info.no_args_is_help = True
app.add_typer(llm_app, name="llm")


@llm_app.command("export")
def llm_export(
    to: Annotated[Path, typer.Option("--to", help="JSON Lines file to write")],
    tenant: TenantOption = "default",
) -> None:
    """Write the tenant's recorded extractions to a JSON Lines file: one record a line,
    keyed by prompt version, model and the episode's content hash; no subject ids,
    episode ids or episode text."""
    from memsync.compile.llm import ExtractionRecord
    from memsync.runtime.compiling import SqlExtractionRecorder

    written = 0
    with open_services() as services, to.open("w", encoding="utf-8") as out:
        recorder = SqlExtractionRecorder(services.store, tenant, services.clock)
        for key, extraction in recorder.records():
            out.write(ExtractionRecord.of(key, extraction).model_dump_json() + "\n")
            written += 1
    typer.echo(json.dumps({"exported": written, "file": str(to)}))


@llm_app.command("import")
def llm_import(
    file: Annotated[Path, typer.Argument(help="JSON Lines file from `memsync llm export`")],
    tenant: TenantOption = "default",
) -> None:
    """Record the extractions of an exported file in this store (one transaction); a
    record whose key is already here keeps the one here. A compile then replays them
    instead of asking the model (``memsync compile --replay-only`` asks nothing)."""
    from pydantic import ValidationError

    from memsync.compile.llm import ExtractionRecord
    from memsync.runtime.compiling import SqlExtractionRecorder

    if not file.is_file():
        raise usage_error(f"{file}: no such file")
    records = []
    with file.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = ExtractionRecord.model_validate_json(line)
            except ValidationError as error:
                raise usage_error(
                    f"{file}:{number}: not an exported extraction record "
                    f"({error.errors()[0]['msg']} at {error.errors()[0]['loc']})"
                ) from None
            records.append((record.key, record.extraction_json()))
    with open_services() as services:
        recorder = SqlExtractionRecorder(services.store, tenant, services.clock)
        added = recorder.put_many(records)
    typer.echo(json.dumps({"imported": added, "read": len(records)}))
