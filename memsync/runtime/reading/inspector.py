"""The inspector: everything the store knows about one subject, for people and machines.

The read path (context bundles) shows active memories only; this is the audit path,
showing every episode with its revisions, memories in every status, the supersession
records with rule, claim key, score and threshold, and conflicts.

:class:`InspectionReport` is the one shape of a report: ``GET
/v1/subjects/{id}/inspect`` answers it and ``memsync inspect --json`` prints it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, TypeAdapter

from memsync.clock import IsoDatetime, utc
from memsync.compile.bundle import MemoryJson, RecordJson, stands
from memsync.compile.resolve import ConflictFinding, OpenConflict
from memsync.compile.types import ConflictStatus, MemoryStatus, SupersessionRule
from memsync.runtime.compiling.memories import ConflictRecord
from memsync.runtime.reading.episodes import EpisodeRecord, EpisodeRepository
from memsync.runtime.reading.memories import (
    EarlierVersion,
    MemoryRepository,
    SupersessionRecord,
)

__all__ = [
    "ConflictJson",
    "InspectedEpisode",
    "InspectedMemory",
    "InspectionReport",
    "inspect_subject",
]

INSPECT_EPISODES = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class ConflictJson(ConflictFinding):
    """A conflict as the API, the CLI and the inspector show it: what the resolver found
    and recorded (not the memory keys), how it stands, and the memory a person kept."""

    memory_ids: tuple[uuid.UUID, uuid.UUID]
    contents: tuple[str, str]
    status: ConflictStatus
    job_id: str | None
    detected_at: IsoDatetime
    resolved_at: IsoDatetime | None
    kept_memory_id: uuid.UUID | None

    @classmethod
    def of(cls, record: ConflictRecord) -> ConflictJson:
        conflict = record.conflict
        return cls(
            **{name: getattr(conflict, name) for name in _FROM_CONFLICT},
            status=record.status,
            resolved_at=record.resolved_at,
            kept_memory_id=record.chosen_memory_id,
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values, as ``memsync conflicts list --json`` prints them."""
        dumped: dict[str, Any] = _CONFLICT.dump_python(self, mode="json")
        return dumped


_FROM_CONFLICT = tuple(
    shown.name for shown in fields(ConflictJson) if shown.name in OpenConflict.__dataclass_fields__
)
"""The fields a :class:`ConflictJson` shows of the open conflict as they are."""
_CONFLICT: TypeAdapter[ConflictJson] = TypeAdapter(ConflictJson)


class InspectedEpisode(RecordJson):
    """An episode in the report, validated from an :class:`EpisodeRecord`: its key, its
    revision, how many earlier revisions are kept and the revision compiled."""

    id: uuid.UUID
    source: str
    type: str
    idempotency_key: str | None
    occurred_at: IsoDatetime
    revision: int
    revisions_kept: int
    compiled_revision: int
    deleted_at: IsoDatetime | None

    @classmethod
    def derived(cls, record: EpisodeRecord) -> dict[str, Any]:
        return {"revisions_kept": record.revision - 1}


class InspectedMemory(MemoryJson):
    """A memory in the report: as the API shows it, with its claim value and the rule
    that last changed its status."""

    claim_value: str | None
    status_rule: SupersessionRule | None


class InspectionReport(BaseModel):
    """Everything about one subject: its newest episodes (``episodes_truncated`` when
    there are more), memories by status (as they are now), supersession records,
    conflicts, and apart from them the earlier versions of its memories (``history``:
    what the store said before a later change, oldest first). Asked with ``valid_at``,
    also ``held``: the ids of the memories that held at that valid time. Asked with
    ``as_of``, all of it as the store held it at that transaction time (see
    :func:`inspect_subject` for the one exception, supersession records)."""

    subject_id: str
    episodes: list[InspectedEpisode]
    episodes_truncated: bool
    memories: dict[MemoryStatus, list[InspectedMemory]]
    supersessions: list[SupersessionRecord]
    conflicts: list[ConflictJson]
    history: list[EarlierVersion]
    # Only when asked for: a report without them reads as it always did.
    as_of: IsoDatetime | None = Field(default=None, exclude_if=lambda value: value is None)
    valid_at: IsoDatetime | None = Field(default=None, exclude_if=lambda value: value is None)
    held: list[uuid.UUID] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="the memories (any status but tombstoned) that held at valid_at, "
        "by (valid_from, id)",
    )


def inspect_subject(
    episodes: EpisodeRepository,
    memories: MemoryRepository,
    tenant_id: str,
    subject_id: str,
    valid_at: datetime | None = None,
    *,
    as_of: datetime | None = None,
) -> InspectionReport:
    """The report of one subject (the newest 1,000 episodes at most). With ``valid_at``
    it also names the memories that held then (the same rule as a bundle's,
    :func:`~memsync.compile.bundle.stands`), by everything known now or, with
    ``as_of``, by what the store said at that moment.

    With ``as_of`` the report is the store's at that transaction time: the episodes
    filed under the subject then at the revision each had, every memory created by
    then with its status, validity and sources then, the conflicts detected by then as
    they stood, and the versions replaced by then. Supersession records are the
    current derived set's decided by then: a record a later re-decision retracted
    is not kept (its effect on statuses is, in the memories shown). An episode's
    ``compiled_revision`` is today's, capped at the revision shown: which revision a
    compile had consumed by then is not kept. The same store,
    ``as_of`` and ``valid_at`` give the same report, whatever was compiled since."""
    then = utc(as_of) if as_of is not None else None
    page = episodes.timeline(
        tenant_id, subject_id, limit=INSPECT_EPISODES, offset=0, newest_first=True, as_of=then
    )
    by_status: dict[MemoryStatus, list[InspectedMemory]] = {status: [] for status in MemoryStatus}
    every = (
        memories.memories_at(tenant_id, subject_id, then)
        if then is not None
        else memories.memories(tenant_id, subject_id, statuses=tuple(MemoryStatus))
    )
    for memory in every:
        by_status[memory.status].append(InspectedMemory.model_validate(memory))
    # Every memory is read anyway: which held is decided on them, not read again.
    moment = utc(valid_at) if valid_at is not None else None
    held = [memory.id for memory in every if stands(memory, moment)] if moment is not None else None
    return InspectionReport(
        subject_id=subject_id,
        episodes=[InspectedEpisode.model_validate(episode) for episode in page.episodes],
        episodes_truncated=page.has_more,
        memories=by_status,
        supersessions=memories.supersessions(tenant_id, subject_id, as_of=then),
        conflicts=[
            ConflictJson.of(record)
            for record in memories.conflicts(tenant_id, subject_id, status=None, as_of=then)
        ],
        history=memories.earlier_versions(tenant_id, subject_id, as_of=then),
        as_of=then,
        valid_at=moment,
        held=held,
    )
