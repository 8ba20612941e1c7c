"""Memory endpoints: compile, search, context bundles, conflicts and the inspector."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, Field, StrictBool

from memsync.compile.bundle import BundleJson, BundleLayout, MemoryJson, dump_json
from memsync.compile.sensitivity import MAX_LABEL_LENGTH, MAX_LABELS, CallerIdentity
from memsync.compile.types import ConflictStatus
from memsync.runtime.app.api.deps import CallerDep, ReaderDep, ServicesDep
from memsync.runtime.app.api.errors import ApiError, validation_error
from memsync.runtime.app.api.jobs import CompileJobResponse, enqueue_compile
from memsync.runtime.app.api.openapi import error_responses
from memsync.runtime.app.api.policy import (
    body_visibility,
    seen_conflicts,
    seen_report,
    shown_memories,
    visibility,
)
from memsync.runtime.app.api.schemas import Moment, RequestBody, SubjectId, Text
from memsync.runtime.app.services import Services
from memsync.runtime.compiling import (
    CompileSummary,
    ConflictNotFound,
    ConflictResolution,
    result_summary,
)
from memsync.runtime.reading import ConflictJson, InspectionReport, inspect_subject
from memsync.runtime.storage.schema import LABEL_LENGTH

__all__ = [
    "CompileResponse",
    "ConflictsResponse",
    "ContextResponse",
    "SearchResponse",
    "router",
]

router = APIRouter()

MAX_BUNDLE_TOKENS = 200_000


class CompileRequest(RequestBody):
    subject_id: SubjectId
    async_: StrictBool = Field(default=False, alias="async")


class ContextRequest(RequestBody):
    subject_id: SubjectId
    task: Text = Field(max_length=10_000)
    max_tokens: int = Field(default=1000, ge=1, le=MAX_BUNDLE_TOKENS)
    as_of: Moment | None = None
    valid_at: Moment | None = Field(
        default=None,
        description="valid time: rank the memories that held then (whatever their status "
        "now) and the episodes that occurred by then; as_of stays the transaction time",
    )
    layout: BundleLayout | None = Field(
        default=None,
        description="memsync (plain headings) or statewave (Markdown sections); "
        "default: the configuration's context.layout",
    )
    emit_receipt: StrictBool = Field(
        default=False,
        description="write a receipt of this bundle; the answer carries its receipt_id",
    )
    query_id: Text | None = Field(default=None, max_length=LABEL_LENGTH)
    task_id: Text | None = Field(default=None, max_length=LABEL_LENGTH)
    parent_receipt_id: Text | None = Field(default=None, max_length=LABEL_LENGTH)
    caller_id: Text | None = Field(
        default=None,
        max_length=LABEL_LENGTH,
        description="who reads, for the read policy (over the X-Caller-ID header)",
    )
    caller_type: Text | None = Field(
        default=None,
        max_length=LABEL_LENGTH,
        description="what kind of caller reads, e.g. agent (over the X-Caller-Type header)",
    )


class LabelsRequest(RequestBody):
    sensitivity_labels: list[Text] = Field(
        description="replaces the memory's own labels: trimmed, lowercased, deduplicated, "
        f"sorted; at most {MAX_LABELS} of at most {MAX_LABEL_LENGTH} characters"
    )


class LabelledMemoryJson(MemoryJson):
    """A memory with its ``sensitivity_labels``: its own and its source episodes'."""

    sensitivity_labels: list[str]


class ContextResponse(BundleJson):
    """A bundle; with ``emit_receipt``, also the id of its receipt (Statewave's fields).
    ``context_hash`` of the receipt is the SHA-256 of this very body."""

    receipt_id: str | None = None
    receipt_emitted: bool = False


class ResolveConflictRequest(RequestBody):
    keep_memory_id: uuid.UUID


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileResponse(CompileSummary):
    """A compile's counts and the memories it created (Statewave ``CompileResult``, with
    the counts as additions)."""

    memories: list[MemoryJson]


class SearchResponse(BaseModel):
    memories: list[MemoryJson]


class ConflictsResponse(BaseModel):
    conflicts: list[ConflictJson]


@router.post(
    "/v1/memories/compile",
    response_model=CompileResponse,
    responses={202: {"model": CompileJobResponse, "description": "Enqueued (async)"}},
)
def compile_memories(
    body: CompileRequest, services: ServicesDep, caller: CallerDep, reader: ReaderDep
) -> Response:
    """Compile a subject's new and revised episodes into memories, as a set.

    A second call with nothing new creates nothing (``memories_created`` 0). With
    ``"async": true`` it answers 202 with a compile job to poll instead.
    """
    if body.async_:
        job = enqueue_compile(services, caller.tenant_id, body.subject_id)
        return Response(job.model_dump_json(), status_code=202, media_type="application/json")
    result = services.compile_service.compile(caller.tenant_id, body.subject_id)
    # The memories created are a read too: the caller sees them as the policy says.
    seen = visibility(services, caller.tenant_id, body.subject_id, reader, "compile")
    # Encoded here, on the request's worker thread, and without validating: a compile
    # can return thousands of memories, which FastAPI would validate and encode again on
    # the event loop, where every other request waits for it, and which validating into
    # CompileResponse first took about as long again as encoding (the same bytes).
    answer = {
        **result_summary(result),
        "memories": [MemoryJson.values_of(memory) for memory in seen.memories(result.memories)],
    }
    return Response(dump_json(answer), media_type="application/json")


@router.get("/v1/memories/search")
def search_memories(
    services: ServicesDep,
    caller: CallerDep,
    reader: ReaderDep,
    subject_id: Annotated[SubjectId, Query()],
    kind: Annotated[str | None, Query(max_length=64)] = None,
    q: Annotated[Text | None, Query(max_length=1000)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 20,
    as_of: Annotated[Moment | None, Query()] = None,
    valid_at: Annotated[Moment | None, Query()] = None,
) -> SearchResponse:
    """Active memories of a subject containing every word of ``q``, newest first.

    ``kind`` filters, whatever its value: a kind memsync does not derive finds nothing.
    With ``as_of``: the memories active then, as the store held them then. With
    ``valid_at``: the memories that held at that valid time, whatever their status now
    (not tombstoned; as the store held them at ``as_of`` if given). What the read
    policy denies the caller is absent, a redacted memory shows the marker.
    """
    seen = visibility(services, caller.tenant_id, subject_id, reader, "search")
    found = services.search.search(
        caller.tenant_id,
        subject_id,
        kind=kind,
        text=q,
        # Asked for as many more as could be denied, so a page stays full.
        limit=limit + len(seen.denied_memories),
        as_of=as_of,
        valid_at=valid_at,
    )
    shown = shown_memories((MemoryJson.model_validate(memory) for memory in found), seen)
    return SearchResponse(memories=shown[:limit])


@router.post("/v1/context", response_model=ContextResponse)
def context(
    body: ContextRequest, services: ServicesDep, caller: CallerDep, reader: ReaderDep
) -> Response:
    """A ranked, token-bounded bundle of what is currently true: active memories and
    recent episodes, never the text of a superseded one.

    With ``valid_at`` it holds what the sources say was true then: the memories that
    held at that valid time (a memory superseded since included, a tombstoned one
    never) and the episodes that occurred by then; ``provenance.valid_at`` echoes it.
    The wall clock is never read: with ``as_of`` the bundle is assembled as the store
    stood then, and without it as of the latest change it reflects, so equal store
    state and request give byte-identical bodies. The body is the bundle's canonical
    JSON (RFC 8785), as it is: never re-serialised. With ``emit_receipt`` a receipt is
    written (``GET /v1/receipts/{receipt_id}``) whose ``context_hash`` is the SHA-256
    of this body. The read policy decides for ``caller_id``/``caller_type`` (or the
    ``X-Caller-*`` headers): a denied memory, and the episodes it came from, are absent
    before anything is counted; a redacted one shows the marker.
    """
    seen = body_visibility(services, caller.tenant_id, body, reader, "context")
    receipts = services.receipts
    served = receipts.serve(
        caller.tenant_id,
        receipts.request(
            body.subject_id, body.task, body.max_tokens, body.as_of, body.layout, body.valid_at
        ),
        emit_receipt=body.emit_receipt,
        query_id=body.query_id,
        task_id=body.task_id,
        parent_receipt_id=body.parent_receipt_id,
        visibility=seen,
    )
    return Response(served.body, media_type="application/json")


@router.patch(
    "/v1/memories/{memory_id}/labels",
    response_model=LabelledMemoryJson,
    responses=error_responses(404),
)
def set_memory_labels(
    memory_id: uuid.UUID, body: LabelsRequest, services: ServicesDep, caller: CallerDep
) -> LabelledMemoryJson:
    """Replace a memory's own sensitivity labels (Statewave's ``set_memory_labels``).

    Labels are trimmed, lowercased, deduplicated and sorted; an empty list clears the
    memory's own labels. A repeat stores the same. The answer's ``sensitivity_labels``
    also hold the labels the memory inherits from its source episodes (a connector
    rule's), which this route does not remove. More than 32 labels, or one longer than
    64 characters, is a 422 saying which."""
    try:
        labels = services.labels.set_memory_labels(
            caller.tenant_id, memory_id, body.sensitivity_labels
        )
    except ValueError as error:
        raise validation_error("sensitivity_labels", str(error)) from None
    memory = services.memories.get(caller.tenant_id, [memory_id]).get(memory_id)
    if labels is None or memory is None:
        raise ApiError(404, "not_found", f"no memory {memory_id}")
    return LabelledMemoryJson.model_validate(
        {**MemoryJson.model_validate(memory).model_dump(), "sensitivity_labels": list(labels)}
    )


@router.get("/v1/conflicts")
def list_conflicts(
    services: ServicesDep,
    caller: CallerDep,
    reader: ReaderDep,
    subject_id: Annotated[SubjectId | None, Query()] = None,
    status: ConflictStatus | None = ConflictStatus.OPEN,
) -> ConflictsResponse:
    """Conflicts recorded under the ``flag`` policy; open ones by default. A conflict
    naming a memory the read policy denies or redacts to the caller is left out."""
    records = services.memories.conflicts(caller.tenant_id, subject_id, status=status)
    shown = [ConflictJson.of(record) for record in records]
    return ConflictsResponse(conflicts=seen_conflicts(services, caller.tenant_id, shown, reader))


@router.post("/v1/conflicts/{conflict_id}/resolve", responses=error_responses(404))
def resolve_conflict(
    conflict_id: uuid.UUID, body: ResolveConflictRequest, services: ServicesDep, caller: CallerDep
) -> ConflictResolution:
    """A person keeps one memory of an open conflict; the other is superseded (manual)."""
    try:
        resolution = services.compile_service.resolve_conflict(
            caller.tenant_id, conflict_id, body.keep_memory_id
        )
    except ConflictNotFound as error:
        raise ApiError(404, "not_found", str(error)) from None
    except ValueError as error:
        raise validation_error("keep_memory_id", str(error)) from None
    return resolution


@router.get("/v1/subjects/{subject_id:path}/inspect", responses=error_responses(404))
def inspect(
    subject_id: Annotated[SubjectId, Path()],
    services: ServicesDep,
    caller: CallerDep,
    reader: ReaderDep,
    valid_at: Annotated[Moment | None, Query()] = None,
    as_of: Annotated[Moment | None, Query()] = None,
) -> InspectionReport:
    """Everything about a subject: episodes with revision counts, memories by status,
    supersession records and open conflicts (the audit path). The id may contain ``/``
    (``repo:acme/api-server``); ``GET /v1/subjects/inspect?subject_id=`` takes any id.
    With ``valid_at``, ``held`` names the memories that held at that valid time; with
    ``as_of``, the report is the store's at that transaction time. The read policy
    applies: denied memories and the episodes behind them are absent."""
    return _inspected(services, caller.tenant_id, subject_id, reader, valid_at, as_of)


@router.get("/v1/subjects/inspect")
def inspect_by_query(
    subject_id: Annotated[SubjectId, Query()],
    services: ServicesDep,
    caller: CallerDep,
    reader: ReaderDep,
    valid_at: Annotated[Moment | None, Query()] = None,
    as_of: Annotated[Moment | None, Query()] = None,
) -> InspectionReport:
    """The inspector report of any subject id, however it is spelt in a URL path."""
    return _inspected(services, caller.tenant_id, subject_id, reader, valid_at, as_of)


def _inspected(
    services: Services,
    tenant_id: str,
    subject_id: str,
    reader: CallerIdentity,
    valid_at: datetime | None,
    as_of: datetime | None,
) -> InspectionReport:
    seen = visibility(services, tenant_id, subject_id, reader, "inspect")
    report = inspect_subject(
        services.episodes, services.memories, tenant_id, subject_id, valid_at, as_of=as_of
    )
    return seen_report(report, seen)
