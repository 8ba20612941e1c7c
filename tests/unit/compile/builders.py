"""Small builders shared by the compile tests: candidates on a day scale, and a resolve
that applies its change set through the reference ``apply_changes``."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from memsync.compile.claims import ClaimRegistry
from memsync.compile.policy import PolicyTable
from memsync.compile.resolve import ChangeSet, apply_changes, resolve
from memsync.compile.similarity import SimilarityThresholds
from memsync.compile.types import CandidateMemory, MemoryKind, MemoryStatus, StoredMemory

SUBJECT = "alice"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = datetime(2026, 6, 1, tzinfo=UTC)
REGISTRY = ClaimRegistry.default()

KIND_OF_CLAIM = {
    "identity.name": MemoryKind.PROFILE_FACT,
    "employment.current_employer": MemoryKind.PROFILE_FACT,
    "location.home_city": MemoryKind.PROFILE_FACT,
    "location.current": MemoryKind.CURRENT_STATE,
    "work.current_project": MemoryKind.CURRENT_STATE,
    "tools.used": MemoryKind.PREFERENCE,
    "preferences.likes": MemoryKind.PREFERENCE,
}


def day(number: float) -> datetime:
    return T0 + timedelta(days=number)


def episode(number: int) -> uuid.UUID:
    return uuid.UUID(int=number)


def claim(
    key: str,
    value: str,
    on: float,
    *,
    source: int | None = None,
    kind: MemoryKind | None = None,
    negated: bool = False,
    explicit: bool = False,
    until: float | None = None,
) -> CandidateMemory:
    return CandidateMemory(
        subject_id=SUBJECT,
        kind=kind or KIND_OF_CLAIM[key],
        content=f"{'not ' if negated else ''}{key} = {value}",
        claim_key=key,
        claim_value=value,
        confidence=0.8,
        valid_from=day(on),
        source_episode_ids=(episode(source if source is not None else int(on * 10) + 1),),
        negated=negated,
        explicit_change=explicit,
        valid_to=None if until is None else day(until),
    )


def statement(
    content: str, on: float, *, kind: MemoryKind = MemoryKind.FACT, source: int | None = None
) -> CandidateMemory:
    return CandidateMemory(
        subject_id=SUBJECT,
        kind=kind,
        content=content,
        claim_key=None,
        claim_value=None,
        confidence=0.7,
        valid_from=day(on),
        source_episode_ids=(episode(source if source is not None else int(on * 10) + 1),),
    )


def run(
    candidates: Sequence[CandidateMemory],
    existing: Sequence[StoredMemory] = (),
    *,
    policies: PolicyTable | None = None,
    thresholds: SimilarityThresholds | None = None,
) -> tuple[ChangeSet, list[StoredMemory]]:
    """Resolve against ``existing`` and return the change set and the store after it."""
    changes = resolve(
        SUBJECT,
        candidates,
        existing,
        policies or PolicyTable(),
        REGISTRY,
        "job-1",
        NOW,
        thresholds,
    )
    return changes, apply_changes(existing, changes)


def active_contents(memories: Sequence[StoredMemory]) -> list[str]:
    return sorted(m.content for m in memories if m.status is MemoryStatus.ACTIVE)


def by_content(memories: Sequence[StoredMemory], content: str) -> StoredMemory:
    (memory,) = [m for m in memories if m.content == content]
    return memory
