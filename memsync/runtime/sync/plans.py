"""What a run hands the repository as it goes: the process that owns it and what it
decided at its start, its running counts, how it ended for each stream, a backfill's
slices and how far each got, and what forgetting a connector removed of its sync state.

Apart from :mod:`.repository` because only running, backfilling and forgetting use
these: reading where a connector stands and its run records (``memsync state show``,
``runs list``, their API routes) defines none of them. Each dataclass costs about half
a millisecond to define (its methods are generated and compiled when the class is
made), and a command's start-up paid for nine.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from memsync.connectors.checkpoints import Window
from memsync.runtime.sync.policy import StreamStatus
from memsync.runtime.sync.records import COUNTERS, MAX_SKIPPED_REASONS

if TYPE_CHECKING:
    from memsync.runtime.ingest import IngestSummary

__all__ = [
    "BackfillPlan",
    "RunOwner",
    "RunPlan",
    "SliceReach",
    "SliceRef",
    "SliceState",
    "StreamOutcome",
    "SyncStateForgotten",
    "Tally",
]


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
class RunOwner:
    """The process starting a run, and how long its heartbeat stays valid."""

    host: str
    pid: int
    lease: timedelta
    pid_alive: Callable[[int], bool]


@dataclass(frozen=True, slots=True)
class SyncStateForgotten:
    """What forgetting a connector removed of its sync state."""

    streams: int
    """Stream checkpoints (with how their last runs ended)."""
    runs: int
    backfills: int


@dataclass(frozen=True, slots=True)
class StreamOutcome:
    """How a run ended for one stream; ``complete_through`` is set when it read the
    stream to its end (the end of that window)."""

    stream: str
    run_id: uuid.UUID
    run_at: datetime
    status: StreamStatus
    complete_through: datetime | None = None


@dataclass(frozen=True, slots=True)
class SliceReach:
    """How far a backfill slice got: the streams it read completely, and in ``stream``,
    the one it was reading, the highest position committed (an ordered stream's page
    checkpoint; ``None``: nothing committed there yet). A resumed slice skips the
    streams done and reads ``stream`` from ``position`` less the overlap."""

    streams_done: tuple[str, ...] = ()
    stream: str | None = None
    position: datetime | None = None

    def reached(self, stream: str, position: datetime) -> SliceReach:
        return SliceReach(self.streams_done, stream, position)

    def finished(self, stream: str) -> SliceReach:
        return SliceReach((*self.streams_done, stream))

    def to_json(self) -> dict[str, Any]:
        return {
            "streams_done": list(self.streams_done),
            "stream": self.stream,
            "position": None if self.position is None else self.position.isoformat(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> SliceReach:
        if not data:
            return cls()
        position = data.get("position")
        return cls(
            tuple(data.get("streams_done") or ()),
            data.get("stream"),
            None if position is None else datetime.fromisoformat(position),
        )


@dataclass(frozen=True, slots=True)
class SliceRef:
    """One backfill slice still to read, and how far an earlier run got in it."""

    backfill_id: uuid.UUID
    start: datetime
    end: datetime
    progress: SliceReach = SliceReach()


@dataclass(frozen=True, slots=True)
class SliceState:
    """One slice of a backfill as ``runs show`` reports it."""

    start: datetime
    end: datetime
    done_at: datetime | None
    progress: SliceReach


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """The backfill a run works on: its range, and the slices not done yet."""

    id: uuid.UUID
    since: datetime
    until: datetime
    resumed: bool
    total_slices: int
    pending: list[SliceRef]


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a starting run decided inside its start transaction."""

    window: Window
    backfill_id: uuid.UUID | None = None
