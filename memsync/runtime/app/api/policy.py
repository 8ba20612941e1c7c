"""The read policy at the HTTP edge: the caller's visibility of a subject, or 401.

Every read route asks :func:`visibility` before it reads; what it gets back is applied
by the readers (bundles, receipts, handoff) or here (search and timeline rows)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from memsync.compile.bundle import MemoryJson
from memsync.compile.sensitivity import REDACTION_MARKER, CallerIdentity
from memsync.runtime.app.api.errors import ApiError
from memsync.runtime.app.services import Services
from memsync.runtime.reading import InspectionReport
from memsync.runtime.reading.labels import CallerRequired, Visibility
from memsync.runtime.reading.receipts import SelectedEntry

__all__ = [
    "NamesCaller",
    "body_visibility",
    "seen_conflicts",
    "seen_report",
    "shown_entries",
    "shown_memories",
    "visibility",
]


class NamesCaller(Protocol):
    """A request body that may name its caller (context, handoff), about a subject."""

    subject_id: str
    caller_id: str | None
    caller_type: str | None


def visibility(
    services: Services, tenant_id: str, subject_id: str, reader: CallerIdentity, path: str
) -> Visibility:
    """What ``reader`` may see of the subject; 401 when the policy requires a caller
    and the request names none."""
    try:
        return services.read_gate.visibility(tenant_id, subject_id, reader, path=path)
    except CallerRequired as error:
        raise ApiError(401, "unauthorized", str(error)) from None


def body_visibility(
    services: Services, tenant_id: str, body: NamesCaller, reader: CallerIdentity, path: str
) -> Visibility:
    """:func:`visibility` of the body's subject for its caller, the body's fields over
    the headers'."""
    caller = reader.overridden_by(body.caller_id, body.caller_type)
    return visibility(services, tenant_id, body.subject_id, caller, path)


def shown_memories(memories: Iterable[MemoryJson], seen: Visibility) -> list[MemoryJson]:
    """The memories the caller may see, a redacted one with the marker as its text."""
    return [
        memory.model_copy(update={"content": REDACTION_MARKER, "summary": ""})
        if memory.id in seen.redacted_memories
        else memory
        for memory in memories
        if seen.shows_memory(memory.id)
    ]


def shown_entries(entries: Iterable[SelectedEntry], seen: Visibility) -> list[SelectedEntry]:
    """Receipt entries (memories and episodes selected) the caller may see."""
    return [
        entry
        for entry in entries
        if (
            seen.shows_episode(entry.id)
            if entry.section == "episodes"
            else seen.shows_memory(entry.id)
        )
    ]


def seen_report(report: InspectionReport, seen: Visibility) -> InspectionReport:
    """The inspector report as the read policy lets the reader see it: denied memories
    and the episodes behind them absent, redacted ones with the marker."""
    if not seen.restricts:
        return report
    withheld = seen.denied_memories | seen.redacted_memories
    return report.model_copy(
        update={
            "memories": {
                status: [
                    memory.model_copy(update={"content": REDACTION_MARKER, "claim_value": None})
                    if memory.id in seen.redacted_memories
                    else memory
                    for memory in memories
                    if seen.shows_memory(memory.id)
                ]
                for status, memories in report.memories.items()
            },
            "episodes": [e for e in report.episodes if seen.shows_episode(e.id)],
            "conflicts": [c for c in report.conflicts if withheld.isdisjoint(c.memory_ids)],
        }
    )


class StatesMemories(Protocol):
    """A conflict, as any view has it: its subject and the two memories it states."""

    @property
    def subject_id(self) -> str: ...
    @property
    def memory_ids(self) -> tuple[uuid.UUID, uuid.UUID]: ...


ConflictT = TypeVar("ConflictT", bound=StatesMemories)


def seen_conflicts(
    services: Services, tenant_id: str, conflicts: Sequence[ConflictT], reader: CallerIdentity
) -> list[ConflictT]:
    """The conflicts naming no memory the reader may not see (a conflict states both
    texts), each subject's visibility asked once."""
    withheld: dict[str, frozenset[uuid.UUID]] = {}
    for subject_id in sorted({conflict.subject_id for conflict in conflicts}):
        seen = visibility(services, tenant_id, subject_id, reader, "conflicts")
        withheld[subject_id] = seen.denied_memories | seen.redacted_memories
    return [c for c in conflicts if withheld[c.subject_id].isdisjoint(c.memory_ids)]
