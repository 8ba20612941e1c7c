"""The admin pages: connectors, runs, jobs, conflicts and the subject inspector.

Server-rendered with Jinja2 from the same services the API and the CLI use; every page
reads without JavaScript, and every change is a form POST that checks its CSRF token
and answers with a redirect (so a reload never repeats it). Every read is scoped to
the session's tenant, as the API scopes it to the caller's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import StrictUndefined

from memsync.compile.sensitivity import REDACTION_MARKER, CallerIdentity
from memsync.compile.types import ConflictStatus
from memsync.connectors.config import ConnectorConfig
from memsync.episode import canonical_json
from memsync.runtime.app.api.auth import Caller
from memsync.runtime.app.api.errors import ApiError
from memsync.runtime.app.api.policy import seen_conflicts, seen_report
from memsync.runtime.app.config import hash_api_key
from memsync.runtime.app.handlers import SYNC_JOB
from memsync.runtime.app.services import Services, sync_schedule_id
from memsync.runtime.app.ui.session import SESSION_COOKIE, Session, SessionSigner
from memsync.runtime.compiling import ConflictNotFound
from memsync.runtime.jobs import Job, JobStatus
from memsync.runtime.reading import inspect_subject
from memsync.runtime.reading.memories import MemoryRepository
from memsync.runtime.sync import RunRecord, RunStatus
from memsync.runtime.sync.records import COUNTERS
from memsync.runtime.sync.webhook_deliveries import WebhookState
from memsync.schedule import format_duration

__all__ = ["LoginRequired", "PageError", "UiContext", "router", "templates"]

TEMPLATES = Path(__file__).parent / "templates"
templates = Jinja2Templates(directory=TEMPLATES)
PAYLOAD_PREVIEW_CHARS = 300
ADMIN_CALLER_TYPE = "admin"
"""The ``caller_type`` the read policy sees for a person on the admin pages."""


def payload_text(payload: Any) -> str:
    """What a person reads of an episode's payload: its text, else compact JSON, cut."""
    if isinstance(payload, dict):
        for field in ("text", "body", "title", "content"):
            if isinstance(payload.get(field), str) and payload[field].strip():
                text = str(payload[field])
                break
        else:
            text = canonical_json(payload)
    else:
        text = str(payload)
    cut = text[:PAYLOAD_PREVIEW_CHARS]
    return cut + "…" if len(text) > len(cut) else cut


def _duration(value: timedelta) -> str:
    return format_duration(max(value, timedelta(0)))


# A name a template gets wrong fails the page (and its test) instead of rendering blank.
templates.env.undefined = StrictUndefined
templates.env.filters["payload_text"] = payload_text
templates.env.filters["duration"] = _duration

router = APIRouter(prefix="/ui", include_in_schema=False)

PAGE = 50


class LoginRequired(Exception):
    """The request needs a signed-in session; answered with a redirect to the login."""


class PageError(ApiError):
    """An error a page shows a person (an HTML page, not the API's JSON envelope)."""


@dataclass(frozen=True, slots=True)
class UiContext:
    """One page request: the services, who is looking, and how to sign forms."""

    services: Services
    session: Session
    caller: Caller
    signer: SessionSigner
    fresh: bool = False
    """The session was made for this request (an open server's first visit)."""

    @property
    def reader(self) -> CallerIdentity:
        """Who reads, for the read policy: a person on the admin page (``caller_type:
        admin``), named by the API key they signed in with."""
        return CallerIdentity(self.caller.key_name, ADMIN_CALLER_TYPE)

    def csrf(self, form: str) -> str:
        return self.signer.csrf_token(self.session, form)

    def check_csrf(self, form: str, token: str | None) -> None:
        if not self.signer.csrf_valid(self.session, form, token):
            raise PageError(403, "csrf", "The form has expired or did not come from this page.")

    def render(
        self, request: Request, template: str, status_code: int = 200, **values: Any
    ) -> HTMLResponse:
        response = templates.TemplateResponse(
            request,
            template,
            {"ui": self, "tenant": self.caller.tenant_id, **values},
            status_code=status_code,
        )
        if self.fresh:
            set_session(response, request, self.session)
        return response


def _signer(request: Request) -> SessionSigner:
    signer: SessionSigner = request.app.state.ui_signer
    return signer


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def current_session(request: Request) -> Session | None:
    return _signer(request).load(request.cookies.get(SESSION_COOKIE))


def _ui(request: Request) -> UiContext:
    services, signer = _services(request), _signer(request)
    session = current_session(request)
    authenticator = services.authenticator
    if not authenticator.enabled:
        # Open on loopback, as the API is; a session is still needed for CSRF tokens.
        fresh = session is None
        session = session or Session.anonymous()
        tenant = session.tenant_id or services.settings.api.default_tenant
        return UiContext(services, session, Caller(tenant, None), signer, fresh)
    if session is None or session.key_hash is None or session.tenant_id is None:
        raise LoginRequired
    try:
        caller = authenticator.authenticate_hash(session.key_hash, session.tenant_id)
    except ApiError:
        raise LoginRequired from None
    return UiContext(services, session, caller, signer)


Ui = Annotated[UiContext, Depends(_ui)]


def set_session(response: Response, request: Request, session: Session) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        _signer(request).dump(session),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui",
    )


def _see_other(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)


# -- signing in -----------------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    session = current_session(request) or Session.anonymous()
    response = _login_form(request, session)
    set_session(response, request, session)
    return response


def _login_form(
    request: Request, session: Session, error: str | None = None, status_code: int = 200
) -> HTMLResponse:
    services = _services(request)
    return templates.TemplateResponse(
        request,
        "login.html",
        {
            "csrf_token": _signer(request).csrf_token(session, "login"),
            "keys_required": services.authenticator.enabled,
            "default_tenant": services.settings.api.default_tenant,
            "error": error,
            "tenant": None,
            "ui": None,
        },
        status_code=status_code,
    )


@router.post("/login")
def login(
    request: Request,
    csrf: Annotated[str, Form()] = "",
    api_key: Annotated[str, Form()] = "",
    tenant: Annotated[str, Form()] = "",
) -> Response:
    services, signer = _services(request), _signer(request)
    session = current_session(request)
    if session is None or not signer.csrf_valid(session, "login", csrf):
        return _login_form(
            request,
            session or Session.anonymous(),
            "The form expired; please sign in again.",
            status_code=403,
        )
    try:
        caller = services.authenticator.authenticate(api_key or None, tenant.strip() or None)
    except ApiError as error:
        return _login_form(request, session, error.message, status_code=error.status)
    key_hash = hash_api_key(api_key) if services.authenticator.enabled else None
    response = _see_other("/ui/connectors")
    set_session(response, request, session.signed_in(caller.tenant_id, key_hash))
    return response


@router.post("/logout")
def logout(request: Request, ui: Ui, csrf: Annotated[str, Form()] = "") -> Response:
    ui.check_csrf("logout", csrf)
    response = _see_other("/ui/login")
    response.delete_cookie(SESSION_COOKIE, path="/ui")
    return response


@router.get("/")
def home() -> Response:
    return _see_other("/ui/connectors")


# -- connectors -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConnectorRow:
    config: ConnectorConfig
    key_policy: str
    key_rationale: str
    next_fire: datetime | None
    last_run: RunRecord | None
    lag: timedelta | None
    webhook: WebhookState | None


def _tenant_connectors(ui: UiContext) -> list[ConnectorConfig]:
    return [c for c in ui.services.connectors if c.tenant == ui.caller.tenant_id]


@router.get("/connectors", response_class=HTMLResponse)
def connectors_page(request: Request, ui: Ui, enqueued: str | None = None) -> HTMLResponse:
    services, tenant = ui.services, ui.caller.tenant_id
    now = services.clock.now()
    schedules = {schedule.id: schedule for schedule in services.schedules}
    latest = services.runs.latest_runs(tenant)
    positions = services.runs.committed_positions(tenant)
    configs = _tenant_connectors(ui)
    webhooks = services.webhook_deliveries.states(
        tenant,
        {c.name: c.webhook.push_gap_after for c in configs if c.webhook is not None},
        now,
    )
    rows = []
    for config in configs:
        info = services.registry.get(config.type)
        schedule = schedules.get(sync_schedule_id(config))
        position = positions.get((tenant, config.name))
        rows.append(
            ConnectorRow(
                config=config,
                key_policy=info.key_policy.value,
                key_rationale=info.key_rationale,
                next_fire=schedule.next_fire_time(now) if schedule is not None else None,
                last_run=latest.get(config.name),
                lag=now - position if position is not None else None,
                webhook=webhooks.get(config.name),
            )
        )
    return ui.render(request, "connectors.html", connectors=rows, enqueued=enqueued)


@router.post("/connectors/{name}/sync")
def sync_now(name: str, ui: Ui, csrf: Annotated[str, Form()] = "") -> Response:
    ui.check_csrf(f"sync:{name}", csrf)
    if name not in {config.name for config in _tenant_connectors(ui)}:
        raise PageError(404, "not_found", f"No connector {name!r} in this tenant.")
    job, _ = ui.services.queue.enqueue(
        ui.caller.tenant_id, SYNC_JOB, name, now=ui.services.clock.now()
    )
    return _see_other(f"/ui/connectors?enqueued={job.id}")


# -- runs -----------------------------------------------------------------------------


@router.get("/runs", response_class=HTMLResponse)
def runs_page(
    request: Request,
    ui: Ui,
    connector: str | None = None,
    status: RunStatus | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> HTMLResponse:
    runs = ui.services.runs.list_runs(
        ui.caller.tenant_id,
        connector=connector or None,
        status=status,
        limit=PAGE + 1,
        offset=offset,
    )
    return ui.render(
        request,
        "runs.html",
        runs=runs[:PAGE],
        has_more=len(runs) > PAGE,
        offset=offset,
        connector=connector or "",
        status=status.value if status else "",
        statuses=[status.value for status in RunStatus],
        counters=COUNTERS,
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, ui: Ui, run_id: uuid.UUID) -> HTMLResponse:
    record = ui.services.runs.get_run(ui.caller.tenant_id, run_id)
    if record is None:
        raise PageError(404, "not_found", f"No run {run_id} in this tenant.")
    subjects = ui.services.episodes.subjects_touched(
        ui.caller.tenant_id,
        connector=record.connector,
        since=record.started_at,
        until=record.finished_at or ui.services.clock.now(),
        limit=PAGE,
    )
    return ui.render(request, "run.html", run=record, counts=record.counts(), subjects=subjects)


# -- jobs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AttentionJob:
    job: Job
    reason: str
    retryable: bool


def _needs_attention(jobs: list[Job], now: datetime) -> list[AttentionJob]:
    found = []
    for job in jobs:
        if job.status is JobStatus.FAILED:
            found.append(AttentionJob(job, job.error or "failed", True))
        elif job.status is JobStatus.PENDING and job.error:
            reason = f"retrying (attempt {job.attempts} of {job.max_attempts}): {job.error}"
            found.append(AttentionJob(job, reason, False))
        elif (
            job.status is JobStatus.RUNNING
            and job.lease_expires_at is not None
            and job.lease_expires_at < now
        ):
            reason = f"its worker stopped answering (lease expired {job.lease_expires_at})"
            found.append(AttentionJob(job, reason, False))
    return found


@router.get("/jobs", response_class=HTMLResponse)
def jobs_page(request: Request, ui: Ui, enqueued: str | None = None) -> HTMLResponse:
    queue, tenant = ui.services.queue, ui.caller.tenant_id
    depth = queue.depth(tenant)
    kinds = sorted({kind for kind, _ in depth})
    troubled = queue.list(
        tenant, statuses=[JobStatus.FAILED, JobStatus.PENDING, JobStatus.RUNNING], limit=PAGE * 4
    )
    return ui.render(
        request,
        "jobs.html",
        kinds=kinds,
        statuses=list(JobStatus),
        depth=depth,
        attention=_needs_attention(troubled, ui.services.clock.now())[:PAGE],
        recent=queue.list(tenant, limit=PAGE // 2),
        enqueued=enqueued,
    )


@router.post("/jobs/{job_id}/retry")
def retry_job(job_id: uuid.UUID, ui: Ui, csrf: Annotated[str, Form()] = "") -> Response:
    """A failed job is kept as it is (the audit trail); the retry is a new job of the
    same kind and target, which joins one already pending."""
    ui.check_csrf(f"retry:{job_id}", csrf)
    job = ui.services.queue.get(ui.caller.tenant_id, job_id)
    if job is None or job.status is not JobStatus.FAILED:
        raise PageError(404, "not_found", f"No failed job {job_id} in this tenant.")
    retried, _ = ui.services.queue.enqueue(
        job.tenant_id, job.kind, job.target, now=ui.services.clock.now(), trigger="retry"
    )
    return _see_other(f"/ui/jobs?enqueued={retried.id}")


# -- conflicts ------------------------------------------------------------------------


@router.get("/conflicts", response_class=HTMLResponse)
def conflicts_page(request: Request, ui: Ui, resolved: str | None = None) -> HTMLResponse:
    tenant = ui.caller.tenant_id
    memories: MemoryRepository = ui.services.memories
    conflicts = memories.conflicts(tenant, status=ConflictStatus.OPEN)
    # A conflict states both memories: one the reader may not see hides it whole.
    shown = seen_conflicts(ui.services, tenant, [r.conflict for r in conflicts], ui.reader)
    conflicts = [record for record in conflicts if record.conflict in shown]
    memory_ids = [m for record in conflicts for m in record.conflict.memory_ids]
    by_id = memories.get(tenant, memory_ids) if memory_ids else {}
    episode_ids = [e for memory in by_id.values() for e in memory.source_episode_ids]
    episodes = ui.services.episodes.get_many(tenant, episode_ids) if episode_ids else {}
    return ui.render(
        request,
        "conflicts.html",
        conflicts=conflicts,
        memories=by_id,
        episodes=episodes,
        resolved=resolved,
    )


@router.post("/conflicts/{conflict_id}/resolve")
def resolve_conflict(
    conflict_id: uuid.UUID,
    ui: Ui,
    keep: Annotated[uuid.UUID, Form()],
    csrf: Annotated[str, Form()] = "",
) -> Response:
    ui.check_csrf(f"resolve:{conflict_id}", csrf)
    try:
        ui.services.compile_service.resolve_conflict(ui.caller.tenant_id, conflict_id, keep)
    except ConflictNotFound as error:
        raise PageError(404, "not_found", f"{error} (resolved meanwhile?)") from None
    except ValueError as error:
        raise PageError(422, "validation_error", str(error)) from None
    return _see_other(f"/ui/conflicts?resolved={conflict_id}")


# -- subjects -------------------------------------------------------------------------


@router.get("/subjects", response_class=HTMLResponse)
def subjects_page(
    request: Request,
    ui: Ui,
    subject: str | None = None,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    if subject:
        return _see_other(str(request.url_for("subject_page", subject_id=subject.strip())))
    page = ui.services.episodes.subjects(ui.caller.tenant_id, limit=PAGE, offset=offset)
    counts = ui.services.memories.count_by_subject(
        ui.caller.tenant_id, [summary.subject_id for summary in page.subjects]
    )
    return ui.render(request, "subjects.html", page=page, counts=counts, offset=offset)


@router.get("/subjects/{subject_id:path}", response_class=HTMLResponse)
def subject_page(
    request: Request,
    ui: Ui,
    subject_id: str,
    task: Annotated[str, Query(max_length=10_000)] = "",
    max_tokens: Annotated[int, Query(ge=1, le=200_000)] = 1000,
    as_of: Annotated[str, Query(max_length=64)] = "",
) -> HTMLResponse:
    tenant = ui.caller.tenant_id
    moment = _moment(as_of)
    seen = ui.services.read_gate.visibility(tenant, subject_id, ui.reader, path="admin")
    report = seen_report(
        inspect_subject(ui.services.episodes, ui.services.memories, tenant, subject_id), seen
    )
    # The report lists episodes without their payloads; a person reads them here.
    stored = ui.services.episodes.get_many(tenant, [episode.id for episode in report.episodes])
    revisions = {
        episode.id: ui.services.episodes.revisions(tenant, episode.id)
        for episode in report.episodes
        if episode.revisions_kept and episode.id not in seen.redacted_episodes
    }
    bundle = (
        ui.services.context.bundle(
            tenant, subject_id, task, max_tokens, moment, visibility=seen
        ).to_dict()
        if task
        else None
    )
    return ui.render(
        request,
        "subject.html",
        report=report,
        health=ui.services.support.health(tenant, subject_id),
        resolutions=ui.services.resolutions.list(tenant, subject_id, limit=PAGE),
        payloads={
            episode_id: {"text": REDACTION_MARKER}
            if episode_id in seen.redacted_episodes
            else record.payload
            for episode_id, record in stored.items()
        },
        labels=ui.services.labels.of_subject(tenant, subject_id).memories,
        revisions=revisions,
        bundle=bundle,
        task=task,
        max_tokens=max_tokens,
        as_of=as_of,
    )


def _moment(text: str) -> datetime | None:
    """The bundle form's ``as_of``: empty (now), or an ISO 8601 moment (naive: UTC)."""
    if not text.strip():
        return None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise PageError(
            422, "validation_error", f"as of {text!r} is not a moment, e.g. 2026-03-01T12:00Z"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
