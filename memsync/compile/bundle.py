"""Context bundle assembly: the read path's pure part.

A bundle tells an agent what is currently true about a subject, for a task, within a
token budget. It never reads the clock: ``as_of`` is the point in time, so the same
store state, task, budget and ``as_of`` always give a byte-identical bundle.

What reaches a bundle (docs/compile.md, "Context bundle", says it for readers):

- memories active and valid at ``as_of``, in :mod:`~memsync.compile.ranking` order,
  except the two sides of an open conflict (the bundle abstains on them instead);
- no text of a memory that is not active: an episode that is a source of a superseded
  or tombstoned memory, or of a memory in an open conflict, is *withheld* — neither
  its summary nor its raw text is shown (:func:`withheld_episodes`);
- recent episodes, newest first, except withheld ones and those whose summary the
  bundle already carries (the budget is not spent twice on one event).

With ``valid_at`` the bundle says what held at that valid time instead: the memories
that :func:`stands` names (whatever their status) take the place of the active ones,
and only episodes that occurred by then are shown; ``as_of`` stays the transaction time.

Budget: lines are added while they fit, counted by a :class:`~memsync.compile.
tokenizer.TokenCounter` (cl100k_base when installed): abstentions, then ranked
memories, then recent episodes. A line that does not fit is skipped and smaller ones
may follow; the memories stop after ``MAX_MISFITS`` lines in a row did not fit. The
assembled text is counted again as a whole and is never over ``max_tokens`` (lines are
dropped from the end if joining them cost more than their sum), unless the header
alone is.

Layouts: ``memsync`` (``Subject:``, ``Task:``, ``Known about the subject:``, ``Recent
episodes:``) and ``statewave`` (Markdown sections ``## Task``, ``## About this user``,
``## Procedures``, ``## Recent history``, ``## Recent interactions``).

The bundle's JSON (``Bundle.to_dict``) is declared here too, as pydantic models in the
Statewave v1 shapes: :class:`BundleJson` and the :class:`MemoryJson` that the API and
the inspector also show memories as. Models only describe data; nothing here does I/O.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import BaseModel, Field, model_validator
from pydantic.fields import FieldInfo

from memsync.clock import IsoDatetime
from memsync.compile.ranking import KIND_WEIGHTS, RANKING, RankingEntry, rank_all
from memsync.compile.resolve import OpenConflict
from memsync.compile.similarity import tokens
from memsync.compile.text import passages
from memsync.compile.tokenizer import TokenCounter, default_counter, estimate_tokens
from memsync.compile.types import (
    BundleLayout,
    EpisodeView,
    MemoryKind,
    MemoryStatus,
    StoredMemory,
    require_aware,
)

__all__ = [
    "EPISODE_LINE_LENGTH",
    "KIND_WEIGHTS",
    "MAX_MISFITS",
    "RANKING",
    "Bundle",
    "BundleEpisodeJson",
    "BundleJson",
    "BundleLayout",
    "BundleProvenanceJson",
    "LineBudget",
    "MemoryJson",
    "RankedMemory",
    "RankedMemoryJson",
    "RecordJson",
    "assemble_bundle",
    "assemble_ranked",
    "contested_memories",
    "dump_json",
    "episode_text",
    "estimate_tokens",
    "stands",
    "withheld_episodes",
]

EPISODE_LINE_LENGTH = 200
MAX_MISFITS = 16
"""Memories stop being considered after this many lines in a row did not fit: the
budget is then as good as full, and the ranking need not be read to its end."""


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
    tokenizer: str
    layout: BundleLayout = BundleLayout.MEMSYNC
    valid_at: datetime | None = None
    """The valid time asked for, if any: the memories shown are those that held then."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``canonical_json`` of it is byte-identical for equal bundles.

        What ``BundleJson.of(self).model_dump(mode="json")`` gives (a test holds them
        equal), without validating what is already of its declared types: the values
        :meth:`RecordJson.values_of` takes, through orjson and back. Validating and
        dumping through pydantic was a fifth of a context request's CPU.
        """
        plain: dict[str, Any] = orjson.loads(dump_json(BundleJson.values_of_bundle(self)))
        return plain


# -- the bundle as JSON ----------------------------------------------------------------
#
# The Statewave v1 shapes of a bundle and of what it holds. They are declared here, once,
# because a bundle's JSON is what its byte-identity promise is about; the HTTP API and
# the inspector show memories in the same shape.


@functools.cache
def _field_names(record_type: type[Any]) -> tuple[str, ...]:
    # A compile answers with thousands of memories: dataclasses.fields() per record
    # was a fifth of validating each.
    return tuple(field.name for field in fields(record_type))


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
            **{name: getattr(value, name) for name in _field_names(type(value))},
            **cls.derived(value),
        }

    @classmethod
    def derived(cls, record: Any) -> dict[str, Any]:
        """The values of ``record`` that are not one of its fields as they are."""
        return {}

    @classmethod
    def values_of(cls, record: object) -> dict[str, Any]:
        """The values, by field in declared order, that validating ``record`` (a
        dataclass instance whose values already have the declared types) would give,
        without validating: for answers of thousands of records, encoded with
        :func:`dump_json` to what ``model_dump_json`` writes."""
        if not is_dataclass(record) or isinstance(record, type):
            raise TypeError(f"{cls.__name__} takes the values of a record, not {record!r}")
        derived = cls.derived(record)
        return {
            name: derived[name]
            if name in derived
            else getattr(record, name)
            if own
            else field.get_default(call_default_factory=True)
            for name, own, field in _sources(cls, type(record))
        }


@functools.cache
def _sources(
    model: type[RecordJson], record_type: type[Any]
) -> tuple[tuple[str, bool, FieldInfo], ...]:
    # Each field of the model: its name, whether the record has a field of that name
    # (else the model's default applies), and the field.
    own = {record_field.name for record_field in fields(record_type)}
    return tuple((name, name in own, field) for name, field in model.model_fields.items())


def _as_object(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dump_json(value: Any) -> bytes:
    """``value`` (built by :meth:`RecordJson.values_of`) as the JSON that the models'
    ``model_dump_json`` writes: compact, UTF-8, ids and enums as their values, aware
    times as ``isoformat()`` does (orjson writes them so natively), any mapping as an
    object. About ten times as fast as validating and dumping through pydantic."""
    return orjson.dumps(value, default=_as_object)


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
    """What a bundle was assembled from, and when: Statewave's four id lists, and
    memsync's scores and sources per memory, the conflicts it abstained on, how it
    ranked, which counter counted its tokens and how its text is laid out."""

    fact_ids: list[uuid.UUID]
    summary_ids: list[uuid.UUID]
    procedure_ids: list[uuid.UUID]
    episode_ids: list[uuid.UUID]
    as_of: IsoDatetime
    memories: dict[str, RankedMemoryJson]
    episodes: list[uuid.UUID]
    abstained_conflicts: list[uuid.UUID]
    ranking: str = RANKING
    tokenizer: str
    layout: BundleLayout
    # Only when asked for: a bundle without it keeps its bytes (and its receipts' hashes).
    valid_at: IsoDatetime | None = Field(default=None, exclude_if=lambda value: value is None)


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
        """The bundle validated into this model (its JSON schema's source)."""
        return cls.model_validate(cls._values(bundle, memory_values=_as_is, episode_values=_as_is))

    @classmethod
    def values_of_bundle(cls, bundle: Bundle) -> dict[str, Any]:
        """What :meth:`of` validates, with each memory and episode as the values its
        model would hold (:meth:`RecordJson.values_of`): for :func:`dump_json`, which
        writes them as ``model_dump_json`` would."""
        return cls._values(
            bundle, memory_values=MemoryJson.values_of, episode_values=BundleEpisodeJson.values_of
        )

    @staticmethod
    def _values(
        bundle: Bundle,
        *,
        memory_values: Callable[[StoredMemory], Any],
        episode_values: Callable[[EpisodeView], Any],
    ) -> dict[str, Any]:
        ranked = (*bundle.facts, *bundle.procedures)
        provenance: dict[str, Any] = {
            "fact_ids": [
                item.memory.id
                for item in bundle.facts
                if item.memory.kind is not MemoryKind.EPISODE_SUMMARY
            ],
            "summary_ids": [
                item.memory.id
                for item in bundle.facts
                if item.memory.kind is MemoryKind.EPISODE_SUMMARY
            ],
            "procedure_ids": [item.memory.id for item in bundle.procedures],
            "episode_ids": [episode.id for episode in bundle.episodes],
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
            "ranking": RANKING,
            "tokenizer": bundle.tokenizer,
            "layout": bundle.layout,
        }
        if bundle.valid_at is not None:  # a bundle without it keeps its bytes
            provenance["valid_at"] = bundle.valid_at
        return {
            "subject_id": bundle.subject_id,
            "task": bundle.task,
            "facts": [memory_values(item.memory) for item in bundle.facts],
            "episodes": [episode_values(view) for view in bundle.episodes],
            "procedures": [memory_values(item.memory) for item in bundle.procedures],
            "provenance": provenance,
            "assembled_context": bundle.assembled_context,
            "token_estimate": bundle.token_estimate,
        }


def _as_is(record: Any) -> Any:
    return record


def stands(memory: StoredMemory, valid_at: datetime | None) -> bool:
    """Whether a bundle may show the memory: without ``valid_at``, whether it is active;
    with it, whether it held at that valid time — not tombstoned (its sources are gone)
    and ``valid_from <= valid_at < valid_to`` — whatever its status, since a memory
    superseded later was still true then."""
    if valid_at is None:
        return memory.status is MemoryStatus.ACTIVE
    return (
        memory.status is not MemoryStatus.TOMBSTONED
        and memory.valid_from <= valid_at
        and (memory.valid_to is None or valid_at < memory.valid_to)
    )


def withheld_episodes(
    memories: Iterable[StoredMemory],
    open_conflicts: Iterable[OpenConflict],
    valid_at: datetime | None = None,
) -> frozenset[uuid.UUID]:
    """The episodes whose text must not reach a bundle: every source of a memory that
    does not stand (:func:`stands`: not active, or with ``valid_at`` did not hold then)
    and of a memory an open conflict names.

    ``memories`` carry their status at the bundle's ``as_of``. Such an episode still
    says what lost: showing it, or its summary, would put the loser back in the bundle.
    """
    contested = {memory_id for conflict in open_conflicts for memory_id in conflict.memory_ids}
    return frozenset(
        episode_id
        for memory in memories
        if not stands(memory, valid_at) or memory.id in contested
        for episode_id in memory.source_episode_ids
    )


def assemble_bundle(
    subject_id: str,
    task: str,
    memories: Sequence[StoredMemory],
    open_conflicts: Sequence[OpenConflict],
    episodes: Sequence[EpisodeView],
    max_tokens: int,
    as_of: datetime,
    *,
    counter: TokenCounter | None = None,
    layout: BundleLayout = BundleLayout.MEMSYNC,
    valid_at: datetime | None = None,
) -> Bundle:
    """Rank every memory, then assemble: the reference path; see the module docstring.

    ``memories`` are the subject's memories with their status at ``as_of``: only the
    active ones valid at ``as_of`` are ranked, and the others withhold their source
    episodes. With ``valid_at`` the memories that held at that valid time are ranked
    instead (:func:`stands`), scored as at ``valid_at``, and only episodes that occurred
    by then are shown; ``as_of`` stays the transaction time of the store read. Repeats:
    identical arguments (in any order) give an equal bundle and byte-identical
    ``canonical_json(bundle.to_dict())``.
    """
    own = [memory for memory in memories if memory.subject_id == subject_id]
    by_id = {memory.id: memory for memory in own if stands(memory, valid_at)}
    # Validity and recency are judged at the valid time asked about, else at as_of.
    ranked = rank_all(
        (RankingEntry.of(memory) for memory in by_id.values()), tokens(task), valid_at or as_of
    )
    conflicts = [conflict for conflict in open_conflicts if conflict.subject_id == subject_id]
    return assemble_ranked(
        subject_id,
        task,
        (RankedMemory(by_id[entry.id], scored) for scored, entry in ranked),
        conflicts,
        episodes,
        max_tokens,
        as_of,
        withheld=withheld_episodes(own, conflicts, valid_at),
        counter=counter,
        layout=layout,
        valid_at=valid_at,
    )


def contested_memories(subject_id: str, open_conflicts: Iterable[OpenConflict]) -> set[uuid.UUID]:
    """The subject's memories in its open conflicts: a bundle states each such conflict
    instead of asserting either side, so it never shows them (:func:`assemble_ranked`
    passes over them, and a reader need not read their rows)."""
    return {
        memory_id
        for conflict in open_conflicts
        if conflict.subject_id == subject_id
        for memory_id in conflict.memory_ids
    }


def assemble_ranked(
    subject_id: str,
    task: str,
    ranked: Iterable[RankedMemory],
    open_conflicts: Sequence[OpenConflict],
    episodes: Sequence[EpisodeView],
    max_tokens: int,
    as_of: datetime,
    *,
    withheld: frozenset[uuid.UUID],
    counter: TokenCounter | None = None,
    layout: BundleLayout = BundleLayout.MEMSYNC,
    valid_at: datetime | None = None,
) -> Bundle:
    """Cut ``ranked`` (best first, as :mod:`~memsync.compile.ranking` orders them) and
    the recent ``episodes`` to the budget and render them.

    ``ranked`` is read lazily and only as far as the budget needs. ``withheld`` are the
    episodes :func:`withheld_episodes` names. Memories of open conflicts are skipped
    (the conflict is stated instead), as are summaries of withheld episodes, and those
    that do not stand at ``valid_at`` (:func:`stands`); episodes must have occurred by
    ``as_of`` and by ``valid_at``.
    """
    require_aware(as_of, "as_of")
    if valid_at is not None:
        require_aware(valid_at, "valid_at")
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    counter = counter or default_counter()
    conflicts = sorted(
        (c for c in open_conflicts if c.subject_id == subject_id), key=lambda c: str(c.id)
    )
    contested = contested_memories(subject_id, conflicts)
    text = _LAYOUTS[layout]
    budget = LineBudget(counter, max_tokens, text.header(subject_id, task), text.opening)

    kept_conflicts = [c for c in conflicts if budget.take(_ABOUT, _abstention_line(c))]
    kept: list[RankedMemory] = []
    misfits = 0
    for item in ranked:
        memory = item.memory
        if (
            memory.subject_id != subject_id
            or not stands(memory, valid_at)
            or memory.id in contested
            or (
                memory.kind is MemoryKind.EPISODE_SUMMARY
                and withheld.intersection(memory.source_episode_ids)
            )
        ):
            continue
        if budget.take(_section(memory.kind), text.memory_line(memory)):
            kept.append(item)
            misfits = 0
            continue
        misfits += 1
        if misfits >= MAX_MISFITS or budget.remaining <= 0:
            break

    covered = {
        episode_id
        for item in kept
        if item.memory.kind is MemoryKind.EPISODE_SUMMARY
        for episode_id in item.memory.source_episode_ids
    }
    recent = sorted(
        (
            e
            for e in episodes
            if e.subject_id == subject_id
            and e.occurred_at <= as_of
            and (valid_at is None or e.occurred_at <= valid_at)
            and e.id not in withheld
            and e.id not in covered
        ),
        key=lambda e: (-e.occurred_at.timestamp(), str(e.id)),
    )
    kept_episodes = [e for e in recent if budget.take(_EPISODES, text.episode_line(e))]

    while True:
        context = text.render(subject_id, task, _Kept(kept_conflicts, kept, kept_episodes))
        count = counter.count(context)
        # Lines were costed one by one; BPE may merge across a line break differently,
        # so the whole text is counted, and what does not fit leaves from the end.
        if count <= max_tokens or not (kept_episodes or kept or kept_conflicts):
            break
        (kept_episodes or kept or kept_conflicts).pop()

    memories = [item for item in kept if item.memory.kind is not MemoryKind.DECISION]
    return Bundle(
        subject_id=subject_id,
        task=task,
        as_of=as_of,
        facts=tuple(memories),
        procedures=tuple(r for r in kept if r.memory.kind is MemoryKind.DECISION),
        episodes=tuple(kept_episodes),
        abstentions=tuple(kept_conflicts),
        assembled_context=context,
        token_estimate=count,
        tokenizer=counter.name,
        layout=layout,
        valid_at=valid_at,
    )


# -- sections, lines and layouts -------------------------------------------------------

_ABOUT, _PROCEDURES, _HISTORY, _EPISODES = "about", "procedures", "history", "episodes"


def _section(kind: MemoryKind) -> str:
    if kind is MemoryKind.DECISION:
        return _PROCEDURES
    if kind is MemoryKind.EPISODE_SUMMARY:
        return _HISTORY
    return _ABOUT


def _since(memory: StoredMemory) -> str:
    if memory.negated or memory.claim_key is None:
        return ""
    return f" (since {memory.valid_from.date()})"


def _abstention_line(conflict: OpenConflict) -> str:
    topic = conflict.claim_key or f"{conflict.kind.value} (similar statements)"
    first, second = conflict.contents
    return (
        f"- Conflicting information about {topic}: {first!r} vs {second!r} — not asserting either."
    )


def episode_text(episode: EpisodeView) -> str:
    texts = [" ".join(passage.text.split()) for passage in passages(episode.payload)]
    text = " ".join(texts) or "(no text)"
    if len(text) > EPISODE_LINE_LENGTH:
        text = text[: EPISODE_LINE_LENGTH - 1] + "…"
    return text


@dataclass(frozen=True, slots=True)
class _Kept:
    """What made it into a bundle, in the order it was taken."""

    conflicts: Sequence[OpenConflict]
    memories: Sequence[RankedMemory]
    episodes: Sequence[EpisodeView]


@dataclass(frozen=True, slots=True)
class _Layout:
    """How one layout writes the header, each line and the sections' headings.

    ``opening`` is the text a section adds when its first line goes in (its heading).
    """

    header: Callable[[str, str], str]
    memory_line: Callable[[StoredMemory], str]
    episode_line: Callable[[EpisodeView], str]
    opening: dict[str, str]
    render: Callable[[str, str, _Kept], str]


def _memsync_render(subject_id: str, task: str, kept: _Kept) -> str:
    lines = [_memsync_header(subject_id, task)]
    lines.extend(_abstention_line(conflict) for conflict in kept.conflicts)
    lines.extend(_memsync_memory_line(item.memory) for item in kept.memories)
    if kept.episodes:
        lines.append(_MEMSYNC_EPISODES)
        lines.extend(_memsync_episode_line(episode) for episode in kept.episodes)
    return "\n".join(lines)


def _memsync_header(subject_id: str, task: str) -> str:
    return f"Subject: {subject_id}\nTask: {task}\nKnown about the subject:"


def _memsync_memory_line(memory: StoredMemory) -> str:
    return f"- [{memory.kind.value}] {memory.content}{_since(memory)}"


def _memsync_episode_line(episode: EpisodeView) -> str:
    return f"- {episode.occurred_at.isoformat()} {episode.source} {episode.type}: " + (
        episode_text(episode)
    )


_MEMSYNC_EPISODES = "Recent episodes:"

_STATEWAVE_HEADINGS = {
    _ABOUT: "## About this user",
    _PROCEDURES: "## Procedures",
    _HISTORY: "## Recent history",
    _EPISODES: "## Recent interactions",
}


def _statewave_header(subject_id: str, task: str) -> str:
    return f"## Task\n{task}\n"


def _statewave_memory_line(memory: StoredMemory) -> str:
    return f"- {memory.content}{_since(memory)}"


def _statewave_episode_line(episode: EpisodeView) -> str:
    return f"- [{episode.source}/{episode.type}] {episode_text(episode)}"


def _statewave_render(subject_id: str, task: str, kept: _Kept) -> str:
    sections: dict[str, list[str]] = {name: [] for name in _STATEWAVE_HEADINGS}
    sections[_ABOUT].extend(_abstention_line(conflict) for conflict in kept.conflicts)
    for item in kept.memories:
        sections[_section(item.memory.kind)].append(_statewave_memory_line(item.memory))
    sections[_EPISODES].extend(_statewave_episode_line(e) for e in kept.episodes)
    # Statewave's shape: the task block, then each non-empty section and a blank line.
    parts = [_statewave_header(subject_id, task)]
    for name, heading in _STATEWAVE_HEADINGS.items():
        if sections[name]:
            parts.extend([heading, *sections[name], ""])
    return "\n".join(parts)


_LAYOUTS = {
    BundleLayout.MEMSYNC: _Layout(
        header=_memsync_header,
        memory_line=_memsync_memory_line,
        episode_line=_memsync_episode_line,
        opening={_EPISODES: "\n" + _MEMSYNC_EPISODES},
        render=_memsync_render,
    ),
    BundleLayout.STATEWAVE: _Layout(
        header=_statewave_header,
        memory_line=_statewave_memory_line,
        episode_line=_statewave_episode_line,
        opening={name: f"\n{heading}\n" for name, heading in _STATEWAVE_HEADINGS.items()},
        render=_statewave_render,
    ),
}


class LineBudget:
    """Tokens spent so far: the header, then each line taken (with its line break) and
    the heading of each section when its first line goes in. Shared by every
    token-bounded text (bundles, handoffs): one way of spending a budget."""

    def __init__(
        self, counter: TokenCounter, max_tokens: int, header: str, opening: dict[str, str]
    ) -> None:
        self._counter = counter
        self._max_tokens = max_tokens
        self._opening = opening
        self._opened: set[str] = set()
        self._used = counter.count(header)

    @property
    def remaining(self) -> int:
        return self._max_tokens - self._used

    def take(self, section: str, line: str) -> bool:
        """Spend the line's tokens if they fit; say whether they did."""
        cost = self._counter.count("\n" + line)
        if section not in self._opened and section in self._opening:
            cost += self._counter.count(self._opening[section])
        if cost > self.remaining:
            return False
        self._used += cost
        self._opened.add(section)
        return True
