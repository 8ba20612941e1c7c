"""Sensitivity labels as stored, and what a read policy lets one caller see of a subject.

A memory's labels are the ones set on it plus those of its source episodes
(:mod:`memsync.compile.sensitivity`). :class:`Labels` reads and writes the memory's
own; a connector's rules write an episode's at ingest. :class:`ReadGate` turns a
policy and a caller into a :class:`Visibility` of one subject — the memories denied
or redacted, and the episodes whose text would repeat a denied memory — that every
read path (context, search, timeline, receipts, handoff, the admin page) applies
before it assembles, counts or hashes anything.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field, replace

import sqlalchemy as sa

from memsync.clock import Clock
from memsync.compile.resolve import OpenConflict
from memsync.compile.sensitivity import (
    REDACTION_MARKER,
    CallerIdentity,
    Decision,
    PolicyAction,
    ReadPolicy,
    normalise_labels,
)
from memsync.compile.types import EpisodeView, StoredMemory
from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store

__all__ = ["EVERYTHING", "CallerRequired", "Labels", "ReadGate", "Visibility"]

log = logging.getLogger("memsync.policy")

_memory_labels = tables.memory_labels
_episode_labels = tables.episode_labels
_sources = tables.memory_sources
_memories = tables.memories

_OWN_LABELS = sa.select(
    _memory_labels.c.memory_id, _memory_labels.c.labels, _memory_labels.c.rule_labels
)
"""A memory's own labels: set by hand, and by the compile rules."""


class CallerRequired(PermissionError):
    """The policy requires every read to name its caller, and this one did not."""


@dataclass(frozen=True, slots=True)
class SubjectLabels:
    """The labels of a subject's labelled memories (own and sources') and episodes, and
    which episodes each labelled memory came from."""

    memories: dict[uuid.UUID, frozenset[str]]
    episodes: dict[uuid.UUID, frozenset[str]]
    sources: dict[uuid.UUID, frozenset[uuid.UUID]]
    derived: dict[uuid.UUID, frozenset[uuid.UUID]]
    """By episode (labelled, or a source of a labelled memory): every memory it is a
    source of."""


class Labels:
    """Memory labels set by hand, and the labels a subject's reads are decided on.

    Repeats: setting the same labels twice stores the same row; setting an empty list
    removes the memory's own labels (those of its source episodes still apply)."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    def set_memory_labels(
        self, tenant_id: str, memory_id: uuid.UUID, labels: Iterable[str]
    ) -> tuple[str, ...] | None:
        """Replace the memory's own labels (normalised; ValueError past the limits).
        Returns the memory's labels now (own and sources'), or None when the tenant has
        no memory of that id."""
        normalised = normalise_labels(labels)
        with self._store.write() as connection:
            subject = connection.execute(
                sa.select(_memories.c.subject_id).where(
                    _memories.c.tenant_id == tenant_id, _memories.c.id == memory_id
                )
            ).scalar_one_or_none()
            if subject is None:
                return None
            # One statement, so two concurrent PATCHes of a memory leave the last one's
            # labels; the compile rules' labels stay: only the memory's own are replaced.
            now = self._clock.now()
            insert = tables.upsert(_memory_labels, postgresql=self._store.is_postgresql)
            connection.execute(
                insert.values(
                    tenant_id=tenant_id,
                    memory_id=memory_id,
                    subject_id=subject,
                    labels=list(normalised),
                    rule_labels=[],
                    updated_at=now,
                ).on_conflict_do_update(
                    index_elements=[_memory_labels.c.tenant_id, _memory_labels.c.memory_id],
                    set_={"labels": insert.excluded.labels, "updated_at": now},
                )
            )
        return tuple(sorted(self.of_memories(tenant_id, [memory_id]).get(memory_id, ())))

    def of_memories(
        self, tenant_id: str, memory_ids: Collection[uuid.UUID]
    ) -> dict[uuid.UUID, frozenset[str]]:
        """The labels (own and source episodes') of those memories that have any."""
        if not memory_ids:
            return {}
        ids = list(memory_ids)
        found: dict[uuid.UUID, set[str]] = {}
        with self._store.read() as connection:
            own = connection.execute(
                _OWN_LABELS.where(
                    _memory_labels.c.tenant_id == tenant_id,
                    _memory_labels.c.memory_id.in_(ids),
                )
            )
            inherited = connection.execute(
                sa.select(_sources.c.memory_id, _episode_labels.c.labels)
                .join(
                    _episode_labels,
                    sa.and_(
                        _episode_labels.c.tenant_id == _sources.c.tenant_id,
                        _episode_labels.c.episode_id == _sources.c.episode_id,
                    ),
                )
                .where(_sources.c.tenant_id == tenant_id, _sources.c.memory_id.in_(ids))
            )
            for memory_id, *label_lists in [*own, *inherited]:
                for labels in label_lists:
                    found.setdefault(memory_id, set()).update(labels)
        return {memory_id: frozenset(labels) for memory_id, labels in found.items()}

    def of_subject(self, tenant_id: str, subject_id: str) -> SubjectLabels:
        """Every labelled memory and episode of the subject, their sources and what those
        derived: at most five index lookups in one read, two when nothing is labelled."""
        with self._store.read() as connection:
            episodes = {
                episode_id: frozenset(labels)
                for episode_id, labels in connection.execute(
                    sa.select(_episode_labels.c.episode_id, _episode_labels.c.labels).where(
                        _episode_labels.c.tenant_id == tenant_id,
                        _episode_labels.c.subject_id == subject_id,
                    )
                )
            }
            memories: dict[uuid.UUID, set[str]] = {}
            for memory_id, labels, rule_labels in connection.execute(
                _OWN_LABELS.where(
                    _memory_labels.c.tenant_id == tenant_id,
                    _memory_labels.c.subject_id == subject_id,
                )
            ):
                memories.setdefault(memory_id, set()).update(labels, rule_labels)
            for ids in tables.in_slices(sorted(episodes)):
                for memory_id, episode_id in connection.execute(
                    sa.select(_sources.c.memory_id, _sources.c.episode_id).where(
                        _sources.c.tenant_id == tenant_id, _sources.c.episode_id.in_(ids)
                    )
                ):
                    memories.setdefault(memory_id, set()).update(episodes[episode_id])
            sources: dict[uuid.UUID, set[uuid.UUID]] = {}
            if memories:
                for memory_id, episode_id in connection.execute(
                    sa.select(_sources.c.memory_id, _sources.c.episode_id).where(
                        _sources.c.tenant_id == tenant_id,
                        _sources.c.memory_id.in_(list(memories)),
                    )
                ):
                    sources.setdefault(memory_id, set()).add(episode_id)
            # Every memory any of those episodes asserted: what a denial may take along.
            derived: dict[uuid.UUID, set[uuid.UUID]] = {}
            candidates = {*episodes, *(e for found in sources.values() for e in found)}
            for ids in tables.in_slices(sorted(candidates)):
                for memory_id, episode_id in connection.execute(
                    sa.select(_sources.c.memory_id, _sources.c.episode_id).where(
                        _sources.c.tenant_id == tenant_id, _sources.c.episode_id.in_(ids)
                    )
                ):
                    derived.setdefault(episode_id, set()).add(memory_id)
        return SubjectLabels(
            {key: frozenset(value) for key, value in memories.items()},
            episodes,
            {key: frozenset(value) for key, value in sources.items()},
            {key: frozenset(value) for key, value in derived.items()},
        )


@dataclass(frozen=True, slots=True)
class Visibility:
    """What one caller may see of one subject: everything but these.

    ``hidden_episodes`` are the episodes denied themselves and those a denied memory
    came from (their text would repeat it); ``denied_memories`` include every memory
    derived from a hidden episode, for the same reason; ``redacted_episodes`` are those
    whose text is replaced by the marker."""

    denied_memories: frozenset[uuid.UUID] = frozenset()
    redacted_memories: frozenset[uuid.UUID] = frozenset()
    hidden_episodes: frozenset[uuid.UUID] = frozenset()
    redacted_episodes: frozenset[uuid.UUID] = frozenset()
    labels: dict[uuid.UUID, frozenset[str]] = field(default_factory=dict)
    """The labels of the subject's labelled memories and episodes, to show with them."""

    @property
    def restricts(self) -> bool:
        return bool(
            self.denied_memories
            or self.redacted_memories
            or self.hidden_episodes
            or self.redacted_episodes
        )

    def shows_memory(self, memory_id: uuid.UUID) -> bool:
        return memory_id not in self.denied_memories

    def shows_episode(self, episode_id: uuid.UUID) -> bool:
        return episode_id not in self.hidden_episodes

    def memory(self, memory: StoredMemory) -> StoredMemory | None:
        """The memory as this caller sees it: None when denied, the marker for its
        text when redacted."""
        if memory.id in self.denied_memories:
            return None
        if memory.id in self.redacted_memories:
            return replace(memory, content=REDACTION_MARKER, claim_value=None)
        return memory

    def memories(self, memories: Iterable[StoredMemory]) -> list[StoredMemory]:
        return [shown for memory in memories if (shown := self.memory(memory)) is not None]

    def conflicts(self, conflicts: Iterable[OpenConflict]) -> list[OpenConflict]:
        """Open conflicts naming no denied or redacted memory (a conflict states both
        texts)."""
        withheld = self.denied_memories | self.redacted_memories
        return [c for c in conflicts if withheld.isdisjoint(c.memory_ids)]

    def episodes(self, episodes: Iterable[EpisodeView]) -> list[EpisodeView]:
        """The episodes shown, a redacted one with the marker as its whole payload."""
        return [
            replace(episode, payload={"text": REDACTION_MARKER})
            if episode.id in self.redacted_episodes
            else episode
            for episode in episodes
            if episode.id not in self.hidden_episodes
        ]


EVERYTHING = Visibility()
"""What a caller sees where no rule applies."""


class ReadGate:
    """Decides, logs and counts what a caller sees of a subject under the policy.

    Every decision (a rule matching a memory or an episode) is logged and counted by
    rule and action, also in ``log_only`` mode, where it is logged as ``would_deny`` /
    ``would_redact`` and nothing is hidden. Repeats: the same labels and caller get
    the same visibility; each read logs its decisions again (each is a read)."""

    def __init__(
        self,
        policy: ReadPolicy,
        labels: Labels,
        count: Callable[[Decision], None] = lambda decision: None,
    ) -> None:
        self._policy = policy
        self._labels = labels
        self._count = count

    @property
    def policy(self) -> ReadPolicy:
        return self._policy

    def check_caller(self, caller: CallerIdentity) -> None:
        """Raises :class:`CallerRequired` when the policy needs a caller and none is
        named."""
        if self._policy.require_caller_identity and not caller.known:
            raise CallerRequired(
                "this server's read policy requires the caller: send caller_id / "
                "caller_type, or the X-Caller-ID / X-Caller-Type headers"
            )

    def visibility(
        self, tenant_id: str, subject_id: str, caller: CallerIdentity, *, path: str
    ) -> Visibility:
        """What ``caller`` may see of the subject on the read path ``path`` (``context``,
        ``search``, … — logged with each decision)."""
        self.check_caller(caller)
        if not self._policy.active:
            return EVERYTHING
        found = self._labels.of_subject(tenant_id, subject_id)
        denied: set[uuid.UUID] = set()
        redacted: set[uuid.UUID] = set()
        hidden: set[uuid.UUID] = set()
        redacted_episodes: set[uuid.UUID] = set()
        for kind, labelled, deny_into, redact_into in (
            ("memory", found.memories, denied, redacted),
            ("episode", found.episodes, hidden, redacted_episodes),
        ):
            for item_id in sorted(labelled):
                decision = self._policy.decide(labelled[item_id], caller)
                if decision is None:
                    continue
                self._record(decision, kind, item_id, tenant_id, subject_id, caller, path)
                if not decision.enforced:
                    continue
                (deny_into if decision.action is PolicyAction.DENY else redact_into).add(item_id)
        for memory_id in denied:
            hidden.update(found.sources.get(memory_id, ()))
        # A memory derived from a hidden episode (its summary, another fact it states)
        # may repeat the denied text: it goes too, with no decision of its own.
        for episode_id in hidden:
            denied.update(found.derived.get(episode_id, ()))
        return Visibility(
            frozenset(denied),
            frozenset(redacted - denied),
            frozenset(hidden),
            frozenset(redacted_episodes - hidden),
            {**found.episodes, **found.memories},
        )

    def _record(
        self,
        decision: Decision,
        kind: str,
        item_id: uuid.UUID,
        tenant_id: str,
        subject_id: str,
        caller: CallerIdentity,
        path: str,
    ) -> None:
        action = decision.action.value if decision.enforced else f"would_{decision.action.value}"
        log.info(
            "policy %s %s %s by rule %s",
            action,
            kind,
            item_id,
            decision.rule,
            extra={
                "policy_rule": decision.rule,
                "policy_action": action,
                "policy_mode": self._policy.mode.value,
                "tenant_id": tenant_id,
                "subject_id": subject_id,
                f"{kind}_id": str(item_id),
                "caller_id": caller.caller_id,
                "caller_type": caller.caller_type,
                "read_path": path,
            },
        )
        self._count(decision)
