"""Compile: derive memories from episodes. Pure: no SQL, no HTTP.

The one exception is ``memsync.compile.llm``, which talks to a model through an
injected ``httpx.Client``; it is not re-exported here so importing the pure engine never
loads an HTTP stack. See docs/compile.md for kinds, claim keys, policies and ranking.
"""

from __future__ import annotations

from memsync.compile.bundle import Bundle, RankedMemory, assemble_bundle, estimate_tokens
from memsync.compile.claims import Cardinality, ClaimKey, ClaimRegistry, ClaimRegistryError
from memsync.compile.heuristic import HeuristicCompiler
from memsync.compile.policy import DEFAULT_POLICIES, ConflictPolicy, PolicyTable
from memsync.compile.resolve import (
    ChangeSet,
    Defeat,
    OpenConflict,
    ProvenanceAddition,
    Reassertion,
    SourceEvidence,
    SourceStanding,
    StatusChange,
    Supersession,
    apply_changes,
    conflict_id,
    manual_resolution,
    memory_id,
    reconsider_losers,
    resolve,
    unsettled,
    withdraw_unsupported,
)
from memsync.compile.similarity import SimilarityThresholds, jaccard, tokens
from memsync.compile.types import (
    CandidateMemory,
    Compiler,
    ConflictStatus,
    EpisodeView,
    MemoryKind,
    MemoryStatus,
    StoredMemory,
    SupersessionRule,
    memory_key,
)

__all__ = [
    "DEFAULT_POLICIES",
    "Bundle",
    "CandidateMemory",
    "Cardinality",
    "ChangeSet",
    "ClaimKey",
    "ClaimRegistry",
    "ClaimRegistryError",
    "Compiler",
    "ConflictPolicy",
    "ConflictStatus",
    "Defeat",
    "EpisodeView",
    "HeuristicCompiler",
    "MemoryKind",
    "MemoryStatus",
    "OpenConflict",
    "PolicyTable",
    "ProvenanceAddition",
    "RankedMemory",
    "Reassertion",
    "SimilarityThresholds",
    "SourceEvidence",
    "SourceStanding",
    "StatusChange",
    "StoredMemory",
    "Supersession",
    "SupersessionRule",
    "apply_changes",
    "assemble_bundle",
    "conflict_id",
    "estimate_tokens",
    "jaccard",
    "manual_resolution",
    "memory_id",
    "memory_key",
    "reconsider_losers",
    "resolve",
    "tokens",
    "unsettled",
    "withdraw_unsupported",
]
