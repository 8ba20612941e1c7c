"""The ``compile:`` section of the configuration, and the rules the resolver takes from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from memsync.compile.claims import ClaimRegistry
from memsync.compile.policy import PolicyTable
from memsync.compile.similarity import SimilarityThresholds
from memsync.compile.types import MemoryKind

__all__ = ["DEFAULT_CHUNK_EPISODES", "CompileRules", "CompileSettings", "LLMSettings"]

DEFAULT_CHUNK_EPISODES = 2_000
"""Episodes per compile transaction: large enough that per-transaction costs (the lock,
loading the subject's active memories) are spread thin, small enough that one subject
with 100,000 uncompiled episodes does not hold them all, and their change sets, at once."""


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMSettings(_Settings):
    """An OpenAI-compatible chat-completions endpoint for ``compile.compiler: llm``."""

    base_url: str = Field(min_length=1, description="e.g. https://api.openai.com/v1")
    model: str = Field(min_length=1)
    api_key: SecretStr = Field(description="e.g. ${OPENAI_API_KEY}")
    batch_size: int = Field(default=8, ge=1, le=64)
    timeout_seconds: float = Field(default=60.0, gt=0, le=600)


class CompileSettings(_Settings):
    """The compile engine: which compiler, and the claim keys, policies and thresholds
    the resolver uses (see docs/compile.md)."""

    compiler: Literal["heuristic", "llm"] = "heuristic"
    llm: LLMSettings | None = None
    chunk_episodes: int = Field(
        default=DEFAULT_CHUNK_EPISODES,
        ge=1,
        le=100_000,
        description="episodes compiled per transaction; bounds a compile's memory",
    )
    claims: dict[str, dict[str, str]] = Field(default_factory=dict)
    policies: dict[str, str] = Field(default_factory=dict)
    thresholds: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _llm_needs_its_endpoint(self) -> CompileSettings:
        if self.compiler == "llm" and self.llm is None:
            raise ValueError("compiler 'llm' needs an llm: section (base_url, model, api_key)")
        return self


@dataclass(frozen=True)
class CompileRules:
    """The configurable parts of compilation: claim keys, policies and thresholds."""

    registry: ClaimRegistry = field(default_factory=ClaimRegistry.default)
    policies: PolicyTable = field(default_factory=PolicyTable)
    thresholds: SimilarityThresholds = field(default_factory=SimilarityThresholds)

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
        )
