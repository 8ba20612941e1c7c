"""``memsync jobs list | show | wait``: what is queued, running and failed."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import TYPE_CHECKING, Annotated

import typer

from memsync.runtime.app.cli.common import (
    EXIT_FAILED,
    EXIT_PARTIAL,
    JsonOption,
    TenantOption,
    app,
    errors,
    open_services,
    print_table,
    resolve_id,
)
from memsync.runtime.jobs import JobOutcome, JobStatus

if TYPE_CHECKING:
    from memsync.runtime.app.services import Services

__all__ = ["jobs_app"]

jobs_app = typer.Typer(help="Background jobs: what is queued, running and failed.")
jobs_app.info.no_args_is_help = True
app.add_typer(jobs_app, name="jobs")

JobId = Annotated[str, typer.Argument(help="job id, or its first digits if they are unique")]


def _job_id(services: Services, tenant: str, value: str) -> uuid.UUID:
    return resolve_id(value, "job", lambda start: services.queue.ids_starting_with(tenant, start))


@jobs_app.command("list")
def jobs_list(
    status: Annotated[list[JobStatus] | None, typer.Option(help="only these")] = None,
    outcome: Annotated[
        list[JobOutcome] | None, typer.Option(help="only these, e.g. partial, needs_attention")
    ] = None,
    kind: Annotated[str | None, typer.Option(help="only this kind, e.g. compile")] = None,
    tenant: TenantOption = "default",
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    as_json: JsonOption = False,
) -> None:
    """Jobs, newest first: kind, target, status, attempts, error."""
    with open_services() as services:
        found = services.queue.list(
            tenant, statuses=status, outcomes=outcome, kind=kind, limit=limit
        )
    if as_json:
        typer.echo(json.dumps([job.to_dict() for job in found], indent=2))
        return
    print_table(
        f"jobs (tenant {tenant!r})",
        ("id", "kind", "target", "status", "outcome", "attempts", "trigger", "queued", "error"),
        (
            (
                str(job.id),
                job.kind,
                job.target,
                job.status.value,
                job.outcome.value if job.outcome else "",
                f"{job.attempts}/{job.max_attempts}",
                job.trigger,
                job.queued_at.isoformat(timespec="seconds"),
                job.error or "",
            )
            for job in found
        ),
    )


@jobs_app.command("show")
def jobs_show(job_id: JobId, tenant: TenantOption = "default", as_json: JsonOption = True) -> None:
    """One job as JSON (``--json``, the default): attempts, lease, times, result (a
    compile's counts, ``stopped`` and ``llm``: requests, tokens, estimated cost) and
    error."""
    with open_services() as services:
        wanted = _job_id(services, tenant, job_id)
        job = services.queue.get(tenant, wanted)
    if job is None:
        errors.print(f"no job {job_id} in tenant {tenant!r}")
        raise typer.Exit(EXIT_FAILED)
    typer.echo(json.dumps(job.to_dict(), indent=2))


@jobs_app.command("wait")
def jobs_wait(
    job_id: JobId,
    tenant: TenantOption = "default",
    timeout: Annotated[float, typer.Option(help="seconds to wait at most")] = 300.0,
    poll: Annotated[float, typer.Option(help="seconds between looks")] = 0.5,
) -> None:
    """Wait until a job finishes: exit 0 completed, 3 completed partially (a sync that
    stored part of its window), 1 failed or still running at the timeout."""
    deadline = time.monotonic() + timeout
    waiting = threading.Event()
    with open_services() as services:
        wanted = _job_id(services, tenant, job_id)
        while True:
            job = services.queue.get(tenant, wanted)
            if job is None:
                errors.print(f"no job {job_id} in tenant {tenant!r}")
                raise typer.Exit(EXIT_FAILED)
            if job.finished or time.monotonic() >= deadline:
                break
            waiting.wait(poll)
    typer.echo(json.dumps(job.to_dict(), indent=2))
    if job.outcome is JobOutcome.PARTIAL:
        errors.print(f"job {job_id} completed partially: {job.result}")
        raise typer.Exit(EXIT_PARTIAL)
    if job.status is not JobStatus.COMPLETED:
        if not job.finished:
            errors.print(f"job {job_id} is still {job.status.value} after {timeout}s")
        raise typer.Exit(EXIT_FAILED)
