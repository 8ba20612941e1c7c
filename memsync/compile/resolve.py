"""The resolver: candidates against the store, as a pure function returning a change set.

``resolve`` never writes. The compile service calls it inside one transaction and applies
the ``ChangeSet``; applying it and resolving the same candidates again yields an empty
change set, which is how "the second compile creates nothing" is kept.

What the caller passes as ``existing``: every *active* memory of the subject, plus every
stored memory (any status) whose ``memory_key`` equals a candidate's. The second group
lets a re-derived statement add provenance to the row it already has (the unique index
on ``memory_key`` allows one row per statement) and lets a superseded statement that is
asserted again be reinstated.

Each candidate, in order of ``(valid_from, memory_key)``:

1. Same ``memory_key`` as a stored memory → merge (new episodes, earliest ``valid_from``,
   latest ``asserted_at``). A superseded memory that gains newer evidence is contested
   again and reinstated if it now wins; a manually superseded one is not. A memory
   retired because its evidence went away (rules ``source_revised``, ``source_moved``,
   ``source_deleted``: see :func:`withdraw_unsupported`) is not merged with: it comes
   back on any evidence, even from an episode it already cites (that episode came
   back), dated and sourced by that evidence alone, as a new memory would be (its
   identity, wording and history stay), and is contested as in 3.
2. Same single-valued claim and value as an active memory of another kind → merge into
   it and record ``claim_duplicate``.
3. Otherwise a new memory, contested against the active ones:

   - a negation ("no longer works at Acme") and a positive claim with the same key and
     value: the later assertion wins (the negation on a tie), rule
     ``claim_contradiction``;
   - a single-valued key with a different value and overlapping validity: the kind's
     policy decides, rule ``claim_contradiction`` (``policy_keep_existing`` when the
     newcomer loses under ``keep_existing``);
   - no claim key: the best lexical match of the same kind at or above the kind's
     threshold is the competitor, rule ``lexical``; the policy decides as above;
   - multi-valued keys, non-overlapping validity and ``episode_summary``: coexist.

A loser's ``valid_to`` becomes the winner's start, or its own start when it never held.

What ``resolve`` decided is decided again when a winner no longer stands as it did:
:func:`withdraw_unsupported` retires or narrows memories whose sources went away,
:func:`unsettled` names them, and :func:`reconsider_losers` replays the contests around
them from the evidence left (rule ``winner_retired`` for a loser that comes back).
"""

from __future__ import annotations

import bisect
import enum
import hashlib
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memsync.compile.claims import ClaimRegistry
from memsync.compile.policy import ConflictPolicy, PolicyTable
from memsync.compile.similarity import LexicalIndex, SimilarityThresholds, tokens
from memsync.compile.types import (
    CONTESTED,
    WITHDRAWN,
    CandidateMemory,
    MemoryKind,
    MemoryStatus,
    StoredMemory,
    SupersessionRule,
    evolve,
    id_number,
    require_aware,
)

__all__ = [
    "REDECIDED",
    "ChangeSet",
    "ConflictFinding",
    "Defeat",
    "OpenConflict",
    "ProvenanceAddition",
    "Reassertion",
    "RecordedDecision",
    "SourceEvidence",
    "SourceStanding",
    "StatusChange",
    "Supersession",
    "apply_changes",
    "conflict_id",
    "decision_of",
    "in_processing_order",
    "manual_resolution",
    "memory_id",
    "processing_order",
    "reconsider_losers",
    "rederive",
    "resolve",
    "unsettled",
    "withdraw_unsupported",
]

# Fixed namespace so memory and conflict ids are the same on every node and every run.
_ID_NAMESPACE = uuid.UUID("6f1d3c52-8a8e-4b8e-9a55-2f6d0b7c1e10")


_MEMORY_ID_PREFIX = _ID_NAMESPACE.bytes + b"memory:"
_VERSION_5_MASK = ~(0xF000 << 64) & ~(0xC000 << 48)
_VERSION_5_BITS = (5 << 76) | (0x8000 << 48)


def memory_id(key: str) -> uuid.UUID:
    """The id a new memory gets: derived from its ``memory_key`` (unique per subject).

    ``uuid.uuid5(_ID_NAMESPACE, f"memory:{key}")``, computed as ``uuid5`` does (SHA-1
    of the namespace and the name, version and variant bits set) without rebuilding the
    namespace's bytes and checking arguments on every call: a compile derives one per
    new memory."""
    digest = hashlib.sha1(_MEMORY_ID_PREFIX + key.encode()).digest()
    return uuid.UUID(int=int.from_bytes(digest[:16]) & _VERSION_5_MASK | _VERSION_5_BITS)


def conflict_id(first_key: str, second_key: str) -> uuid.UUID:
    """The id of the open conflict between two memories, whatever their order."""
    low, high = sorted((first_key, second_key))
    return uuid.uuid5(_ID_NAMESPACE, f"conflict:{low}:{high}")


@dataclass(frozen=True, slots=True)
class ProvenanceAddition:
    """New evidence for a stored memory: append ``episode_ids`` and set its times.

    The times widen with new evidence; with no ``episode_ids`` they narrow to the
    evidence left after some went away (see :func:`withdraw_unsupported`).
    """

    memory_id: uuid.UUID
    memory_key: str
    episode_ids: tuple[uuid.UUID, ...]
    valid_from: datetime
    asserted_at: datetime
    explicit_change: bool


@dataclass(frozen=True, slots=True)
class Reassertion:
    """Episodes that asserted a stored memory again (they already were among its
    sources): the store notes the revision that did, which is what keeps the memory
    supported when another of its sources goes away. Changes nothing about the memory."""

    memory_id: uuid.UUID
    memory_key: str
    episode_ids: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class StatusChange:
    """Set a stored memory's status, ``valid_to`` and ``status_rule`` to these values.

    ``rule`` is ``None`` when a superseded memory is reinstated by newer evidence.
    """

    memory_id: uuid.UUID
    memory_key: str
    from_status: MemoryStatus
    to_status: MemoryStatus
    valid_to: datetime | None
    rule: SupersessionRule | None


@dataclass(frozen=True, slots=True)
class Supersession:
    """The audit record of one decision: who won, who lost, by which rule and score.

    ``loser_memory_id`` is ``None`` for ``claim_duplicate`` (the loser was a candidate
    merged into the winner, never stored); ``winner_*`` are ``None`` for
    ``source_revised``, ``source_moved`` and ``source_deleted`` (nothing replaced the
    memory; its evidence went away, and ``loser_episode_ids`` are the episodes that did).
    For ``winner_retired`` the loser is the memory that is active again and the winner
    the one it had lost to, which no longer stands (see :func:`reconsider_losers`); as
    for every rule, the loser is the memory whose status the record changes.
    """

    subject_id: str
    rule: SupersessionRule
    claim_key: str | None
    score: float | None
    threshold: float | None
    winner_memory_key: str | None
    winner_memory_id: uuid.UUID | None
    loser_memory_key: str
    loser_memory_id: uuid.UUID | None
    winner_episode_ids: tuple[uuid.UUID, ...]
    loser_episode_ids: tuple[uuid.UUID, ...]
    job_id: str | None
    decided_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ConflictFinding:
    """What two memories of a subject contradict each other about, and the rule, score
    and threshold that found it: what every view of a conflict starts with."""

    id: uuid.UUID
    subject_id: str
    kind: MemoryKind
    claim_key: str | None
    rule: SupersessionRule
    score: float | None
    threshold: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenConflict(ConflictFinding):
    """Two active memories that contradict each other under the ``flag`` policy.

    ``id`` is derived from the two memory keys, so recording the same conflict twice
    hits the store's unique index instead of duplicating it.
    """

    memory_ids: tuple[uuid.UUID, uuid.UUID]
    memory_keys: tuple[str, str]
    contents: tuple[str, str]
    job_id: str | None
    detected_at: datetime


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """Everything one resolution decided, to be applied atomically by the store.

    ``reassertions`` note which revision of an episode asserted a memory again; they are
    bookkeeping, not a change of any memory, so :attr:`is_empty` ignores them.
    """

    memories_to_create: tuple[StoredMemory, ...] = ()
    provenance_to_add: tuple[ProvenanceAddition, ...] = ()
    status_changes: tuple[StatusChange, ...] = ()
    supersessions: tuple[Supersession, ...] = ()
    open_conflicts: tuple[OpenConflict, ...] = ()
    resolved_conflict_ids: tuple[uuid.UUID, ...] = ()
    reassertions: tuple[Reassertion, ...] = ()
    retracted_records: tuple[uuid.UUID, ...] = ()
    """Stored supersession records (by id) that a re-decision found no longer true of
    the subject's evidence (see :func:`rederive`); the store removes them."""

    @property
    def memories_created(self) -> int:
        return len(self.memories_to_create)

    @property
    def is_empty(self) -> bool:
        return not (
            self.memories_to_create
            or self.provenance_to_add
            or self.status_changes
            or self.supersessions
            or self.open_conflicts
            or self.resolved_conflict_ids
            or self.retracted_records
        )


@dataclass(frozen=True, slots=True)
class Defeat:
    """A stored contest record (rule in ``CONTESTED``) by which one memory lost to
    another: how :func:`reconsider_losers` knows whom a returning memory had lost to,
    and whether it now loses to someone else."""

    loser_memory_id: uuid.UUID
    winner_memory_id: uuid.UUID
    winner_memory_key: str
    rule: SupersessionRule
    score: float | None
    threshold: float | None
    decided_at: datetime


@dataclass(frozen=True, slots=True)
class _Loss:
    """How a memory lost a contest: to whom, by which rule and score."""

    winner: StoredMemory
    rule: SupersessionRule
    score: float | None
    threshold: float | None


@dataclass(slots=True)
class _Decision:
    """Outcome of contesting one memory against the active ones."""

    loss: _Loss | None = None
    beaten: list[tuple[StoredMemory, SupersessionRule, float | None, float | None]] = field(
        default_factory=list
    )
    flagged: list[tuple[StoredMemory, SupersessionRule, float | None, float | None]] = field(
        default_factory=list
    )


def _overlaps(left: StoredMemory, right: StoredMemory) -> bool:
    """Validity intervals ``[valid_from, valid_to)`` intersect; open ends are infinite.

    A claim that ended at or before the other began is history, not a contradiction.
    """
    left_ends_after = left.valid_to is None or left.valid_to > right.valid_from
    right_ends_after = right.valid_to is None or right.valid_to > left.valid_from
    return left_ends_after and right_ends_after


def _holds(newcomer: StoredMemory, at: datetime, rival: StoredMemory) -> bool:
    """Under ``keep_existing``, whether ``newcomer`` (asserted last at ``at``) outranks
    ``rival``: the memory a compile of both in time order would keep, whichever of them
    arrived first.

    An explicit change outranks a plain statement (the plain one, if later, is kept out;
    if earlier, replaced). Between two explicit changes the latest assertion wins, as
    under recency. Between two plain statements the first asserted holds: that is what
    "keep the existing one" means once an older statement can arrive after a newer one
    (a backfill, a late connector). Ties go by ``memory_key``, as processing order has
    them. A memory only rises in this order as evidence arrives, so the one active in a
    slot is the highest of all its memories, in any order of arrival.
    """
    if newcomer.explicit_change != rival.explicit_change:
        return newcomer.explicit_change
    if newcomer.explicit_change:
        return (at, newcomer.memory_key) > (rival.last_asserted, rival.memory_key)
    return (newcomer.valid_from, newcomer.memory_key) < (rival.valid_from, rival.memory_key)


def _beaten_rule(
    policy: ConflictPolicy, winner: StoredMemory, loser: StoredMemory, rule: SupersessionRule
) -> SupersessionRule:
    """The rule of ``loser``'s record: ``policy_keep_existing`` when it is a plain
    statement that came after the winner (in time order it was the newcomer kept out),
    else the contest's own rule."""
    later = (loser.valid_from, loser.memory_key) > (winner.valid_from, winner.memory_key)
    if policy is ConflictPolicy.KEEP_EXISTING and later and not loser.explicit_change:
        return SupersessionRule.POLICY_KEEP_EXISTING
    return rule


def _ended(loser: StoredMemory, winner_start: datetime) -> datetime:
    """The loser held until the winner started, or never held if it started later."""
    end = max(loser.valid_from, winner_start)
    return end if loser.valid_to is None else min(end, max(loser.valid_to, loser.valid_from))


def _from_candidate(candidate: CandidateMemory, now: datetime) -> StoredMemory:
    return StoredMemory(
        id=memory_id(candidate.memory_key),
        subject_id=candidate.subject_id,
        memory_key=candidate.memory_key,
        kind=candidate.kind,
        content=candidate.content,
        claim_key=candidate.claim_key,
        claim_value=candidate.claim_value,
        valid_from=candidate.valid_from,
        valid_to=candidate.valid_to,
        status=MemoryStatus.ACTIVE,
        source_episode_ids=tuple(sorted(set(candidate.source_episode_ids))),
        created_at=now,
        confidence=candidate.confidence,
        asserted_at=candidate.valid_from,
        negated=candidate.negated,
        explicit_change=candidate.explicit_change,
        metadata=dict(candidate.metadata),
    )


def _united(episode_ids: Sequence[uuid.UUID], more: Iterable[uuid.UUID]) -> tuple[uuid.UUID, ...]:
    """``episode_ids`` (a memory's provenance: sorted, unique) with ``more`` added, still
    sorted and unique.

    A statement repeated by many episodes gains an id or two at a time: each is looked
    up and inserted in place (log n comparisons of integers) instead of hashing or
    re-sorting the whole provenance in Python, which made every addition cost as much
    as the memory's whole evidence."""
    merged = list(episode_ids)
    for episode in more:
        at = bisect.bisect_left(merged, episode.int, key=id_number)
        if at == len(merged) or merged[at] != episode:
            merged.insert(at, episode)
    return tuple(merged)


def _cites(episode_ids: Sequence[uuid.UUID], episode: uuid.UUID) -> bool:
    """Whether the provenance ``episode_ids`` (sorted, unique) holds ``episode``."""
    at = bisect.bisect_left(episode_ids, episode.int, key=id_number)
    return at < len(episode_ids) and episode_ids[at] == episode


def _merge(memory: StoredMemory, candidate: CandidateMemory) -> StoredMemory:
    return evolve(
        memory,
        source_episode_ids=_united(memory.source_episode_ids, candidate.source_episode_ids),
        valid_from=min(memory.valid_from, candidate.valid_from),
        asserted_at=max(memory.last_asserted, candidate.valid_from),
        explicit_change=memory.explicit_change or candidate.explicit_change,
    )


class _Resolution:
    """Mutable working state of one ``resolve`` call; never escapes it."""

    def __init__(
        self,
        subject_id: str,
        existing: Iterable[StoredMemory],
        policies: PolicyTable,
        registry: ClaimRegistry,
        thresholds: SimilarityThresholds,
        job_id: str | None,
        now: datetime,
    ) -> None:
        self.subject_id = subject_id
        self.policies = policies
        self.registry = registry
        self.thresholds = thresholds
        self.job_id = job_id
        self.now = now
        self.original: dict[str, StoredMemory] = {}
        self.memories: dict[str, StoredMemory] = {}
        self.active_claims: dict[str, set[str]] = defaultdict(set)
        self.lexical = LexicalIndex()
        self.supersessions: list[Supersession] = []
        self.conflicts: dict[uuid.UUID, OpenConflict] = {}
        # memory_key -> every candidate episode that asserted it in this resolution.
        self.asserted: dict[str, set[uuid.UUID]] = defaultdict(set)
        # memory_key -> a stored memory taken out to be decided again: its evidence
        # arrives as new, but it keeps its identity.
        self.taken_out: dict[str, StoredMemory] = {}
        for memory in sorted(existing, key=lambda stored: stored.memory_key):
            if memory.subject_id != subject_id:
                raise ValueError(
                    f"memory {memory.id} belongs to subject {memory.subject_id!r}, "
                    f"not {subject_id!r}"
                )
            self.original[memory.memory_key] = memory
            self._put(memory)

    # -- indexes over active memories -------------------------------------------------

    def _put(self, memory: StoredMemory) -> None:
        previous = self.memories.get(memory.memory_key)
        if previous is not None and previous.status is MemoryStatus.ACTIVE:
            self._unindex(previous)
        self.memories[memory.memory_key] = memory
        if memory.status is MemoryStatus.ACTIVE:
            if memory.claim_key is not None:
                self.active_claims[memory.claim_key].add(memory.memory_key)
            elif memory.kind is not MemoryKind.EPISODE_SUMMARY and not memory.negated:
                self.lexical.add(memory.memory_key, memory.kind, tokens(memory.content))

    def _unindex(self, memory: StoredMemory) -> None:
        if memory.claim_key is not None:
            self.active_claims[memory.claim_key].discard(memory.memory_key)
        else:
            self.lexical.remove(memory.memory_key)

    def _active_in_slot(self, claim_key: str) -> list[StoredMemory]:
        return [self.memories[key] for key in sorted(self.active_claims[claim_key])]

    # -- the algorithm ------------------------------------------------------------------

    def add(self, candidate: CandidateMemory) -> None:
        stored = self.memories.get(candidate.memory_key)
        if stored is not None:
            self.asserted[stored.memory_key].update(candidate.source_episode_ids)
            self._reassert(stored, candidate)
            return
        duplicate = self._same_claim_other_kind(candidate)
        if duplicate is not None:
            self.asserted[duplicate.memory_key].update(candidate.source_episode_ids)
            merged = _merge(duplicate, candidate)
            if merged != duplicate:
                self._put(merged)
                self._record(SupersessionRule.CLAIM_DUPLICATE, merged, candidate, None, None)
            return
        self._arrive(candidate, self.taken_out.get(candidate.memory_key))

    def _arrive(self, candidate: CandidateMemory, earlier: StoredMemory | None) -> None:
        """``candidate`` as a new memory, contested against the active ones. ``earlier``,
        when given, is the stored memory of its statement whose evidence is not taken
        into account (taken out to be decided again, or withdrawn): the newcomer keeps
        its identity, wording and history, but is dated and sourced by ``candidate``
        alone, as a memory first derived from it would be."""
        newcomer = _from_candidate(candidate, self.now)
        if earlier is not None:
            newcomer = evolve(
                earlier,
                status=MemoryStatus.ACTIVE,
                status_rule=None,
                valid_from=newcomer.valid_from,
                valid_to=None,
                asserted_at=newcomer.asserted_at,
                source_episode_ids=newcomer.source_episode_ids,
                explicit_change=newcomer.explicit_change,
            )
        decision = self._contest(newcomer, candidate.valid_from)
        self._apply(newcomer, decision, candidate.valid_from)

    def _reassert(self, stored: StoredMemory, candidate: CandidateMemory) -> None:
        if stored.status is not MemoryStatus.ACTIVE and stored.status_rule in WITHDRAWN:
            # Retired because its evidence went away: this candidate is evidence again,
            # even from an episode already among its sources (a re-created or moved-back
            # record). What the memory was dated by is gone, so it is not merged with:
            # the memory comes back as a new one would, dated by this evidence alone.
            self._arrive(candidate, stored)
            return
        if stored.status is MemoryStatus.TOMBSTONED:
            return  # removed by a person, not by its sources; evidence does not undo that
        merged = _merge(stored, candidate)
        if merged == stored:
            return  # nothing new: this is what keeps a second compile empty
        self._put(merged)
        if merged.status is MemoryStatus.ACTIVE or stored.status_rule is SupersessionRule.MANUAL:
            return
        # New evidence for a superseded statement: it may win now ("moved back"). It is
        # contested as of its latest assertion, the same rank recency compares; one that
        # loses again stays as it was.
        reopened = evolve(merged, valid_to=None, status=MemoryStatus.ACTIVE, status_rule=None)
        decision = self._contest(reopened, merged.last_asserted)
        if decision.loss is None:
            self._apply(reopened, decision, merged.last_asserted)

    def reconsider(self, contenders: Sequence[StoredMemory], evidence: SourceEvidence) -> None:
        """Decide ``contenders`` again from the evidence they have: each is taken out,
        and each assertion of it by a source that still supports it arrives again, in
        processing order, as :meth:`add` takes a candidate. So a memory asserted early
        and again late meets its rivals at both times, as a compile of the remaining
        records would have it meet them."""
        assertions: list[CandidateMemory] = []
        for memory in contenders:
            again = _assertions(memory, evidence)
            if again:
                assertions.extend(again)
                self._drop(memory)
        for candidate in in_processing_order(assertions):
            self.add(candidate)
        for memory in contenders:
            if memory.memory_key not in self.memories:
                self._put(memory)  # its evidence merged into a claim of another kind

    def _drop(self, memory: StoredMemory) -> None:
        current = self.memories.pop(memory.memory_key)
        if current.status is MemoryStatus.ACTIVE:
            self._unindex(current)
        self.taken_out[memory.memory_key] = current

    def reconsidered(
        self,
        latest: Mapping[uuid.UUID, Defeat],
        known: Mapping[uuid.UUID, StoredMemory],
        open_conflicts: Sequence[OpenConflict],
    ) -> ChangeSet:
        """What :meth:`reconsider` changed: the memories whose status changed, each with
        a record (``winner_retired`` for a returning one no record of this resolution
        explains), the conflicts they are in, and the open conflicts a side of which is
        no longer active. A superseded memory that lost again keeps its status; when it
        lost to another memory than its latest defeat names, the record of that loss is
        kept too, so that the memory is reconsidered when its new winner goes."""
        changed = {
            key
            for key, memory in self.memories.items()
            if memory.status is not self.original[key].status
        }
        last_loss = {record.loser_memory_key: record for record in self.supersessions}

        def news(record: Supersession) -> bool:
            if record.loser_memory_key in changed:
                return True
            defeat = latest.get(record.loser_memory_id) if record.loser_memory_id else None
            return (
                record is last_loss[record.loser_memory_key]
                and defeat is not None
                and record.winner_memory_id != defeat.winner_memory_id
            )

        records = [record for record in self.supersessions if news(record)]
        explained = {(record.winner_memory_id, record.loser_memory_id) for record in records}
        for key in sorted(changed):
            returned = self.memories[key]
            defeat = latest.get(returned.id)
            if returned.status is not MemoryStatus.ACTIVE or defeat is None:
                continue
            if (returned.id, defeat.winner_memory_id) in explained:
                continue
            self._put(evolve(returned, status_rule=SupersessionRule.WINNER_RETIRED))
            winner = known.get(defeat.winner_memory_id)
            records.append(
                Supersession(
                    subject_id=self.subject_id,
                    rule=SupersessionRule.WINNER_RETIRED,
                    claim_key=returned.claim_key,
                    score=defeat.score,
                    threshold=defeat.threshold,
                    winner_memory_key=defeat.winner_memory_key,
                    winner_memory_id=defeat.winner_memory_id,
                    loser_memory_key=key,
                    loser_memory_id=returned.id,
                    winner_episode_ids=winner.source_episode_ids if winner is not None else (),
                    loser_episode_ids=returned.source_episode_ids,
                    job_id=self.job_id,
                    decided_at=self.now,
                )
            )
        decided = self.change_set()
        inactive = {
            key for key, memory in self.memories.items() if memory.status is not MemoryStatus.ACTIVE
        }
        return ChangeSet(
            status_changes=tuple(c for c in decided.status_changes if c.memory_key in changed),
            supersessions=tuple(records),
            open_conflicts=tuple(
                c for c in decided.open_conflicts if changed.intersection(c.memory_keys)
            ),
            resolved_conflict_ids=tuple(
                sorted(c.id for c in open_conflicts if inactive.intersection(c.memory_keys))
            ),
        )

    def _same_claim_other_kind(self, candidate: CandidateMemory) -> StoredMemory | None:
        if candidate.claim_key is None or candidate.negated:
            return None
        if not self.registry.get(candidate.claim_key).single_valued:
            return None
        for memory in self._active_in_slot(candidate.claim_key):
            if not memory.negated and memory.claim_value == candidate.claim_value:
                return memory
        return None

    def _contest(self, newcomer: StoredMemory, at: datetime) -> _Decision:
        if newcomer.kind is MemoryKind.EPISODE_SUMMARY:
            return _Decision()
        if newcomer.claim_key is not None:
            return self._contest_claim(newcomer, newcomer.claim_key, at)
        threshold = self.thresholds.for_kind(newcomer.kind)
        match = self.lexical.best_match(
            newcomer.kind, tokens(newcomer.content), threshold, exclude=[newcomer.memory_key]
        )
        rivals = []
        if match is not None and _overlaps(newcomer, self.memories[match.key]):
            rivals.append((self.memories[match.key], match.score))
        return self._by_policy(newcomer, at, rivals, SupersessionRule.LEXICAL, threshold)

    def _contest_claim(self, newcomer: StoredMemory, claim_key: str, at: datetime) -> _Decision:
        decision = _Decision()
        slot = [m for m in self._active_in_slot(claim_key) if m.memory_key != newcomer.memory_key]
        rule = SupersessionRule.CLAIM_CONTRADICTION
        opposite = next(
            (
                m
                for m in slot
                if m.negated != newcomer.negated and m.claim_value == newcomer.claim_value
            ),
            None,
        )
        if opposite is not None:
            # A negation beats the positive it names unless the positive came later.
            newcomer_wins = (
                at >= opposite.last_asserted if newcomer.negated else at > opposite.last_asserted
            )
            if not newcomer_wins:
                decision.loss = _Loss(opposite, rule, None, None)
                return decision
            decision.beaten.append((opposite, rule, None, None))
        if newcomer.negated or not self.registry.get(claim_key).single_valued:
            return decision
        rivals = [
            (m, None)
            for m in slot
            if not m.negated and m.claim_value != newcomer.claim_value and _overlaps(newcomer, m)
        ]
        by_policy = self._by_policy(newcomer, at, rivals, rule, None)
        by_policy.beaten[:0] = decision.beaten
        return by_policy

    def _by_policy(
        self,
        newcomer: StoredMemory,
        at: datetime,
        rivals: Sequence[tuple[StoredMemory, float | None]],
        rule: SupersessionRule,
        threshold: float | None,
    ) -> _Decision:
        decision = _Decision()
        if not rivals:
            return decision
        policy = self.policies.for_kind(newcomer.kind)
        if policy is ConflictPolicy.FLAG:
            decision.flagged = [(rival, rule, score, threshold) for rival, score in rivals]
            return decision
        if policy is ConflictPolicy.KEEP_EXISTING:
            wins = all(_holds(newcomer, at, rival) for rival, _ in rivals)
        else:
            wins = all(
                (at, newcomer.memory_key) > (rival.last_asserted, rival.memory_key)
                for rival, _ in rivals
            )
        if wins:
            decision.beaten = [
                (rival, _beaten_rule(policy, newcomer, rival, rule), score, threshold)
                for rival, score in rivals
            ]
            return decision
        strongest, score = max(rivals, key=lambda pair: (pair[0].last_asserted, pair[0].memory_key))
        losing_rule = _beaten_rule(policy, strongest, newcomer, rule)
        decision.loss = _Loss(strongest, losing_rule, score, threshold)
        return decision

    def _apply(self, memory: StoredMemory, decision: _Decision, at: datetime) -> None:
        if decision.loss is not None:
            loss = decision.loss
            loser = evolve(
                memory,
                status=MemoryStatus.SUPERSEDED,
                status_rule=loss.rule,
                valid_to=_ended(memory, loss.winner.valid_from),
            )
            self._put(loser)
            self._record(loss.rule, loss.winner, loser, loss.score, loss.threshold)
            return
        self._put(memory)
        for beaten, rule, score, threshold in decision.beaten:
            loser = evolve(
                beaten,
                status=MemoryStatus.SUPERSEDED,
                status_rule=rule,
                valid_to=_ended(beaten, at),
            )
            self._put(loser)
            self._record(rule, memory, loser, score, threshold)
        for rival, rule, score, threshold in decision.flagged:
            self._flag(memory, rival, rule, score, threshold)

    def _record(
        self,
        rule: SupersessionRule,
        winner: StoredMemory,
        loser: StoredMemory | CandidateMemory,
        score: float | None,
        threshold: float | None,
    ) -> None:
        self.supersessions.append(
            Supersession(
                subject_id=self.subject_id,
                rule=rule,
                claim_key=winner.claim_key,
                score=score,
                threshold=threshold,
                winner_memory_key=winner.memory_key,
                winner_memory_id=winner.id,
                loser_memory_key=loser.memory_key,
                loser_memory_id=loser.id if isinstance(loser, StoredMemory) else None,
                winner_episode_ids=winner.source_episode_ids,
                # A stored memory's provenance is already sorted and unique.
                loser_episode_ids=(
                    loser.source_episode_ids
                    if isinstance(loser, StoredMemory)
                    else tuple(sorted(set(loser.source_episode_ids)))
                ),
                job_id=self.job_id,
                decided_at=self.now,
            )
        )

    def _flag(
        self,
        newcomer: StoredMemory,
        rival: StoredMemory,
        rule: SupersessionRule,
        score: float | None,
        threshold: float | None,
    ) -> None:
        first, second = sorted((newcomer, rival), key=lambda memory: memory.memory_key)
        identity = conflict_id(first.memory_key, second.memory_key)
        self.conflicts[identity] = OpenConflict(
            id=identity,
            subject_id=self.subject_id,
            kind=newcomer.kind,
            claim_key=newcomer.claim_key,
            rule=rule,
            score=score,
            threshold=threshold,
            memory_ids=(first.id, second.id),
            memory_keys=(first.memory_key, second.memory_key),
            contents=(first.content, second.content),
            job_id=self.job_id,
            detected_at=self.now,
        )

    # -- the result ---------------------------------------------------------------------

    def change_set(self) -> ChangeSet:
        created: list[StoredMemory] = []
        provenance: list[ProvenanceAddition] = []
        statuses: list[StatusChange] = []
        for key in sorted(self.memories):
            final = self.memories[key]
            before = self.original.get(key)
            if before is None:
                created.append(final)
                continue
            if (
                final.source_episode_ids != before.source_episode_ids
                or final.valid_from != before.valid_from
                or final.last_asserted != before.last_asserted
                or final.explicit_change != before.explicit_change
            ):
                provenance.append(_revised(final.id, key, final, before))
            if final.status is not before.status or final.valid_to != before.valid_to:
                statuses.append(
                    StatusChange(
                        memory_id=final.id,
                        memory_key=key,
                        from_status=before.status,
                        to_status=final.status,
                        valid_to=final.valid_to,
                        rule=final.status_rule,
                    )
                )
        reassertions: list[Reassertion] = []
        for key in sorted(self.asserted):
            before = self.original.get(key)
            if before is None:
                continue
            cited = before.source_episode_ids
            again = tuple(
                sorted(
                    (episode for episode in self.asserted[key] if _cites(cited, episode)),
                    key=id_number,
                )
            )
            if again:
                reassertions.append(Reassertion(before.id, key, again))
        return ChangeSet(
            memories_to_create=tuple(created),
            provenance_to_add=tuple(provenance),
            status_changes=tuple(statuses),
            supersessions=tuple(self.supersessions),
            open_conflicts=tuple(self.conflicts[key] for key in sorted(self.conflicts)),
            reassertions=tuple(reassertions),
        )


def _revised(
    memory_id: uuid.UUID, key: str, fresh: StoredMemory, old: StoredMemory
) -> ProvenanceAddition:
    """What the store must add to the memory stored as ``old`` to make it ``fresh``: the
    sources it lacks, and the validity, assertion time and explicit-change flag
    ``fresh`` has."""
    return ProvenanceAddition(
        memory_id=memory_id,
        memory_key=key,
        episode_ids=_beyond(fresh.source_episode_ids, old.source_episode_ids),
        valid_from=fresh.valid_from,
        asserted_at=fresh.last_asserted,
        explicit_change=fresh.explicit_change,
    )


def _beyond(
    episode_ids: Sequence[uuid.UUID], earlier: Sequence[uuid.UUID]
) -> tuple[uuid.UUID, ...]:
    """The ids of the provenance ``episode_ids`` (sorted, unique) not in ``earlier``, in
    order; compared by their numbers, which hash in C (a ``uuid.UUID`` hashes in Python,
    and a memory asserted by thousands of episodes has as many)."""
    held = set(map(id_number, earlier))
    return tuple(episode for episode in episode_ids if episode.int not in held)


def _resolved(
    subject_id: str,
    candidates: Iterable[CandidateMemory],
    existing: Sequence[StoredMemory],
    policies: PolicyTable,
    registry: ClaimRegistry,
    thresholds: SimilarityThresholds | None,
    job_id: str | None,
    now: datetime,
) -> _Resolution:
    """``existing`` with ``candidates`` (canonical claim keys) added in
    :func:`processing_order`: what :func:`resolve` and :func:`rederive` both decide."""
    state = _Resolution(
        subject_id,
        existing,
        policies,
        registry,
        thresholds or SimilarityThresholds(),
        job_id,
        now,
    )
    canonical = [_canonical(candidate, subject_id, registry) for candidate in candidates]
    for candidate in in_processing_order(canonical):
        state.add(candidate)
    return state


def resolve(
    subject_id: str,
    candidates: Sequence[CandidateMemory],
    existing: Sequence[StoredMemory],
    policies: PolicyTable,
    registry: ClaimRegistry,
    job_id: str | None,
    now: datetime,
    thresholds: SimilarityThresholds | None = None,
) -> ChangeSet:
    """Decide what ``candidates`` change in the store; see the module docstring.

    Deterministic: the same arguments give an equal change set, whatever the order of
    ``candidates`` and ``existing``. Repeats: resolving candidates already applied gives
    an empty change set. Conflicts: settled per kind by ``policies``; every decision is a
    ``Supersession`` record, every ``flag`` an ``OpenConflict``. Raises ``ValueError`` for
    a candidate or memory of another subject and ``ClaimRegistryError`` for an unknown
    claim key (aliases are mapped to their canonical key first).
    """
    require_aware(now, "now")
    return _resolved(
        subject_id, candidates, existing, policies, registry, thresholds, job_id, now
    ).change_set()


REDECIDED: frozenset[SupersessionRule] = CONTESTED | {
    SupersessionRule.CLAIM_DUPLICATE,
    SupersessionRule.WINNER_RETIRED,
}
"""The rules of the records :func:`rederive` decides again: those of contests between
memories the evidence supports (a withdrawal and a person's choice stay)."""


@dataclass(frozen=True, slots=True)
class RecordedDecision:
    """A stored supersession record as :func:`rederive` compares it: the record's id and
    its :func:`decision_of` (the stored episode lists are cut to ``listed`` ids)."""

    id: uuid.UUID
    rule: SupersessionRule
    winner_memory_key: str | None
    loser_memory_key: str
    decision: tuple[object, ...]


def decision_of(record: Supersession, listed: int) -> tuple[object, ...]:
    """What a record decided, without when and by which compile (``decided_at``,
    ``job_id``: transaction time): rule, claim key, score, threshold, winner and loser,
    the first ``listed`` source episodes of each side (in id order, as text) and how
    many each side has. Two records with equal decisions say the same thing."""
    return (
        record.rule,
        record.claim_key,
        record.score,
        record.threshold,
        record.winner_memory_key,
        record.loser_memory_key,
        # As text, as the store lists them: parsing thousands of stored lists back
        # into ids cost more than the rest of a re-decision's reading.
        tuple(map(str, record.winner_episode_ids[:listed])),
        tuple(map(str, record.loser_episode_ids[:listed])),
        len(record.winner_episode_ids),
        len(record.loser_episode_ids),
    )


def rederive(
    subject_id: str,
    candidates: Sequence[CandidateMemory],
    stored: Sequence[StoredMemory],
    recorded: Sequence[RecordedDecision],
    open_conflicts: Sequence[OpenConflict],
    policies: PolicyTable,
    registry: ClaimRegistry,
    job_id: str | None,
    now: datetime,
    thresholds: SimilarityThresholds | None = None,
    *,
    listed: int,
) -> ChangeSet:
    """Decide a subject's contests again from all of its evidence, as one compile of
    every episode in time order would, and return what the store must change to match.

    ``candidates`` are what the subject's episodes derive at the revisions compiled (all
    of them, not only new ones); ``stored`` is every memory of the subject, in any
    status; ``recorded`` its stored supersession records whose rule is in
    :data:`REDECIDED`, and ``open_conflicts`` its open conflicts. The candidates are
    resolved from nothing, in :func:`processing_order` (time, then ``memory_key``), so
    who beats whom, each memory's ``valid_from``/``asserted_at`` (its sources' first and
    latest assertions) and ``valid_to`` (when the assertion of what beat it occurred)
    depend on the evidence and the configuration alone, not on the order the episodes
    arrived in or how compiles were cut. Only a person's decisions are taken as given:
    a memory superseded ``manual``-ly, or tombstoned by other than its sources, stays so.

    The change set creates the memories the store lacks, sets the times, provenance,
    status, ``valid_to`` and status rule of those that differ, retracts the records
    among memories it derived that the fresh decisions do not repeat and writes the new
    ones (a record equal in :func:`decision_of` to a stored one is kept, not written
    again), opens the conflicts found and resolves the open ones not found. Memories it
    does not derive (retired because their evidence went away) and records naming one
    of them keep what they say; so does the status rule of a memory active before and
    after (``winner_retired``: it came back when what beat it went away). Not taken
    from the evidence: a memory's content (its first wording), confidence and metadata,
    and ``created_at``, ``job_id`` and ``decided_at``, which say when the store learned
    of it.

    Deterministic; repeats: on its own result it returns an empty change set. Raises
    ``ValueError`` for a candidate or memory of another subject.
    """
    require_aware(now, "now")
    kept = [
        memory
        for memory in stored
        if memory.status_rule is SupersessionRule.MANUAL
        or (memory.status is MemoryStatus.TOMBSTONED and memory.status_rule not in WITHDRAWN)
    ]
    state = _resolved(subject_id, candidates, kept, policies, registry, thresholds, job_id, now)
    before = {memory.memory_key: memory for memory in stored}
    created: list[StoredMemory] = []
    provenance: list[ProvenanceAddition] = []
    statuses: list[StatusChange] = []
    for key in sorted(state.memories):
        fresh, old = state.memories[key], before.get(key)
        if old is None:
            created.append(fresh)
            continue
        if (
            not set(fresh.source_episode_ids) <= set(old.source_episode_ids)
            or fresh.valid_from != old.valid_from
            or fresh.last_asserted != old.last_asserted
            or fresh.explicit_change != old.explicit_change
        ):
            provenance.append(_revised(old.id, key, fresh, old))
        if fresh.status is MemoryStatus.ACTIVE is old.status:
            # Still active: the rule it came back by (``winner_retired``) stays.
            fresh = evolve(fresh, status_rule=old.status_rule)
        if (fresh.status, fresh.valid_to, fresh.status_rule) != (
            old.status,
            old.valid_to,
            old.status_rule,
        ):
            statuses.append(
                StatusChange(
                    memory_id=old.id,
                    memory_key=key,
                    from_status=old.status,
                    to_status=fresh.status,
                    valid_to=fresh.valid_to,
                    rule=fresh.status_rule,
                )
            )
    # Records: kept where the fresh decisions repeat them, one for one; the rest of
    # those between derived memories are retracted (a record naming a memory it does
    # not derive is about evidence that went away, and stays).
    derived = state.memories.keys()
    unmatched: dict[tuple[object, ...], list[uuid.UUID]] = defaultdict(list)
    for stored_record in recorded:
        in_scope = stored_record.winner_memory_key in derived and (
            stored_record.loser_memory_key in derived
            or stored_record.rule is SupersessionRule.CLAIM_DUPLICATE
        )
        if stored_record.rule in REDECIDED and in_scope:
            unmatched[stored_record.decision].append(stored_record.id)
    written: list[Supersession] = []
    for record in state.supersessions:
        same = unmatched.get(decision_of(record, listed))
        if same:
            same.pop()
        else:
            written.append(record)
    found = {conflict.id for conflict in state.conflicts.values()}
    was_open = {conflict.id for conflict in open_conflicts}
    return ChangeSet(
        memories_to_create=tuple(created),
        provenance_to_add=tuple(provenance),
        status_changes=tuple(statuses),
        supersessions=tuple(written),
        open_conflicts=tuple(
            state.conflicts[key] for key in sorted(state.conflicts) if key not in was_open
        ),
        resolved_conflict_ids=tuple(sorted(was_open - found)),
        retracted_records=tuple(sorted(i for ids in unmatched.values() for i in ids)),
    )


def processing_order(candidate: CandidateMemory) -> tuple[object, ...]:
    """Sort key ``resolve`` processes candidates in: ``(valid_from, memory_key)`` first."""
    # (valid_from, memory_key) decides; the rest only breaks ties between candidates of
    # one statement, so which wording becomes the stored content never depends on input
    # order.
    return (
        candidate.valid_from,
        candidate.memory_key,
        candidate.content,
        # Ids compare by their number, which orders them as their text does (fixed-width
        # lowercase hex), without rendering each as text for every candidate.
        _sorted_ids(candidate.source_episode_ids),
        candidate.explicit_change,
    )


def in_processing_order(candidates: Iterable[CandidateMemory]) -> list[CandidateMemory]:
    """``candidates`` sorted by :func:`processing_order`, with the assertions of one
    statement at one moment (same ``valid_from`` and ``memory_key``) made one: the first
    of them (by content) with the sources of all, explicit if any of them is.

    Why: two episodes that say the same thing at the same moment tie on time and key,
    and the rest of the order would fall to their ids, which ingest draws at random. The
    first of them would be contested alone and the other merged in after, so which
    episodes a record names, and whether an explicit wording counted in the contest,
    would depend on those ids. As one assertion they are contested together, the same
    way in every store and whatever order they arrived in."""
    ordered = sorted(candidates, key=processing_order)
    merged: list[CandidateMemory] = []
    for candidate in ordered:
        if merged and (merged[-1].valid_from, merged[-1].memory_key) == (
            candidate.valid_from,
            candidate.memory_key,
        ):
            first = merged[-1]
            merged[-1] = evolve(
                first,
                source_episode_ids=tuple(
                    sorted(
                        {*first.source_episode_ids, *candidate.source_episode_ids},
                        key=id_number,
                    )
                ),
                explicit_change=first.explicit_change or candidate.explicit_change,
            )
        else:
            merged.append(candidate)
    return merged


def _sorted_ids(ids: tuple[uuid.UUID, ...]) -> tuple[uuid.UUID, ...]:
    # Most candidates come from one episode: nothing to sort.
    return ids if len(ids) < 2 else tuple(sorted(ids, key=id_number))


def _canonical(
    candidate: CandidateMemory, subject_id: str, registry: ClaimRegistry
) -> CandidateMemory:
    if candidate.subject_id != subject_id:
        raise ValueError(
            f"candidate {candidate.content!r} belongs to subject {candidate.subject_id!r}, "
            f"not {subject_id!r}"
        )
    if candidate.claim_key is None:
        return candidate
    canonical_key = registry.canonical(candidate.claim_key)
    if canonical_key == candidate.claim_key:
        return candidate
    return evolve(candidate, claim_key=canonical_key)  # recomputes memory_key


class SourceStanding(enum.StrEnum):
    """Where one source episode of a memory stands now, as the caller found it."""

    SUPPORTS = "supports"
    """Live, filed under the memory's subject, and its current revision asserts the
    memory (or has not been compiled yet, so its own compile will decide)."""
    REVISED_AWAY = "revised_away"
    """Live and filed under the memory's subject, but its current revision no longer
    asserts the memory."""
    MOVED = "moved"
    """Live, but the record is filed under another subject now."""
    DELETED = "deleted"
    """A tombstone: the source showed the record deleted (or it is gone from the store)."""


@dataclass(frozen=True, slots=True)
class SourceEvidence:
    """Where each source episode of some memories stands now (``standings``, by memory
    id then episode id), and when the revision of each supporting one that asserted its
    memory occurred (``asserted_at``, alike). A source ``standings`` does not name
    supports its memory."""

    standings: Mapping[uuid.UUID, Mapping[uuid.UUID, SourceStanding]] = field(default_factory=dict)
    asserted_at: Mapping[uuid.UUID, Mapping[uuid.UUID, datetime]] = field(default_factory=dict)

    def __or__(self, other: SourceEvidence) -> SourceEvidence:
        return SourceEvidence(
            {**self.standings, **other.standings}, {**self.asserted_at, **other.asserted_at}
        )


def withdraw_unsupported(
    memories: Sequence[StoredMemory],
    standings: Mapping[uuid.UUID, Mapping[uuid.UUID, SourceStanding]],
    job_id: str | None,
    now: datetime,
    *,
    asserted_at: Mapping[uuid.UUID, Mapping[uuid.UUID, datetime]] | None = None,
) -> ChangeSet:
    """Retire the memories that no source episode supports any more: active ones, and
    ones superseded by a contest (rule in ``CONTESTED``: their evidence is gone too, and
    a later assertion must not be merged with it).

    ``standings[memory.id][episode_id]`` says where each source of a memory stands; a
    source it does not name supports the memory. A memory with at least one source
    that ``SUPPORTS`` it stays. Otherwise, when every source moved away or was
    deleted, the memory is ``tombstoned`` (rule ``source_moved`` when every source
    moved, else ``source_deleted``): it leaves the read path of its subject, and no
    longer holds at any valid time. When some source is still there but no longer
    asserts it, the memory is ``superseded`` (rule ``source_revised``). An active memory
    ends now (``valid_to``); a superseded one keeps the end it had. Each retirement
    writes a record whose loser episodes are the memory's sources and whose winner is
    ``None``; any later evidence brings the memory back, dated by that evidence alone
    (see :func:`resolve`). Memories of several subjects may be passed: each record is
    filed under its memory's subject.

    ``asserted_at[memory.id][episode_id]``, when given, is when the revision of each
    supporting source that asserted the memory occurred. An active or superseded memory
    that keeps some support but lost some has its ``valid_from`` and ``asserted_at``
    narrowed to those of the sources left (a ``ProvenanceAddition`` without episodes),
    as a compile of the remaining records would date it; a contest it won on a later
    assertion that went away is then decided again (:func:`unsettled`).

    Repeats: a memory already retired is skipped, and a narrowed one already has the
    times of its sources, so calling this twice changes nothing the second time.
    """
    require_aware(now, "now")
    statuses: list[StatusChange] = []
    records: list[Supersession] = []
    narrowed: list[ProvenanceAddition] = []
    for memory in sorted(memories, key=lambda stored: (stored.subject_id, stored.memory_key)):
        if memory.status is MemoryStatus.TOMBSTONED or not memory.source_episode_ids:
            continue
        named = standings.get(memory.id, {})
        where = {
            named.get(episode, SourceStanding.SUPPORTS) for episode in memory.source_episode_ids
        }
        if SourceStanding.SUPPORTS in where:
            if len(where) > 1 and asserted_at is not None:
                narrowing = _narrowed(memory, named, asserted_at.get(memory.id, {}))
                if narrowing is not None:
                    narrowed.append(narrowing)
            continue
        if memory.status is not MemoryStatus.ACTIVE and memory.status_rule not in CONTESTED:
            continue  # retired already, by its sources or by a person
        if where == {SourceStanding.MOVED}:
            status, rule = MemoryStatus.TOMBSTONED, SupersessionRule.SOURCE_MOVED
        elif where <= {SourceStanding.MOVED, SourceStanding.DELETED}:
            status, rule = MemoryStatus.TOMBSTONED, SupersessionRule.SOURCE_DELETED
        else:
            status, rule = MemoryStatus.SUPERSEDED, SupersessionRule.SOURCE_REVISED
        statuses.append(
            StatusChange(
                memory.id,
                memory.memory_key,
                memory.status,
                status,
                # An active memory held until now; a loser ended when it lost.
                max(memory.valid_from, now) if memory.valid_to is None else memory.valid_to,
                rule,
            )
        )
        records.append(
            Supersession(
                subject_id=memory.subject_id,
                rule=rule,
                claim_key=memory.claim_key,
                score=None,
                threshold=None,
                winner_memory_key=None,
                winner_memory_id=None,
                loser_memory_key=memory.memory_key,
                loser_memory_id=memory.id,
                winner_episode_ids=(),
                loser_episode_ids=memory.source_episode_ids,
                job_id=job_id,
                decided_at=now,
            )
        )
    return ChangeSet(
        provenance_to_add=tuple(narrowed),
        status_changes=tuple(statuses),
        supersessions=tuple(records),
    )


def _narrowed(
    memory: StoredMemory,
    standings: Mapping[uuid.UUID, SourceStanding],
    asserted_at: Mapping[uuid.UUID, datetime],
) -> ProvenanceAddition | None:
    """The times of the sources of ``memory`` that still support it, if they differ
    from its own (``None`` too when the time of one of them is not known)."""
    times = [
        asserted_at.get(episode)
        for episode in memory.source_episode_ids
        if standings.get(episode, SourceStanding.SUPPORTS) is SourceStanding.SUPPORTS
    ]
    known = [time for time in times if time is not None]
    if len(known) != len(times):
        return None
    valid_from, last = min(known), max(known)
    if memory.valid_to is not None:
        valid_from = min(valid_from, memory.valid_to)  # never starting after it ended
    if (valid_from, last) == (memory.valid_from, memory.last_asserted):
        return None
    return ProvenanceAddition(
        memory_id=memory.id,
        memory_key=memory.memory_key,
        episode_ids=(),
        valid_from=valid_from,
        asserted_at=last,
        explicit_change=memory.explicit_change,
    )


def unsettled(
    memories: Sequence[StoredMemory],
    standings: Mapping[uuid.UUID, Mapping[uuid.UUID, SourceStanding]],
    withdrawn: ChangeSet,
) -> frozenset[uuid.UUID]:
    """The memories of ``memories`` whose wins may no longer hold, given where their
    sources stand and ``withdrawn``, the result of :func:`withdraw_unsupported` on them:
    the ones it retires, the ones whose evidence it narrowed (a memory they beat on a
    later assertion that went away may outrank them now), and the superseded ones no
    source supports any more (a memory they beat is not beaten by anything a compile of
    the remaining records would derive)."""
    retired = {change.memory_id for change in withdrawn.status_changes}
    narrowed = {addition.memory_id for addition in withdrawn.provenance_to_add}
    gone = {
        memory.id
        for memory in memories
        if memory.status is MemoryStatus.SUPERSEDED
        and not _supported(memory, standings.get(memory.id, {}))
    }
    return frozenset(retired | narrowed | gone)


def reconsider_losers(
    subject_id: str,
    memories: Sequence[StoredMemory],
    contested: Collection[uuid.UUID],
    defeats: Sequence[Defeat],
    evidence: SourceEvidence,
    open_conflicts: Sequence[OpenConflict],
    policies: PolicyTable,
    registry: ClaimRegistry,
    job_id: str | None,
    now: datetime,
    thresholds: SimilarityThresholds | None = None,
) -> ChangeSet:
    """Decide again the contests around memories that no longer stand as they did, so
    that the subject's memories are what a compile of its remaining records gives.

    ``memories`` are the subject's memories after :func:`withdraw_unsupported` was
    applied: the ``contested`` ones, and the active memories a contender may meet (those
    of its claim keys, and of its kinds for unkeyed ones). ``contested`` are the memories
    supersession records connect to the :func:`unsettled` ones, through any memory in
    play (active, or superseded by a contest: rule in ``CONTESTED``): a chain (A beat B
    beat C) is found whole, so C is reconsidered when A retires and B has lost its
    sources too, and so is what beat them. ``defeats`` are the contest records they lost
    and ``evidence`` says where their sources stand and when each asserted its memory.

    The contenders are the contested memories in play that a source still supports.
    Each is taken out, and its assertions by the sources that still support it arrive
    again in processing order, as :func:`resolve` takes candidates (same policies,
    thresholds and claim registry), among the subject's other active memories. Then:

    - a loser that wins is ``active`` again. Unless the record of its beating the memory
      it had lost to explains that, it gets status rule ``winner_retired`` and a record
      of that rule whose winner is the memory it had lost to (its latest defeat) and
      whose loser is itself, with that defeat's score and threshold;
    - an active memory that loses now is ``superseded`` with the usual record;
    - a loser that loses again keeps its status; if to another memory than its latest
      defeat names, the record of that loss is written (so that it is reconsidered when
      that memory goes in turn). A ``flag`` policy opens a conflict between a returning
      memory and an active one;
    - an open conflict in ``open_conflicts`` one side of which is no longer active is
      resolved, with no memory kept by a person.

    A contender whose sources' times are not all known stays as it is. Deterministic.
    Repeats: on its own result it changes nothing (the same evidence is decided the
    same way). Raises ``ValueError`` for a memory of another subject.
    """
    require_aware(now, "now")
    state = _Resolution(
        subject_id,
        memories,
        policies,
        registry,
        thresholds or SimilarityThresholds(),
        job_id,
        now,
    )
    latest: dict[uuid.UUID, Defeat] = {}
    for defeat in sorted(defeats, key=lambda d: (d.decided_at, str(d.winner_memory_id))):
        latest[defeat.loser_memory_id] = defeat
    contenders = [
        memory
        for memory in memories
        if memory.id in contested
        and (
            memory.status is MemoryStatus.ACTIVE
            or (memory.status is MemoryStatus.SUPERSEDED and memory.status_rule in CONTESTED)
        )
        and _supported(memory, evidence.standings.get(memory.id, {}))
    ]
    state.reconsider(contenders, evidence)
    return state.reconsidered(latest, {memory.id: memory for memory in memories}, open_conflicts)


def _assertions(memory: StoredMemory, evidence: SourceEvidence) -> list[CandidateMemory]:
    """``memory`` as the candidates its supporting sources assert, each at the time its
    asserting revision occurred; none when that cannot be said exactly (a source of
    unknown time, a memory whose statement no longer yields its key)."""
    standings = evidence.standings.get(memory.id, {})
    times = evidence.asserted_at.get(memory.id, {})
    supporting = [
        episode
        for episode in memory.source_episode_ids
        if standings.get(episode, SourceStanding.SUPPORTS) is SourceStanding.SUPPORTS
    ]
    if not all(episode in times for episode in supporting):
        return []
    candidates = [
        CandidateMemory(
            subject_id=memory.subject_id,
            kind=memory.kind,
            content=memory.content,
            claim_key=memory.claim_key,
            claim_value=memory.claim_value,
            confidence=memory.confidence,
            valid_from=times[episode],
            source_episode_ids=(episode,),
            metadata=memory.metadata,
            negated=memory.negated,
            explicit_change=memory.explicit_change,
        )
        for episode in supporting
    ]
    if any(candidate.memory_key != memory.memory_key for candidate in candidates):
        return []
    return candidates


def _supported(memory: StoredMemory, standings: Mapping[uuid.UUID, SourceStanding]) -> bool:
    return any(
        standings.get(episode, SourceStanding.SUPPORTS) is SourceStanding.SUPPORTS
        for episode in memory.source_episode_ids
    )


def manual_resolution(
    conflict: OpenConflict,
    chosen: StoredMemory,
    rejected: StoredMemory,
    *,
    job_id: str | None,
    now: datetime,
) -> ChangeSet:
    """A person picked ``chosen`` for ``conflict``: supersede ``rejected`` (rule ``manual``).

    The conflict is closed and ``rejected`` is never reinstated by later compiles (its
    ``status_rule`` is ``manual``). Raises ``ValueError`` if the two memories are not the
    conflict's pair. Repeats: resolving an already-resolved conflict again yields the
    same change set; the store's status check makes applying it a no-op.
    """
    require_aware(now, "now")
    if {chosen.id, rejected.id} != set(conflict.memory_ids) or chosen.id == rejected.id:
        raise ValueError(
            f"conflict {conflict.id} is between memories {conflict.memory_ids[0]} and "
            f"{conflict.memory_ids[1]}; choose one of them and reject the other"
        )
    change = StatusChange(
        rejected.id,
        rejected.memory_key,
        rejected.status,
        MemoryStatus.SUPERSEDED,
        _ended(rejected, chosen.valid_from),
        SupersessionRule.MANUAL,
    )
    record = Supersession(
        subject_id=conflict.subject_id,
        rule=SupersessionRule.MANUAL,
        claim_key=conflict.claim_key,
        score=conflict.score,
        threshold=conflict.threshold,
        winner_memory_key=chosen.memory_key,
        winner_memory_id=chosen.id,
        loser_memory_key=rejected.memory_key,
        loser_memory_id=rejected.id,
        winner_episode_ids=chosen.source_episode_ids,
        loser_episode_ids=rejected.source_episode_ids,
        job_id=job_id,
        decided_at=now,
    )
    return ChangeSet(
        status_changes=(change,), supersessions=(record,), resolved_conflict_ids=(conflict.id,)
    )


def apply_changes(memories: Sequence[StoredMemory], changes: ChangeSet) -> list[StoredMemory]:
    """Apply ``changes`` to ``memories`` in memory: the reference semantics for the store.

    Creations are inserted (a ``memory_key`` already present raises ``ValueError``, as the
    store's unique index would); provenance additions union episode ids and set the new
    ``valid_from``/``asserted_at``/``explicit_change``; status changes set ``status``,
    ``valid_to`` and ``status_rule``. Returns all memories sorted by ``memory_key``.
    """
    by_key = {memory.memory_key: memory for memory in memories}
    for created in changes.memories_to_create:
        if created.memory_key in by_key:
            raise ValueError(f"memory {created.memory_key} already exists")
        by_key[created.memory_key] = created
    for addition in changes.provenance_to_add:
        memory = by_key[addition.memory_key]
        by_key[addition.memory_key] = evolve(
            memory,
            source_episode_ids=_united(memory.source_episode_ids, addition.episode_ids),
            valid_from=addition.valid_from,
            asserted_at=addition.asserted_at,
            explicit_change=addition.explicit_change,
        )
    for change in changes.status_changes:
        by_key[change.memory_key] = evolve(
            by_key[change.memory_key],
            status=change.to_status,
            valid_to=change.valid_to,
            status_rule=change.rule,
        )
    return [by_key[key] for key in sorted(by_key)]
