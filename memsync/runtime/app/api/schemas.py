"""Request and response bodies of the HTTP API (the Statewave v1 contract, plus additions).

Unknown request fields are ignored, wrong types are not: a string where an object is
expected is a 422 naming the field.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memsync.clock import utc
from memsync.episode import EpisodeDraft, IngestStatus, canonical_json
from memsync.runtime.reading.episodes import EpisodeRecord
from memsync.runtime.storage.schema import (
    IDEMPOTENCY_KEY_LENGTH,
    LABEL_LENGTH,
    SUBJECT_ID_LENGTH,
)

__all__ = [
    "BatchCreateResponse",
    "BatchEpisodesRequest",
    "CreateEpisodeRequest",
    "DeleteSubjectResponse",
    "EpisodeResponse",
    "RequestBody",
    "SubjectsResponse",
    "TimelineResponse",
]


class RequestBody(BaseModel):
    """Base of request bodies: unknown fields are ignored, wrong types are not."""

    model_config = ConfigDict(extra="ignore")


class CreateEpisodeRequest(RequestBody):
    """One episode. ``metadata.idempotency_key`` is used when the top-level key is absent."""

    subject_id: str = Field(min_length=1, max_length=SUBJECT_ID_LENGTH)
    source: str = Field(min_length=1, max_length=LABEL_LENGTH)
    type: str = Field(min_length=1, max_length=LABEL_LENGTH)
    payload: dict[str, Any]
    metadata: dict[str, Any] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
    session_id: str | None = Field(default=None, max_length=LABEL_LENGTH)
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=IDEMPOTENCY_KEY_LENGTH
    )
    occurred_at: datetime | None = None

    @field_validator("payload", "metadata", "provenance")
    @classmethod
    def _plain_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Python's JSON parser accepts NaN and Infinity; the store's canonical JSON
        # does not, so they are refused here, as a validation error on the field.
        if value:
            try:
                canonical_json(value)
            except ValueError:
                raise ValueError("NaN and Infinity are not valid JSON numbers") from None
        return value

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
    episodes: list[CreateEpisodeRequest]


class EpisodeResponse(BaseModel):
    """An episode as stored; ``ingest_outcome`` and ``revision`` are memsync additions."""

    id: uuid.UUID
    subject_id: str
    source: str
    type: str
    payload: dict[str, Any]
    metadata: dict[str, Any]
    provenance: dict[str, Any]
    session_id: str | None
    idempotency_key: str | None
    occurred_at: datetime
    created_at: datetime
    revision: int
    ingest_outcome: IngestStatus | None = None

    @classmethod
    def of(cls, record: EpisodeRecord, outcome: IngestStatus | None = None) -> EpisodeResponse:
        # Stored rows are valid by construction: skip re-validating them field by field.
        return cls.model_construct(
            id=record.id,
            subject_id=record.subject_id,
            source=record.source,
            type=record.type,
            payload=record.payload,
            metadata=record.metadata,
            provenance=record.provenance,
            session_id=record.session_id,
            idempotency_key=record.idempotency_key,
            occurred_at=record.occurred_at,
            created_at=record.created_at,
            revision=record.revision,
            ingest_outcome=outcome,
        )


class BatchCreateResponse(BaseModel):
    """``episodes_created`` counts only new episodes; the other two are additions."""

    episodes_created: int
    duplicates: int
    revised: int
    episodes: list[EpisodeResponse]


class RevisionResponse(BaseModel):
    revision: int
    content_hash: str
    source: str
    payload: dict[str, Any]
    metadata: dict[str, Any]
    provenance: dict[str, Any]
    occurred_at: datetime
    recorded_at: datetime
    replaced_at: datetime


class EpisodeWithRevisionsResponse(EpisodeResponse):
    content_hash: str
    revisions: list[RevisionResponse]


class TimelineResponse(BaseModel):
    subject_id: str
    episodes: list[EpisodeResponse]
    memories: list[dict[str, Any]]
    episodes_has_more: bool
    memories_has_more: bool


class SubjectResponse(BaseModel):
    subject_id: str
    episode_count: int
    memory_count: int


class SubjectsResponse(BaseModel):
    subjects: list[SubjectResponse]
    total: int


class DeleteSubjectResponse(BaseModel):
    subject_id: str
    episodes_deleted: int
    memories_deleted: int
