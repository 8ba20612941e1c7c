"""Ingest: the one path by which episodes enter the store (API, CLI and sync runner).

- :mod:`.service` — :class:`IngestService`: batches, rounds, outcomes, the batch hook;
- :mod:`.statements` — its statements on episodes, one per batch.
"""

from __future__ import annotations

from memsync.runtime.ingest.service import (
    DEFAULT_BATCH_SIZE,
    BatchCommitted,
    BeforeCommit,
    IngestService,
    IngestSummary,
)
from memsync.runtime.ingest.statements import IngestOutcome, delete_subject_episodes

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "BatchCommitted",
    "BeforeCommit",
    "IngestOutcome",
    "IngestService",
    "IngestSummary",
    "delete_subject_episodes",
]
