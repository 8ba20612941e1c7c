"""The ``compile:`` section of the configuration (the rules the resolver takes from it
are in :mod:`.rules`, so reading a configuration imports no compile module)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

from memsync.connectors.label_rules import LabelRuleSetting
from memsync.fields import empty_list

__all__ = ["DEFAULT_CACHED_MEMORIES", "DEFAULT_CHUNK_EPISODES", "CompileSettings", "LLMSettings"]

DEFAULT_CHUNK_EPISODES = 2_000
"""Episodes per compile transaction: large enough that per-transaction costs (the lock,
loading the subject's active memories) are spread thin, small enough that one subject
with 100,000 uncompiled episodes does not hold them all, and their change sets, at once."""

DEFAULT_CACHED_MEMORIES = 20_000
"""Active memories (other than episode summaries, which a compile reads only when its
candidates name them) a process keeps from its subjects' last compiles (``KnownSubjects``):
about 32 MB at the default, a memory of a 100-character statement taking some 1.6 KB
held (its content, claim, metadata and the ids of its sources; measured with
tracemalloc)."""


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LLMSettings(_Settings):
    """The model endpoint for ``compile.compiler: llm``: OpenAI-compatible chat
    completions (``protocol: openai``) or Anthropic's Messages API (``anthropic``)."""

    protocol: Literal["openai", "anthropic"] = "openai"
    base_url: str = Field(
        min_length=1,
        description="openai: e.g. https://api.openai.com/v1; anthropic: the API root, "
        "e.g. https://api.anthropic.com",
    )
    model: str = Field(min_length=1)
    api_key: SecretStr = Field(description="e.g. ${OPENAI_API_KEY}")
    batch_size: int = Field(default=8, ge=1, le=64)
    timeout_seconds: float = Field(default=60.0, gt=0, le=600)
    max_output_tokens: int = Field(
        default=4096, ge=1, description="anthropic: the answer's max_tokens (required there)"
    )
    max_concurrency: int = Field(
        default=4, ge=1, le=256, description="requests in flight at once, per process"
    )
    requests_per_minute: int | None = Field(
        default=None, ge=1, description="per process; divide the account's limit by processes"
    )
    tokens_per_minute: int | None = Field(default=None, ge=1, description="per process")
    max_attempts: int = Field(
        default=5, ge=1, le=20, description="tries per request on 429 and 5xx, the first included"
    )
    max_tokens_per_job: int | None = Field(
        default=None, ge=1, description="a compile stops partial once its requests used this many"
    )
    prompt_price_per_million: float | None = Field(
        default=None, ge=0, description="price of a million prompt tokens, for estimated_cost"
    )
    completion_price_per_million: float | None = Field(
        default=None, ge=0, description="price of a million completion tokens"
    )

    def estimated_cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        """What those tokens cost at the configured prices (``None`` without prices)."""
        if self.prompt_price_per_million is None or self.completion_price_per_million is None:
            return None
        return round(
            (
                prompt_tokens * self.prompt_price_per_million
                + completion_tokens * self.completion_price_per_million
            )
            / 1_000_000,
            6,
        )


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
    cached_memories: int = Field(
        default=DEFAULT_CACHED_MEMORIES,
        ge=0,
        le=10_000_000,
        description="active memories a process keeps from each subject's last compile "
        "for its next one, which then loads only the memories its episodes name; 0: none",
    )
    claims: dict[str, dict[str, str]] = Field(default_factory=dict)
    policies: dict[str, str] = Field(default_factory=dict)
    thresholds: dict[str, float] = Field(default_factory=dict)
    labels: list[LabelRuleSetting] = Field(
        default_factory=empty_list,
        description="sensitivity labels for the memories a compile creates: "
        "[{when: {kind: profile_fact, claim_key: 'location.*'}, add: [pii]}]",
    )

    @model_validator(mode="after")
    def _llm_needs_its_endpoint(self) -> CompileSettings:
        if self.compiler == "llm" and self.llm is None:
            raise ValueError("compiler 'llm' needs an llm: section (base_url, model, api_key)")
        return self
