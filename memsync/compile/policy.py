"""Conflict policies: what happens when two memories of one kind contradict each other.

=================  ===================================================================
policy             effect when a newcomer contradicts an active memory
=================  ===================================================================
``recency_wins``   the statement asserted later stays active; the other is superseded
``keep_existing``  the active memory stays; the newcomer is stored superseded (rule
                   ``policy_keep_existing``), unless the newcomer is an explicit change
                   ("I moved to…") and newer, which then wins as under recency
``flag``           both stay active and an open conflict is recorded; the context
                   bundle abstains on the topic until a person resolves it
=================  ===================================================================

``episode_summary`` memories never conflict, so they take no policy.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from memsync.compile.types import MemoryKind

__all__ = ["DEFAULT_POLICIES", "ConflictPolicy", "PolicyTable"]


class ConflictPolicy(enum.StrEnum):
    """How the resolver settles a contradiction between memories of one kind."""

    RECENCY_WINS = "recency_wins"
    KEEP_EXISTING = "keep_existing"
    FLAG = "flag"


DEFAULT_POLICIES: Mapping[MemoryKind, ConflictPolicy] = MappingProxyType(
    {
        # Preferences and current state change; the latest statement is the truth.
        MemoryKind.PREFERENCE: ConflictPolicy.RECENCY_WINS,
        MemoryKind.CURRENT_STATE: ConflictPolicy.RECENCY_WINS,
        # Stable attributes: one bad extraction must not overwrite a name or employer;
        # an explicit change ("I now work at…") still wins.
        MemoryKind.PROFILE_FACT: ConflictPolicy.KEEP_EXISTING,
        # Numbers (prices, limits) are expensive to get wrong: ask a person.
        MemoryKind.FACT: ConflictPolicy.FLAG,
        # A later decision replaces an earlier one.
        MemoryKind.DECISION: ConflictPolicy.RECENCY_WINS,
    }
)


@dataclass(frozen=True, slots=True)
class PolicyTable:
    """Policy per memory kind; kinds not overridden use ``DEFAULT_POLICIES``."""

    overrides: Mapping[MemoryKind, ConflictPolicy] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if MemoryKind.EPISODE_SUMMARY in self.overrides:
            raise ValueError("episode_summary memories never conflict; remove its policy")

    @classmethod
    def from_mapping(cls, config: Mapping[str, str]) -> PolicyTable:
        """Build from plain config, e.g. ``{"fact": "recency_wins"}``.

        Raises ``ValueError`` naming the valid kinds or policies on a typo.
        """
        overrides: dict[MemoryKind, ConflictPolicy] = {}
        for kind_name, policy_name in config.items():
            try:
                kind = MemoryKind(kind_name)
            except ValueError:
                raise ValueError(
                    f"conflict policy for unknown memory kind {kind_name!r}; "
                    f"kinds: {', '.join(k.value for k in DEFAULT_POLICIES)}"
                ) from None
            try:
                overrides[kind] = ConflictPolicy(policy_name)
            except ValueError:
                raise ValueError(
                    f"memory kind {kind_name!r}: unknown conflict policy {policy_name!r}; "
                    f"policies: {', '.join(p.value for p in ConflictPolicy)}"
                ) from None
        return cls(overrides)

    def for_kind(self, kind: MemoryKind) -> ConflictPolicy:
        """Return the policy for ``kind``; raises ``KeyError`` for ``episode_summary``."""
        return self.overrides.get(kind) or DEFAULT_POLICIES[kind]
