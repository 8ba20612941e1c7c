"""What a run reports: its counters while it runs and its record once stored."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memsync.runtime.ingest import IngestSummary
from memsync.runtime.sync.policy import RunKind, RunStatus

__all__ = ["MAX_SKIPPED_REASONS", "RunRecord", "Tally"]

#: Skip reasons kept per run: enough to diagnose, bounded for a source full of bad records.
MAX_SKIPPED_REASONS = 20


@dataclass(slots=True)
class Tally:
    """Running counts of one run. ``committed`` counts drafts in committed batches."""

    fetched: int = 0
    created: int = 0
    duplicates: int = 0
    revised: int = 0
    skipped: int = 0
    errors: int = 0
    skipped_reasons: list[str] = field(default_factory=list)

    @property
    def committed(self) -> int:
        return self.created + self.duplicates + self.revised

    def add(self, summary: IngestSummary) -> None:
        self.created += summary.created
        self.duplicates += summary.duplicates
        self.revised += summary.revised

    def skip(self, reason: str) -> None:
        self.skipped += 1
        if len(self.skipped_reasons) < MAX_SKIPPED_REASONS:
            self.skipped_reasons.append(reason)

    def columns(self) -> dict[str, Any]:
        """The counters as ``sync_runs`` column values."""
        return {
            "fetched": self.fetched,
            "created": self.created,
            "duplicates": self.duplicates,
            "revised": self.revised,
            "skipped": self.skipped,
            "errors": self.errors,
            "skipped_reasons": list(self.skipped_reasons),
        }


@dataclass(frozen=True, slots=True)
class RunRecord:
    """One stored run: which connector, which window, what it did and how it ended."""

    id: uuid.UUID
    tenant_id: str
    connector: str
    connector_type: str
    kind: RunKind
    window_start: datetime | None
    window_end: datetime
    status: RunStatus
    fetched: int
    created: int
    duplicates: int
    revised: int
    skipped: int
    errors: int
    error: str | None
    skipped_reasons: list[str]
    backfill_id: uuid.UUID | None
    started_at: datetime
    finished_at: datetime | None
    duration_seconds: float | None

    @classmethod
    def from_row(cls, row: Any) -> RunRecord:
        return cls(
            id=row.id,
            tenant_id=row.tenant_id,
            connector=row.connector,
            connector_type=row.connector_type,
            kind=RunKind(row.kind),
            window_start=row.window_start,
            window_end=row.window_end,
            status=RunStatus(row.status),
            fetched=row.fetched,
            created=row.created,
            duplicates=row.duplicates,
            revised=row.revised,
            skipped=row.skipped,
            errors=row.errors,
            error=row.error,
            skipped_reasons=list(row.skipped_reasons or []),
            backfill_id=row.backfill_id,
            started_at=row.started_at,
            finished_at=row.finished_at,
            duration_seconds=row.duration_seconds,
        )

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values, as ``--json`` and the API print them."""
        return {
            "id": str(self.id),
            "tenant_id": self.tenant_id,
            "connector": self.connector,
            "connector_type": self.connector_type,
            "kind": self.kind.value,
            "window_start": self.window_start.isoformat() if self.window_start else None,
            "window_end": self.window_end.isoformat(),
            "status": self.status.value,
            "fetched": self.fetched,
            "created": self.created,
            "duplicates": self.duplicates,
            "revised": self.revised,
            "skipped": self.skipped,
            "errors": self.errors,
            "error": self.error,
            "skipped_reasons": list(self.skipped_reasons),
            "backfill_id": str(self.backfill_id) if self.backfill_id else None,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "duration_seconds": self.duration_seconds,
        }
