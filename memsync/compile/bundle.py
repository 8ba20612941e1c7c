"""Context bundle assembly: the read path's one pure function.

``assemble_bundle`` ranks what an agent should know for a task and cuts it to a token
budget. It never reads the clock: ``as_of`` is the point in time, so the same store
state, task and ``as_of`` always give a byte-identical bundle.

Ranking (higher first, ties broken by memory id)::

    score = 2.0 * relevance + kind_weight + 0.5 * recency

- relevance: share of the task's tokens (``similarity.tokens``) found in the memory;
- kind_weight: ``KIND_WEIGHTS`` (stable facts about the subject first, summaries last);
- recency: ``1 / (1 + age_days / 30)`` where age is ``as_of`` minus the last assertion.

Token estimate: ``ceil(characters / 4)`` of the assembled text, the usual rule of thumb
for English with BPE tokenisers. Lines are added in this order while they fit:
abstentions (open conflicts: "not asserting either"), then ranked memories, then recent
episodes (newest first); a line that does not fit is skipped and smaller ones may follow.

The bundle's JSON (``Bundle.to_dict``) is declared here too, as pydantic models in the
Statewave v1 shapes: :class:`BundleJson` and the :class:`MemoryJson` that the API and
the inspector also show memories as. Models only describe data; nothing here does I/O.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field, model_validator

from memsync.clock import IsoDatetime
from memsync.compile.resolve import OpenConflict
from memsync.compile.similarity import tokens
from memsync.compile.text import passages
from memsync.compile.types import (
    EpisodeView,
    MemoryKind,
    MemoryStatus,
    StoredMemory,
    require_aware,
)

__all__ = [
    "EPISODE_LINE_LENGTH",
    "KIND_WEIGHTS",
    "RANKING",
    "Bundle",
    "BundleEpisodeJson",
    "BundleJson",
    "BundleProvenanceJson",
    "MemoryJson",
    "RankedMemory",
    "RankedMemoryJson",
    "RecordJson",
    "assemble_bundle",
    "estimate_tokens",
]

KIND_WEIGHTS: Mapping[MemoryKind, float] = {
    MemoryKind.PROFILE_FACT: 1.0,
    MemoryKind.CURRENT_STATE: 0.9,
    MemoryKind.PREFERENCE: 0.8,
    MemoryKind.DECISION: 0.8,
    MemoryKind.FACT: 0.7,
    MemoryKind.EPISODE_SUMMARY: 0.3,
}
RELEVANCE_WEIGHT = 2.0
RECENCY_WEIGHT = 0.5
RECENCY_HALF_LIFE_DAYS = 30.0
EPISODE_LINE_LENGTH = 200


def estimate_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: about four characters per token."""
    return math.ceil(len(text) / 4)


@dataclass(frozen=True, slots=True)
class RankedMemory:
    """A memory chosen for the bundle, with the score that placed it."""

    memory: StoredMemory
    score: float


@dataclass(frozen=True, slots=True)
class Bundle:
    """A context bundle. ``to_dict`` gives the Statewave v1 ``ContextBundle`` shape."""

    subject_id: str
    task: str
    as_of: datetime
    facts: tuple[RankedMemory, ...]
    procedures: tuple[RankedMemory, ...]
    episodes: tuple[EpisodeView, ...]
    abstentions: tuple[OpenConflict, ...]
    assembled_context: str
    token_estimate: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``canonical_json`` of it is byte-identical for equal bundles."""
        return BundleJson.of(self).model_dump(mode="json")


# -- the bundle as JSON ----------------------------------------------------------------
#
# The Statewave v1 shapes of a bundle and of what it holds. They are declared here, once,
# because a bundle's JSON is what its byte-identity promise is about; the HTTP API and
# the inspector show memories in the same shape.

RANKING = "relevance*2 + kind_weight + recency*0.5; tokens=ceil(chars/4)"
"""How a bundle ranked its memories and counted tokens, as its provenance says."""


class RecordJson(BaseModel):
    """A JSON model validated from a record (a dataclass instance): the fields it declares
    are the record's fields of the same name, and :meth:`derived` gives those it shows
    under another name or shape. Other input (a dict) validates as usual."""

    @model_validator(mode="before")
    @classmethod
    def _from_record(cls, value: Any) -> Any:
        if not is_dataclass(value) or isinstance(value, type):
            return value
        return {
            **{field.name: getattr(value, field.name) for field in fields(value)},
            **cls.derived(value),
        }

    @classmethod
    def derived(cls, record: Any) -> dict[str, Any]:
        """The values of ``record`` that are not one of its fields as they are."""
        return {}


class MemoryJson(RecordJson):
    """A memory in the Statewave v1 ``Memory`` shape, validated from a
    :class:`StoredMemory`: ``metadata`` gains its memory key and claim key, and
    ``updated_at`` is its last assertion."""

    id: uuid.UUID
    subject_id: str
    kind: MemoryKind
    content: str
    summary: str = ""
    confidence: float
    valid_from: IsoDatetime
    valid_to: IsoDatetime | None
    source_episode_ids: list[uuid.UUID]
    metadata: dict[str, Any]
    status: MemoryStatus
    created_at: IsoDatetime
    updated_at: IsoDatetime

    @classmethod
    def derived(cls, record: StoredMemory) -> dict[str, Any]:
        return {
            "metadata": {
                **record.metadata,
                "memory_key": record.memory_key,
                "claim_key": record.claim_key,
            },
            "updated_at": record.last_asserted,
        }


class BundleEpisodeJson(RecordJson):
    """A recent episode in a bundle (Statewave ``Episode``), validated from an
    :class:`EpisodeView`: the view's fields, then what the bundle derives from them (the
    order is free: a bundle is written as canonical JSON, keys sorted). A bundle knows no
    storage time: ``created_at`` is ``occurred_at``."""

    id: uuid.UUID
    subject_id: str
    source: str
    type: str
    payload: dict[str, Any]
    occurred_at: IsoDatetime
    created_at: IsoDatetime
    metadata: dict[str, Any]
    provenance: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def derived(cls, record: EpisodeView) -> dict[str, Any]:
        return {
            "created_at": record.occurred_at,
            "metadata": {"revision": record.revision, "content_hash": record.content_hash},
        }


class RankedMemoryJson(BaseModel):
    """Why a memory is in the bundle: its score (6 decimals) and its sources."""

    score: float
    source_episode_ids: list[uuid.UUID]


class BundleProvenanceJson(BaseModel):
    """What a bundle was assembled from, and when."""

    as_of: IsoDatetime
    memories: dict[str, RankedMemoryJson]
    episodes: list[uuid.UUID]
    abstained_conflicts: list[uuid.UUID]
    ranking: str = RANKING


class BundleJson(BaseModel):
    """A context bundle in the Statewave v1 ``ContextBundle`` shape; decisions are its
    ``procedures``."""

    subject_id: str
    task: str
    facts: list[MemoryJson]
    episodes: list[BundleEpisodeJson]
    procedures: list[MemoryJson]
    provenance: BundleProvenanceJson
    assembled_context: str
    token_estimate: int

    @classmethod
    def of(cls, bundle: Bundle) -> BundleJson:
        ranked = (*bundle.facts, *bundle.procedures)
        return cls.model_validate(
            {
                "subject_id": bundle.subject_id,
                "task": bundle.task,
                "facts": [ranked.memory for ranked in bundle.facts],
                "episodes": bundle.episodes,
                "procedures": [ranked.memory for ranked in bundle.procedures],
                "provenance": {
                    "as_of": bundle.as_of,
                    "memories": {
                        str(item.memory.id): {
                            "score": round(item.score, 6),
                            "source_episode_ids": item.memory.source_episode_ids,
                        }
                        for item in ranked
                    },
                    "episodes": [episode.id for episode in bundle.episodes],
                    "abstained_conflicts": [conflict.id for conflict in bundle.abstentions],
                },
                "assembled_context": bundle.assembled_context,
                "token_estimate": bundle.token_estimate,
            }
        )


def _holds_at(memory: StoredMemory, as_of: datetime) -> bool:
    return (
        memory.status is MemoryStatus.ACTIVE
        and memory.valid_from <= as_of
        and (memory.valid_to is None or memory.valid_to > as_of)
    )


def _score(memory: StoredMemory, task_tokens: frozenset[str], as_of: datetime) -> float:
    relevance = len(task_tokens & tokens(memory.content)) / len(task_tokens) if task_tokens else 0.0
    age_days = max((as_of - memory.last_asserted).total_seconds(), 0.0) / 86400
    recency = 1.0 / (1.0 + age_days / RECENCY_HALF_LIFE_DAYS)
    return RELEVANCE_WEIGHT * relevance + KIND_WEIGHTS[memory.kind] + RECENCY_WEIGHT * recency


def _memory_line(memory: StoredMemory) -> str:
    if memory.negated or memory.claim_key is None:
        return f"- [{memory.kind.value}] {memory.content}"
    return f"- [{memory.kind.value}] {memory.content} (since {memory.valid_from.date()})"


def _abstention_line(conflict: OpenConflict) -> str:
    topic = conflict.claim_key or f"{conflict.kind.value} (similar statements)"
    first, second = conflict.contents
    return (
        f"- Conflicting information about {topic}: {first!r} vs {second!r} — not asserting either."
    )


def _episode_line(episode: EpisodeView) -> str:
    texts = [" ".join(passage.text.split()) for passage in passages(episode.payload)]
    text = " ".join(texts) or "(no text)"
    if len(text) > EPISODE_LINE_LENGTH:
        text = text[: EPISODE_LINE_LENGTH - 1] + "…"
    return f"- {episode.occurred_at.isoformat()} {episode.source} {episode.type}: {text}"


def assemble_bundle(
    subject_id: str,
    task: str,
    memories: Sequence[StoredMemory],
    open_conflicts: Sequence[OpenConflict],
    episodes: Sequence[EpisodeView],
    max_tokens: int,
    as_of: datetime,
) -> Bundle:
    """Rank, cut and render a context bundle; see the module docstring.

    Only memories active and valid at ``as_of`` are considered, whatever is passed in.
    Memories named by an open conflict are withheld and the conflict is stated as an
    abstention instead; so are the summaries and episode lines of the episodes those
    memories came from. Repeats: identical arguments (in any order) give an equal bundle
    and byte-identical ``canonical_json(bundle.to_dict())``.
    """
    require_aware(as_of, "as_of")
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    conflicts = sorted(
        (c for c in open_conflicts if c.subject_id == subject_id), key=lambda c: str(c.id)
    )
    contested = {memory_id for conflict in conflicts for memory_id in conflict.memory_ids}
    # The episodes behind a contested memory would restate it (as a summary or as a
    # raw episode line), which is exactly what abstaining must not do.
    contested_episodes = {
        episode_id
        for memory in memories
        if memory.id in contested
        for episode_id in memory.source_episode_ids
    }
    task_tokens = tokens(task)
    ranked = sorted(
        (
            RankedMemory(memory, _score(memory, task_tokens, as_of))
            for memory in memories
            if memory.subject_id == subject_id
            and _holds_at(memory, as_of)
            and memory.id not in contested
            and not (
                memory.kind is MemoryKind.EPISODE_SUMMARY
                and contested_episodes.intersection(memory.source_episode_ids)
            )
        ),
        key=lambda item: (-item.score, str(item.memory.id)),
    )
    recent = sorted(
        (
            e
            for e in episodes
            if e.subject_id == subject_id
            and e.occurred_at <= as_of
            and e.id not in contested_episodes
        ),
        key=lambda e: (-e.occurred_at.timestamp(), str(e.id)),
    )

    lines = [f"Subject: {subject_id}", f"Task: {task}", "Known about the subject:"]
    budget = _Budget(max_tokens, "\n".join(lines))
    kept_conflicts = [c for c in conflicts if budget.take(lines, _abstention_line(c))]
    kept_memories = [r for r in ranked if budget.take(lines, _memory_line(r.memory))]
    if recent:
        budget.take(lines, "Recent episodes:")
    kept_episodes = [e for e in recent if budget.take(lines, _episode_line(e))]

    context = "\n".join(lines)
    return Bundle(
        subject_id=subject_id,
        task=task,
        as_of=as_of,
        facts=tuple(r for r in kept_memories if r.memory.kind is not MemoryKind.DECISION),
        procedures=tuple(r for r in kept_memories if r.memory.kind is MemoryKind.DECISION),
        episodes=tuple(kept_episodes),
        abstentions=tuple(kept_conflicts),
        assembled_context=context,
        token_estimate=estimate_tokens(context),
    )


class _Budget:
    """Counts the tokens of the text assembled so far; lines join with one newline."""

    def __init__(self, max_tokens: int, header: str) -> None:
        self._max_tokens = max_tokens
        self._characters = len(header)

    def take(self, lines: list[str], line: str) -> bool:
        needed = self._characters + 1 + len(line)
        if math.ceil(needed / 4) > self._max_tokens:
            return False
        lines.append(line)
        self._characters = needed
        return True
