"""What a run reports once stored: its record, and the counters it keeps (their running
counts, :class:`~memsync.runtime.sync.plans.Tally`, are with what a run hands the
repository as it goes)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from memsync.runtime.sync.policy import RunKind, RunStatus
from memsync.stopping import StopRequested

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = ["COUNTERS", "MAX_SKIPPED_REASONS", "RunInterrupted", "RunRecord"]

#: The counters of a run, in the order records, logs and tables show them.
COUNTERS = ("fetched", "created", "duplicates", "revised", "tombstoned", "skipped", "errors")
#: Skip reasons kept per run: enough to diagnose, bounded for a source full of bad records.
MAX_SKIPPED_REASONS = 20


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
    tombstoned: int
    skipped: int
    errors: int
    error: str | None
    skipped_reasons: list[str]
    backfill_id: uuid.UUID | None
    started_at: datetime
    finished_at: datetime | None
    duration_seconds: float | None
    needs_attention: bool = False
    """The error is one a person must fix; retrying will not help."""
    retry_at: datetime | None = None
    """The run ended on a rate limit the source said resets at this moment."""

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
            tombstoned=row.tombstoned,
            skipped=row.skipped,
            errors=row.errors,
            error=row.error,
            skipped_reasons=list(row.skipped_reasons or []),
            backfill_id=row.backfill_id,
            started_at=row.started_at,
            finished_at=row.finished_at,
            duration_seconds=row.duration_seconds,
            needs_attention=bool(row.needs_attention),
            retry_at=row.retry_at,
        )

    def counts(self) -> dict[str, int]:
        """The counters by name, in :data:`COUNTERS` order."""
        return {name: getattr(self, name) for name in COUNTERS}

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values, as ``--json`` and the API print them."""
        dumped: dict[str, Any] = _run_record_adapter().dump_python(self, mode="json")
        return dumped


@cache
def _run_record_adapter() -> TypeAdapter[RunRecord]:
    # Built on first use: building its schema costs a command that prints no JSON
    # (``runs list``, ``sync`` for a person) a few milliseconds of start-up.
    from pydantic import TypeAdapter

    return TypeAdapter(RunRecord)


class RunInterrupted(StopRequested):
    """The run stopped because its process is stopping. It is stored, as ``record``:
    ``partial``, its error saying where it stopped, its committed episodes and cursor
    kept; the next run of the connector reads on from there."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__(f"sync run {record.id}: {record.error}")
        self.record = record
