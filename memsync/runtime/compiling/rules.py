"""The rules the resolver takes from the ``compile:`` section of the configuration."""

from __future__ import annotations

from dataclasses import dataclass, field

from memsync.compile.claims import ClaimRegistry
from memsync.compile.policy import PolicyTable
from memsync.compile.sensitivity import LabelRule
from memsync.compile.similarity import SimilarityThresholds
from memsync.compile.types import MemoryKind
from memsync.runtime.compiling.settings import CompileSettings

__all__ = ["CompileRules"]


@dataclass(frozen=True)
class CompileRules:
    """The configurable parts of compilation: claim keys, policies and thresholds."""

    registry: ClaimRegistry = field(default_factory=ClaimRegistry.default)
    policies: PolicyTable = field(default_factory=PolicyTable)
    thresholds: SimilarityThresholds = field(default_factory=SimilarityThresholds)
    labels: tuple[LabelRule, ...] = ()
    """Sensitivity labels given to the memories a compile creates, by what they are
    (``kind``, ``claim_key``, ``content``, ``metadata.…``)."""

    @classmethod
    def from_settings(cls, settings: CompileSettings) -> CompileRules:
        """Build from the ``compile:`` section of the configuration file.

        Raises ``ValueError`` naming the unknown kind, policy or claim key.
        """
        thresholds = settings.thresholds
        default_threshold = thresholds.get("default")
        return cls(
            registry=ClaimRegistry.default().extended(settings.claims),
            policies=PolicyTable.from_mapping(settings.policies),
            thresholds=SimilarityThresholds(
                **({"default": float(default_threshold)} if default_threshold is not None else {}),
                per_kind={
                    MemoryKind(kind): float(value)
                    for kind, value in thresholds.items()
                    if kind != "default"
                },
            ),
            labels=tuple(LabelRule(rule.when, tuple(rule.add)) for rule in settings.labels),
        )
