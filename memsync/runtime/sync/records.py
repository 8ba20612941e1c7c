"""What a run reports: its counters while it runs and its record once stored."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

from memsync.runtime.sync.policy import RunKind, RunStatus
from memsync.stopping import StopRequested

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from memsync.runtime.ingest import IngestSummary

__all__ = ["COUNTERS", "MAX_SKIPPED_REASONS", "RunInterrupted", "RunRecord", "Tally"]

#: The counters of a run, in the order records, logs and tables show them.
COUNTERS = ("fetched", "created", "duplicates", "revised", "tombstoned", "skipped", "errors")
#: Skip reasons kept per run: enough to diagnose, bounded for a source full of bad records.
MAX_SKIPPED_REASONS = 20


@dataclass(slots=True)
class Tally:
    """Running counts of one run. ``committed`` counts drafts in committed batches and
    records found deleted (``tombstoned``)."""

    fetched: int = 0
    created: int = 0
    duplicates: int = 0
    revised: int = 0
    tombstoned: int = 0
    skipped: int = 0
    errors: int = 0
    skipped_reasons: list[str] = field(default_factory=list)
    #: Where the stream being read stands, as its connector last said it (a
    #: :class:`~memsync.connectors.Progress` note, after the stream's name); not stored
    #: as a counter: the run record's error and the stream's checkpoint carry it.
    progress: str | None = None
    #: The streams in which a :class:`~memsync.connectors.Progress` that got further was
    #: committed: a run cut short that stored no record but moved a read on is ``partial``.
    progressed_streams: set[str] = field(default_factory=set)

    @property
    def progressed(self) -> bool:
        return bool(self.progressed_streams)

    def progressed_in(self, stream: str) -> bool:
        return stream in self.progressed_streams

    @property
    def committed(self) -> int:
        return self.created + self.duplicates + self.revised + self.tombstoned

    def add(self, summary: IngestSummary) -> None:
        self.created += summary.created
        self.duplicates += summary.duplicates
        self.revised += summary.revised
        self.tombstoned += summary.tombstoned

    def skip(self, reason: str) -> None:
        self.skipped += 1
        if len(self.skipped_reasons) < MAX_SKIPPED_REASONS:
            self.skipped_reasons.append(reason)

    def columns(self) -> dict[str, Any]:
        """The counters as ``sync_runs`` column values."""
        columns: dict[str, Any] = {name: getattr(self, name) for name in COUNTERS}
        return {**columns, "skipped_reasons": list(self.skipped_reasons)}


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
