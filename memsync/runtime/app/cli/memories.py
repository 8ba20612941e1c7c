"""``memsync compile``, ``inspect`` and ``conflicts``: deriving memories and auditing them."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from memsync.runtime.app.cli.common import (
    EXIT_FAILED,
    EXIT_PARTIAL,
    JsonOption,
    TenantOption,
    app,
    console,
    errors,
    open_services,
    parse_moment,
    print_table,
    progress,
    resolve_id,
    usage_error,
)

__all__ = ["conflicts_app"]

conflicts_app = typer.Typer(help="Conflicts flagged between memories.", no_args_is_help=True)
app.add_typer(conflicts_app, name="conflicts")


@app.command("compile")
def compile_command(
    subject: Annotated[str | None, typer.Argument(help="subject to compile")] = None,
    all_subjects: Annotated[
        bool, typer.Option("--all", help="every subject with uncompiled episodes")
    ] = False,
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
    async_: Annotated[
        bool, typer.Option("--async", help="enqueue a compile job; print its id")
    ] = False,
    replay_only: Annotated[
        bool,
        typer.Option(
            "--replay-only",
            help="ask the model nothing: compile from recorded extractions only, and fail "
            "naming the episodes that have none",
        ),
    ] = False,
) -> None:
    """Compile episodes into memories now (or enqueue it). A second run creates nothing.

    Exit 3 when a compile stopped at its token ceiling or at the model's rate limit
    (what it compiled stays; run it again to carry on)."""
    from memsync.runtime.compiling import COMPILE_JOB, compile_extras, result_summary

    if (subject is None) == (not all_subjects):
        raise usage_error("name one SUBJECT or pass --all")
    with open_services() as services:
        if replay_only and services.settings.compile.compiler != "llm":
            raise usage_error(
                "--replay-only replays recorded LLM extractions: it needs compile.compiler: llm"
            )
        compile_service = services.compile_service
        subjects = (
            compile_service.subjects_with_uncompiled(tenant) if all_subjects else [subject or ""]
        )
        if async_:
            for name in subjects:
                job, _ = services.queue.enqueue(tenant, COMPILE_JOB, name, now=services.clock.now())
                typer.echo(str(job.id))
            return
        results = []
        # A person at a terminal sees how far a long --all compile is.
        counted = f"compiling {len(subjects)} subject(s)"
        with progress(counted, total=len(subjects), hidden=as_json) as update:
            for name in subjects:
                result = compile_service.compile(tenant, name, replay_only=replay_only)
                results.append({**result_summary(result), **compile_extras(result)})
                update(advance=1)
    stopped = [result for result in results if "stopped" in result]
    if as_json:
        typer.echo(json.dumps(results, indent=2))
    else:
        _print_compiled(tenant, results)
    if stopped:
        errors.print(
            f"compile stopped early ({stopped[0]['stopped']}) for "
            f"{', '.join(r['subject_id'] for r in stopped)}; what was compiled is kept, "
            "run it again to carry on"
        )
        raise typer.Exit(EXIT_PARTIAL)


def _print_compiled(tenant: str, results: list[dict[str, Any]]) -> None:
    print_table(
        f"compile (tenant {tenant!r})",
        ("subject", "episodes", "created", "superseded", "tombstoned", "conflicts"),
        (
            (
                result["subject_id"],
                str(result["episodes_compiled"]),
                str(result["memories_created"]),
                str(result["memories_superseded"]),
                str(result["memories_tombstoned"]),
                str(result["conflicts_opened"]),
            )
            for result in results
        ),
    )


@app.command()
def inspect(
    subject: Annotated[str, typer.Argument(help="subject to inspect")],
    tenant: TenantOption = "default",
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for machines")] = False,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            metavar="<when>",
            help="transaction time: the report as the store held it then (ISO 8601, UTC "
            "when no offset; a date is midnight UTC)",
        ),
    ] = None,
    valid_at: Annotated[
        str | None,
        typer.Option(
            "--valid-at",
            metavar="<when>",
            help="valid time: also name the memories that held then (marked 'held')",
        ),
    ] = None,
) -> None:
    """Everything about a subject: episodes, memories by status, supersessions, conflicts."""
    from memsync.runtime.reading import inspect_subject

    then = parse_moment(as_of, "--as-of") if as_of is not None else None
    held_at = parse_moment(valid_at, "--valid-at") if valid_at is not None else None
    with open_services() as services:
        report = inspect_subject(
            services.episodes, services.memories, tenant, subject, held_at, as_of=then
        ).model_dump(mode="json")
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    render_inspection(report)


@conflicts_app.command("list")
def conflicts_list(
    subject: Annotated[str | None, typer.Option(help="only this subject")] = None,
    tenant: TenantOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Open conflicts: memories the bundle abstains on until a person decides."""
    from memsync.runtime.reading import ConflictJson

    with open_services() as services:
        records = [
            ConflictJson.of(record).to_json()
            for record in services.memories.conflicts(tenant, subject)
        ]
    if as_json:
        typer.echo(json.dumps(records, indent=2))
        return
    print_table(
        "open conflicts",
        ("id", "subject", "claim / rule", "score", "memory ids", "contents"),
        (
            (
                record["id"],
                record["subject_id"],
                f"{record['claim_key'] or '-'} / {record['rule']}",
                f"{record['score']} >= {record['threshold']}"
                if record["score"] is not None
                else "-",
                "\n".join(record["memory_ids"]),
                "\n".join(record["contents"]),
            )
            for record in records
        ),
    )


@conflicts_app.command("resolve")
def conflicts_resolve(
    conflict_id: Annotated[
        str, typer.Argument(help="conflict id (from `conflicts list`), or its unique first digits")
    ],
    keep: Annotated[
        str, typer.Option(help="id of the memory to keep active, or its unique first digits")
    ],
    tenant: TenantOption = "default",
) -> None:
    """Keep one memory of a conflict; the other is superseded with rule 'manual'."""
    from memsync.runtime.compiling import ConflictNotFound

    with open_services() as services:
        memories = services.memories
        conflict = resolve_id(
            conflict_id,
            "conflict",
            lambda start: memories.ids_starting_with(tenant, "conflict", start),
        )
        kept = resolve_id(
            keep, "memory", lambda start: memories.ids_starting_with(tenant, "memory", start)
        )
        try:
            resolution = services.compile_service.resolve_conflict(tenant, conflict, kept)
        except (ConflictNotFound, ValueError) as error:
            errors.print(str(error))
            raise typer.Exit(EXIT_FAILED) from None
    console.print(f"kept {resolution.kept_memory_id}; superseded {resolution.superseded_memory_id}")


def render_inspection(report: dict[str, Any]) -> None:
    """Rich tables for people, from the JSON of an
    :class:`~memsync.runtime.reading.InspectionReport` (what ``--json`` prints)."""
    subject = report["subject_id"]
    if "as_of" in report:
        subject = f"{subject} as of {report['as_of']}"
    held = set(report["held"]) if "held" in report else None
    print_table(
        f"{subject}: episodes (newest first)",
        ("occurred at", "source", "type", "rev", "compiled", "idempotency key"),
        (
            (
                episode["occurred_at"],
                episode["source"],
                episode["type"],
                str(episode["revision"]),
                str(episode["compiled_revision"]),
                episode["idempotency_key"] or "-",
            )
            for episode in report["episodes"]
        ),
    )
    # With --valid-at, a last column says which memories held then.
    held_column = () if held is None else (f"held {report['valid_at']}",)
    for status, memories in report["memories"].items():
        print_table(
            f"{subject}: {status} memories ({len(memories)})",
            ("kind", "claim", "content", "valid from", "valid to", "rule", *held_column),
            (
                (
                    memory["kind"],
                    memory["metadata"].get("claim_key") or "-",
                    memory["content"],
                    memory["valid_from"],
                    memory["valid_to"] or "-",
                    memory["status_rule"] or "-",
                    *(() if held is None else ("yes" if memory["id"] in held else "-",)),
                )
                for memory in memories
            ),
        )
    print_table(
        f"{subject}: supersession records",
        (
            "decided at",
            "rule",
            "claim key",
            "score",
            "threshold",
            "winner",
            "loser",
            "episodes (winner/loser)",
        ),
        (
            (
                record["decided_at"],
                record["rule"],
                record["claim_key"] or "-",
                "-" if record["score"] is None else f"{record['score']:.3f}",
                "-" if record["threshold"] is None else f"{record['threshold']:.2f}",
                record["winner_memory_id"] or "-",
                record["loser_memory_id"] or "-",
                f"{record['winner_episode_count']}/{record['loser_episode_count']}",
            )
            for record in report["supersessions"]
        ),
    )
    print_table(
        f"{subject}: conflicts",
        ("id", "status", "rule", "contents"),
        ((c["id"], c["status"], c["rule"], " | ".join(c["contents"])) for c in report["conflicts"]),
    )
    print_table(
        f"{subject}: earlier versions of memories",
        ("memory", "from", "until", "status", "rule", "valid from", "valid to"),
        (
            (
                version["memory_id"],
                version["recorded_at"],
                version["replaced_at"],
                version["status"],
                version["status_rule"] or "-",
                version["valid_from"],
                version["valid_to"] or "-",
            )
            for version in report["history"]
        ),
    )
