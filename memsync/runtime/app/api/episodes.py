"""The episode routes of the Statewave v1 contract: create (one or a batch), read one,
the timeline, subjects, and deleting a subject.

They are the hottest routes and are matched first: Starlette tries routes in the order
they were added, so every route before them is a comparison per request.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from pydantic import TypeAdapter

from memsync.compile.bundle import MemoryJson
from memsync.compile.sensitivity import REDACTION_MARKER
from memsync.compile.types import MemoryStatus
from memsync.episode import EpisodeDraft, IngestStatus
from memsync.runtime.app.api.deps import MAX_PAGE, CallerDep, ReaderDep, ServicesDep
from memsync.runtime.app.api.errors import ApiError, validation_error
from memsync.runtime.app.api.lean_route import LeanJsonRoute
from memsync.runtime.app.api.openapi import error_responses
from memsync.runtime.app.api.policy import shown_memories, visibility
from memsync.runtime.app.api.schemas import (
    MAX_OFFSET,
    BatchCreateResponse,
    BatchEpisodesRequest,
    CreateEpisodeRequest,
    EpisodeResponse,
    EpisodeWithRevisionsResponse,
    Moment,
    SubjectId,
    SubjectResponse,
    SubjectsResponse,
    TimelineResponse,
)
from memsync.runtime.app.removals import SubjectDeletion
from memsync.runtime.app.services import Services
from memsync.runtime.ingest import IngestOutcome, IngestSummary
from memsync.runtime.reading.episodes import EpisodeRecord

__all__ = ["lean_router", "router"]

router = APIRouter()

lean_router = APIRouter(route_class=LeanJsonRoute)
"""The single-episode create, whose valid requests take the short path (lean_route)."""


def _ingest(
    services: Services, tenant_id: str, drafts: list[EpisodeDraft]
) -> tuple[list[IngestOutcome], list[EpisodeResponse]]:
    """Ingest ``drafts`` and answer with what was stored: a new episode as its insert
    wrote it (not read back), a known one as read back in the ingest's transaction."""
    outcomes = services.ingest.ingest(tenant_id, drafts, with_stored=True)
    return outcomes, [_answer(outcome) for outcome in outcomes]


def _answer(outcome: IngestOutcome) -> EpisodeResponse:
    """The episode as an ingest asked ``with_stored`` left it."""
    assert outcome.stored is not None
    return EpisodeResponse.of(EpisodeRecord.from_columns(outcome.stored), outcome.status)


_EPISODE: TypeAdapter[EpisodeResponse] = TypeAdapter(EpisodeResponse)


def _json(body: bytes | str, status: int) -> Response:
    """A body serialised directly by pydantic (``model_dump_json``, ``dump_json``): the
    hot ingest routes skip FastAPI's re-validation of a response built from valid data."""
    return Response(body, status_code=status, media_type="application/json")


@lean_router.post(
    "/v1/episodes",
    status_code=201,
    response_model=EpisodeResponse,
    responses={200: {"model": EpisodeResponse, "description": "Already known"}},
)
async def create_episode(
    body: CreateEpisodeRequest, services: ServicesDep, caller: CallerDep
) -> Response:
    """Record one episode: 201 when new, 200 with the same id when it was known."""
    # A coroutine: a new episode's insert is awaited on the event loop, without the hop
    # to the thread pool a plain route takes (ingest_one hands blocking work to it).
    outcome = await services.ingest.ingest_one(caller.tenant_id, body.to_draft(), with_stored=True)
    status = 201 if outcome.status is IngestStatus.CREATED else 200
    return _json(_EPISODE.dump_json(_answer(outcome)), status)


@router.post("/v1/episodes/batch", status_code=201, response_model=BatchCreateResponse)
def create_episodes_batch(
    body: BatchEpisodesRequest, services: ServicesDep, caller: CallerDep
) -> Response:
    """Record many episodes at once; ``episodes_created`` counts only new ones."""
    limit = services.settings.api.max_batch_size
    if len(body.episodes) > limit:
        raise validation_error(
            "episodes", f"at most {limit} episodes per batch, got {len(body.episodes)}"
        )
    outcomes, episodes = _ingest(
        services, caller.tenant_id, [episode.to_draft() for episode in body.episodes]
    )
    summary = IngestSummary.of(outcomes)
    response = BatchCreateResponse.model_construct(
        episodes_created=summary.created,
        duplicates=summary.duplicates,
        revised=summary.revised,
        episodes=episodes,
    )
    return _json(response.model_dump_json(), 201)


@router.get("/v1/episodes/{episode_id}", responses=error_responses(404))
def get_episode(
    episode_id: uuid.UUID, services: ServicesDep, caller: CallerDep, reader: ReaderDep
) -> EpisodeWithRevisionsResponse:
    """One episode at its current revision, with every earlier revision. An episode the
    read policy hides from the caller (denied, or behind a denied memory) is unknown:
    404, and a redacted one is refused the same way (its revisions repeat its text)."""
    record = services.episodes.get_many(caller.tenant_id, [episode_id]).get(episode_id)
    if record is not None:
        seen = visibility(services, caller.tenant_id, record.subject_id, reader, "episode")
        if not seen.shows_episode(episode_id) or episode_id in seen.redacted_episodes:
            record = None
    if record is None:
        raise ApiError(404, "not_found", f"no episode {episode_id}")
    return EpisodeWithRevisionsResponse.with_revisions(
        record, services.episodes.revisions(caller.tenant_id, episode_id)
    )


@router.get("/v1/timeline", response_model=TimelineResponse)
def timeline(
    services: ServicesDep,
    caller: CallerDep,
    reader: ReaderDep,
    subject_id: Annotated[SubjectId, Query()],
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    newest_first: bool = False,
    as_of: Annotated[Moment | None, Query()] = None,
) -> Response:
    """A page of a subject's episodes and a page of its memories (every status),
    oldest first within each page. With ``as_of``, as the store held them then: the
    episodes filed under the subject at the revision each had, the memories that
    existed with their status then. What the read policy denies the caller is left out
    of the page (which may then hold fewer rows than ``limit``); a redacted row shows
    the marker instead of its text."""
    seen = visibility(services, caller.tenant_id, subject_id, reader, "timeline")
    page = services.episodes.timeline(
        caller.tenant_id,
        subject_id,
        limit=limit,
        offset=offset,
        newest_first=newest_first,
        as_of=as_of,
    )
    if as_of is None:
        memories = services.memories.memories(
            caller.tenant_id,
            subject_id,
            statuses=tuple(MemoryStatus),
            limit=limit + 1,
            offset=offset,
            newest_first=newest_first,
        )
    else:
        # Every memory then, in (valid_from, id) order: paged here, as the query pages.
        then = services.memories.memories_at(caller.tenant_id, subject_id, as_of)
        if newest_first:
            then.reverse()
        memories = then[offset : offset + limit + 1]
    memories_page = memories[:limit]
    if newest_first:
        memories_page.reverse()
    # Serialised here, not handed back to FastAPI, which would validate the model it
    # was given again before serialising it (4% of the route's instructions).
    answer = TimelineResponse(
        subject_id=subject_id,
        episodes=[
            _redacted(EpisodeResponse.of(record))
            if record.id in seen.redacted_episodes
            else EpisodeResponse.of(record)
            for record in page.episodes
            if seen.shows_episode(record.id)
        ],
        memories=shown_memories(
            (MemoryJson.model_validate(memory) for memory in memories_page), seen
        ),
        episodes_has_more=page.has_more,
        memories_has_more=len(memories) > limit,
    )
    return Response(answer.model_dump_json(), media_type="application/json")


def _redacted(episode: EpisodeResponse) -> EpisodeResponse:
    return dataclasses.replace(episode, payload={"text": REDACTION_MARKER}, metadata={})


@router.get("/v1/subjects")
def list_subjects(
    services: ServicesDep,
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> SubjectsResponse:
    """The tenant's subjects, by id, with their episode and memory counts."""
    page = services.episodes.subjects(caller.tenant_id, limit=limit, offset=offset)
    memory_counts = services.memories.count_by_subject(
        caller.tenant_id, [subject.subject_id for subject in page.subjects]
    )
    return SubjectsResponse(
        subjects=[
            SubjectResponse(
                subject_id=subject.subject_id,
                episode_count=subject.episode_count,
                memory_count=memory_counts.get(subject.subject_id, 0),
            )
            for subject in page.subjects
        ],
        total=page.total,
    )


# A path no route matches (a subject with a line break cannot be in one) is a 404.
@router.delete("/v1/subjects/{subject_id:path}", responses=error_responses(404))
def delete_subject(
    subject_id: Annotated[SubjectId, Path()], services: ServicesDep, caller: CallerDep
) -> SubjectDeletion:
    """Delete everything of one subject of the caller's tenant. The only delete.

    The id may contain ``/`` (``repo:acme/api-server``); ``DELETE
    /v1/subjects?subject_id=`` takes any id, however it is spelt in a URL path."""
    return services.delete_subject(caller.tenant_id, subject_id)


@router.delete("/v1/subjects")
def delete_subject_by_query(
    subject_id: Annotated[SubjectId, Query()], services: ServicesDep, caller: CallerDep
) -> SubjectDeletion:
    """As ``DELETE /v1/subjects/{subject_id}``, the id as a query parameter."""
    return services.delete_subject(caller.tenant_id, subject_id)
