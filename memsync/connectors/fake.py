"""A connector over an in-memory list of records, for runner tests and the demo's
scripted team chat (``memsync demo``).

Like httpx's ``MockTransport``: it implements the real contract, so a runner test that
uses it exercises the same code path as production. Faults are scripted per record:
``connector.fail_at("r3", RateLimitExhausted(...))`` makes ``fetch`` raise that error
when it reaches ``r3`` (after yielding the records before it), a given number of times.
Deletions too: ``connector.delete("r3", at=when)`` removes the record and makes a fetch
whose window holds ``when`` report its tombstone; with ``list_windows: true`` in the
config, every fetch also lists its window as completely read. Streams: with
``streams: [a, b]`` in the config, a record's ``stream`` says which one it belongs to;
each stream is ordered and read on its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Literal

from pydantic import Field

from memsync.connectors.base import (
    DEFAULT_STREAM,
    Connector,
    Cursor,
    Deletion,
    KeyPolicy,
    Listing,
    Stream,
    Window,
)
from memsync.connectors.config import ConnectorConfig, SubjectTemplateField
from memsync.connectors.errors import ConnectorError, SkipRecord
from memsync.episode import JSONObject, KeyScope, Tombstone
from memsync.stopping import Sleeper

__all__ = ["FakeConfig", "FakeConnector", "FakeRecord"]


class FakeConfig(ConnectorConfig):
    """Config of the fake connector. ``list_windows``: after its records, a fetch
    yields a :class:`Listing` of every record of the stream that occurred in the
    window. ``streams``: the names of its streams, read in this order."""

    type: Literal["fake"] = "fake"
    list_windows: bool = False
    streams: list[str] = Field(default=[DEFAULT_STREAM], min_length=1)


@dataclass(frozen=True, slots=True)
class FakeRecord:
    """One fake source record: a stable ``id``, an update time (the cursor), editable
    content, the stream it belongs to, and when it occurred (``None``: its update
    time; a replayed record is read at one time and says it happened at another)."""

    id: str
    updated_at: datetime
    body: str = ""
    fields: Mapping[str, SubjectTemplateField] = field(default_factory=dict)
    stream: str = DEFAULT_STREAM
    occurred_at: datetime | None = None


@dataclass(slots=True)
class _Fault:
    error: ConnectorError
    remaining: int


class FakeConnector(Connector[FakeConfig, FakeRecord]):
    """Records from a list; faults from a script. Fetch calls are recorded in ``fetches``."""

    type = "fake"
    key_policy = KeyPolicy.IDENTITY
    key_rationale = (
        "A fake record has a stable id, so the key is the id alone: an edited body is a "
        "revision of the same episode, and re-reading an unchanged record stores nothing."
    )
    deletions = (
        "A record removed with delete() is reported as a tombstone by every fetch whose "
        "window holds its deletion time; with list_windows, a fetch also lists its window, "
        "so a record that is simply gone from the list is found too."
    )
    config_model = FakeConfig
    example_key = "fake:demo:record:r1"
    subject_fields: ClassVar[frozenset[str]] = frozenset({"id", "group"})
    ordered_by_cursor = True  # each stream is read sorted by (updated_at, id)

    def __init__(
        self,
        config: FakeConfig,
        records: Iterable[FakeRecord] = (),
        *,
        sleeper: Sleeper | None = None,
    ) -> None:
        super().__init__(config, sleeper=sleeper)
        self.records: list[FakeRecord] = list(records)
        self.fetches: list[tuple[Window, Cursor | None]] = []
        self._faults: dict[str, _Fault] = {}
        self._skips: dict[str, str] = {}
        self._deleted: dict[str, tuple[str, datetime]] = {}

    def delete(self, record_id: str, *, at: datetime) -> None:
        """Remove the record from the source at ``at``; fetches report its tombstone.
        Adding a record with its id again later is the record re-created."""
        streams = {record.stream for record in self.records if record.id == record_id}
        self.records = [record for record in self.records if record.id != record_id]
        self._deleted[record_id] = (min(streams, default=DEFAULT_STREAM), at)

    def fail_at(self, record_id: str, error: ConnectorError, *, times: int = 1) -> None:
        """Make the next ``times`` fetches raise ``error`` on reaching ``record_id``."""
        self._faults[record_id] = _Fault(error=error, remaining=times)

    def skip(self, record_id: str, reason: str) -> None:
        """Make ``to_episode`` raise :class:`SkipRecord` with ``reason`` for this record."""
        self._skips[record_id] = reason

    def streams(self) -> tuple[Stream, ...]:
        return tuple(Stream(name, ordered=self.ordered_by_cursor) for name in self.config.streams)

    def fetch(self, window: Window, cursor: Cursor | None) -> Iterator[FakeRecord | Deletion]:
        """Every stream in turn: the records whose ``updated_at`` is in the window,
        oldest first, then the tombstones of records deleted in it (and the stream's
        listing)."""
        for stream in self.config.streams:
            yield from self._read(stream, window, cursor)

    def fetch_stream(
        self, stream: Stream, window: Window, cursor: Cursor | None
    ) -> Iterator[FakeRecord | Deletion]:
        """One stream, as :meth:`fetch` reads it; with a single stream, :meth:`fetch`
        itself (which tests override to script a read)."""
        if len(self.config.streams) == 1:
            return self.fetch(window, cursor)
        return self._read(stream.name, window, cursor)

    def _read(
        self, stream: str, window: Window, cursor: Cursor | None
    ) -> Iterator[FakeRecord | Deletion]:
        self.fetches.append((window, cursor))
        present: set[str] = set()
        of_stream = [record for record in self.records if record.stream == stream]
        for record in sorted(of_stream, key=lambda r: (r.updated_at, r.id)):
            if not window.contains(record.updated_at):
                continue
            fault = self._faults.get(record.id)
            if fault is not None and fault.remaining > 0:
                fault.remaining -= 1
                raise fault.error
            present.add(self.idempotency_key(record))
            yield record
        live = {record.id for record in self.records}
        for record_id, (deleted_from, at) in sorted(self._deleted.items()):
            if deleted_from == stream and record_id not in live and window.contains(at):
                yield Tombstone(self._key(record_id, stream))
        if self.config.list_windows:
            prefix = self._key("", stream)
            scope = KeyScope(prefix, occurred_from=window.start, occurred_to=window.end)
            yield Listing(scope, frozenset(present))

    def idempotency_key(self, record: FakeRecord) -> str:
        return self._key(record.id, record.stream)

    def _key(self, record_id: str, stream: str) -> str:
        # Records of a named stream have keys of their own, so a stream's listing
        # covers no other stream's records.
        within = "" if stream == DEFAULT_STREAM else f"{stream}:"
        return f"fake:{self.config.name}:{within}record:{record_id}"

    def record_cursor(self, record: FakeRecord) -> datetime:
        return record.updated_at

    def subject_values(self, record: FakeRecord) -> Mapping[str, SubjectTemplateField]:
        if record.id in self._skips:
            raise SkipRecord(self._skips[record.id])
        return {"id": record.id, **record.fields}

    def episode_type(self, record: FakeRecord) -> str:
        return "fake.record"

    def occurred_at(self, record: FakeRecord) -> datetime:
        return record.occurred_at or record.updated_at

    def payload(self, record: FakeRecord) -> JSONObject:
        return {"id": record.id, "body": record.body}
