"""The read policy at the HTTP edge: the caller's visibility of a subject, or 401.

Every read route asks :func:`visibility` before it reads; what it gets back is applied
by the readers (bundles, receipts, handoff) or here (search and timeline rows)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from memsync.compile.bundle import MemoryJson
from memsync.compile.sensitivity import REDACTION_MARKER, CallerIdentity
from memsync.runtime.app.api.errors import ApiError
from memsync.runtime.app.services import Services
from memsync.runtime.reading.labels import CallerRequired, Visibility
from memsync.runtime.reading.receipts import SelectedEntry

__all__ = ["NamesCaller", "body_visibility", "shown_entries", "shown_memories", "visibility"]


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
