"""Request and response bodies of the HTTP API (the Statewave v1 contract, plus additions).

Unknown request fields are ignored, wrong types are not: a string where an object is
expected is a 422 naming the field.

A response body declares only what it adds: an episode extends the reader's
:class:`~memsync.runtime.reading.episodes.Episode`, a revision is the reader's
:class:`~memsync.runtime.reading.episodes.RevisionRecord` itself, and memories are the
bundle's :class:`~memsync.compile.bundle.MemoryJson`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from memsync.clock import utc
from memsync.compile.bundle import MemoryJson
from memsync.episode import EpisodeDraft, IngestStatus
from memsync.runtime.ingest.limits import json_problem, moment_problem, text_problem
from memsync.runtime.reading.episodes import (
    Episode,
    EpisodeRecord,
    RevisionRecord,
    SubjectSummary,
)
from memsync.runtime.storage.schema import (
    IDEMPOTENCY_KEY_LENGTH,
    LABEL_LENGTH,
    SUBJECT_ID_LENGTH,
)

__all__ = [
    "MAX_OFFSET",
    "BatchCreateResponse",
    "BatchEpisodesRequest",
    "CreateEpisodeRequest",
    "EpisodeResponse",
    "EpisodeWithRevisionsResponse",
    "JsonObject",
    "Label",
    "Moment",
    "RequestBody",
    "SubjectId",
    "SubjectResponse",
    "SubjectsResponse",
    "Text",
    "TimelineResponse",
]

MAX_OFFSET = 2**31 - 1
"""The largest ``offset`` of any list endpoint (a page that far in is empty anyway)."""


def _storable_text(value: str) -> str:
    problem = text_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _storable_json(value: dict[str, Any]) -> dict[str, Any]:
    # The field's own name is in the error's location already.
    problem = json_problem(value, "")
    if problem:
        raise ValueError(problem.removeprefix(": ").removeprefix("."))
    return value


def _iso_string(value: object) -> object:
    # Lax parsing would read 0 as 1970 and large integers as milliseconds.
    if isinstance(value, int | float):
        raise ValueError("must be an ISO 8601 string, e.g. 2026-01-31T12:00:00Z")
    return value


def _storable_moment(value: datetime) -> datetime:
    problem = moment_problem(value)
    if problem:
        raise ValueError(problem)
    return value


Text = Annotated[str, AfterValidator(_storable_text)]
"""Any text a request sends: no NUL character, no lone surrogate (see ``limits``)."""
SubjectId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=SUBJECT_ID_LENGTH),
    AfterValidator(_storable_text),
]
Label = Annotated[
    str, StringConstraints(min_length=1, max_length=LABEL_LENGTH), AfterValidator(_storable_text)
]
JsonObject = Annotated[dict[str, Any], AfterValidator(_storable_json)]
"""A JSON object the store can hold and answer with: text as :data:`Text`, at most
``MAX_JSON_DEPTH`` levels, no NaN or Infinity."""
Moment = Annotated[datetime, BeforeValidator(_iso_string), AfterValidator(_storable_moment)]
"""An ISO 8601 time (never a number) within the years 1 to 9999 in UTC; no zone: UTC."""


class RequestBody(BaseModel):
    """Base of request bodies: unknown fields are ignored, wrong types are not."""

    model_config = ConfigDict(extra="ignore")


class CreateEpisodeRequest(RequestBody):
    """One episode. ``metadata.idempotency_key`` is used when the top-level key is absent."""

    subject_id: SubjectId
    source: Label
    type: Label
    payload: JsonObject
    metadata: JsonObject = Field(default_factory=dict)
    provenance: JsonObject = Field(default_factory=dict)
    session_id: Text | None = Field(default=None, max_length=LABEL_LENGTH)
    idempotency_key: Text | None = Field(
        default=None, min_length=1, max_length=IDEMPOTENCY_KEY_LENGTH
    )
    occurred_at: Moment | None = None

    @model_validator(mode="after")
    def _key_from_metadata(self) -> CreateEpisodeRequest:
        if self.idempotency_key is None and "idempotency_key" in self.metadata:
            key = self.metadata["idempotency_key"]
            if not isinstance(key, str) or not 0 < len(key) <= IDEMPOTENCY_KEY_LENGTH:
                raise ValueError(
                    "metadata.idempotency_key must be a non-empty string of at most "
                    f"{IDEMPOTENCY_KEY_LENGTH} characters"
                )
            self.idempotency_key = key
        return self

    def to_draft(self) -> EpisodeDraft:
        return EpisodeDraft(
            subject_id=self.subject_id,
            source=self.source,
            type=self.type,
            payload=self.payload,
            idempotency_key=self.idempotency_key,
            occurred_at=utc(self.occurred_at) if self.occurred_at else None,
            metadata=self.metadata,
            provenance=self.provenance,
            session_id=self.session_id,
        )


class BatchEpisodesRequest(RequestBody):
    """At least one episode (an empty batch is a 422, as in Statewave); the upper bound
    is ``api.max_batch_size``, checked by the route."""

    episodes: list[CreateEpisodeRequest] = Field(min_length=1)


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeResponse(Episode):
    """An episode as stored; ``ingest_outcome`` and ``revision`` are memsync additions."""

    ingest_outcome: IngestStatus | None = None

    @classmethod
    def of(cls, record: Episode, outcome: IngestStatus | None = None) -> EpisodeResponse:
        # Stored rows are valid by construction: copied as they are, not re-validated.
        return cls(**_shown(record), ingest_outcome=outcome)


_EPISODE_FIELDS = tuple(field.name for field in fields(Episode))


def _shown(record: Episode) -> dict[str, Any]:
    """What readers are shown of ``record`` (an :class:`EpisodeRecord` holds more)."""
    return {name: getattr(record, name) for name in _EPISODE_FIELDS}


class BatchCreateResponse(BaseModel):
    """``episodes_created`` counts only new episodes; the other two are additions."""

    episodes_created: int
    duplicates: int
    revised: int
    episodes: list[EpisodeResponse]


@dataclass(frozen=True, slots=True, kw_only=True)
class EpisodeWithRevisionsResponse(EpisodeResponse):
    """One episode with its content hash and every earlier revision, oldest first."""

    content_hash: str
    revisions: list[RevisionRecord]

    @classmethod
    def with_revisions(
        cls, record: EpisodeRecord, revisions: list[RevisionRecord]
    ) -> EpisodeWithRevisionsResponse:
        return cls(**_shown(record), content_hash=record.content_hash, revisions=revisions)


class TimelineResponse(BaseModel):
    subject_id: str
    episodes: list[EpisodeResponse]
    memories: list[MemoryJson]
    episodes_has_more: bool
    memories_has_more: bool


@dataclass(frozen=True, slots=True)
class SubjectResponse(SubjectSummary):
    """A subject with its episode count and its count of active memories."""

    memory_count: int


class SubjectsResponse(BaseModel):
    subjects: list[SubjectResponse]
    total: int
