"""Compiling: episodes not yet compiled at their revision become memories, as a set.

- :mod:`.settings` — the ``compile:`` configuration and the resolver's rules;
- :mod:`.episodes` — which episodes are uncompiled, and marking them compiled;
- :mod:`.memories` — loading memories for the resolver and applying its change sets;
- :mod:`.recorder` — the LLM compiler's recorded extractions;
- :mod:`.service` — :class:`CompileService`, the one compile path;
- :mod:`.triggers` — what enqueues compile jobs (every N episodes, schedules).
"""

from __future__ import annotations

from memsync.runtime.compiling.recorder import SqlExtractionRecorder
from memsync.runtime.compiling.service import (
    CompileResult,
    CompileService,
    CompileSummary,
    ConflictNotFound,
    ConflictResolution,
    result_summary,
)
from memsync.runtime.compiling.settings import (
    DEFAULT_CHUNK_EPISODES,
    CompileRules,
    CompileSettings,
    LLMSettings,
)
from memsync.runtime.compiling.triggers import (
    COMPILE_JOB,
    EVERY_N_TRIGGER,
    EveryNEpisodes,
    enqueue_uncompiled,
)

__all__ = [
    "COMPILE_JOB",
    "DEFAULT_CHUNK_EPISODES",
    "EVERY_N_TRIGGER",
    "CompileResult",
    "CompileRules",
    "CompileService",
    "CompileSettings",
    "CompileSummary",
    "ConflictNotFound",
    "ConflictResolution",
    "EveryNEpisodes",
    "LLMSettings",
    "SqlExtractionRecorder",
    "enqueue_uncompiled",
    "result_summary",
]
