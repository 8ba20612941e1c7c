"""The sync runner: windows, batches, checkpoints and run records around a connector.

A run reads each stream of a connector (:meth:`~memsync.connectors.Connector.streams`)
in turn, over a window derived from that stream's own checkpoint, maps each record to
an episode draft, and ingests the drafts in batches through
:class:`~memsync.runtime.ingest.IngestService` (the one ingest path; each batch commits
on its own), with the deletions the connector reports (tombstones, and listings of
completely read scopes). Each batch's transaction also records the run's counts and,
when the rule in :func:`~memsync.runtime.sync.policy.checkpoint_position` allows, the
stream's checkpoint: a run killed at any point shows exactly what it committed, and
the next run resumes every stream where it stands. See docs/sync.md.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection

from memsync.clock import Clock, SystemClock
from memsync.connectors import (
    DEFAULT_STREAM,
    Connector,
    ConnectorConfig,
    Cursor,
    Listing,
    Progress,
    SkipRecord,
    StopRun,
    Stream,
    Tombstone,
    Window,
)
from memsync.connectors.sessions import SessionResolution
from memsync.episode import EpisodeDraft, IngestStatus, NotCanonicalJSON
from memsync.logcontext import bound_log_context
from memsync.runtime.ingest import (
    DEFAULT_BATCH_SIZE,
    BeforeCommit,
    IngestOutcome,
    IngestService,
    IngestSummary,
)
from memsync.runtime.ingest.limits import draft_problem
from memsync.runtime.support.resolutions import SourceResolution, record_source_resolutions
from memsync.runtime.sync.labels import label_rules_of, labelled_episode
from memsync.runtime.sync.plans import (
    BackfillPlan,
    RunOwner,
    RunPlan,
    SliceReach,
    SliceRef,
    StreamOutcome,
    Tally,
)
from memsync.runtime.sync.policy import (
    RunKind,
    StreamStatus,
    checkpoint_position,
    describe_error,
    earliest_start,
    incremental_window,
    needs_attention,
    retry_at,
    status_after,
    unusable_start,
)
from memsync.runtime.sync.records import RunInterrupted, RunRecord
from memsync.runtime.sync.repository import SyncRepository
from memsync.scrub import Scrubber
from memsync.stopping import StopRequested

__all__ = ["DEFAULT_LEASE", "DEFAULT_SLICE", "BatchProgress", "SyncRunner", "pid_alive"]

DEFAULT_LEASE = timedelta(minutes=10)
DEFAULT_SLICE = timedelta(days=1)
DEFAULT_HEARTBEAT_SECONDS = 60.0

AnyConnector = Connector[Any, Any]
SliceProgress = Callable[[int, int], None]
BatchProgress = Callable[[Tally], None]
"""Called after each batch of a run commits, with the run's counts so far (``fetched``:
records read; ``committed``: stored, of which ``created``, ``duplicates``, ``revised``).
The tally goes on changing after the call: read it, do not keep it."""

log = logging.getLogger("memsync.sync")


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


@dataclass(slots=True)
class _Reading:
    """What a run's read leaves for its end: how it ended for the stream it stopped in."""

    stopped_in: StreamOutcome | None = None


ReadStreams = Callable[[uuid.UUID, RunPlan, Tally, _Reading], None]


@dataclass(slots=True)
class _WindowProgress:
    """The highest record position committed so far in the current window, and where
    the connector last said (committed) its read stands: a :class:`Progress`, from the
    stored checkpoint until the read says more. ``floor`` is where a checkpoint that
    only carries a newer :class:`Progress` stays: the stored position (or the window
    start before the first checkpoint), as a position never moves back."""

    high: datetime | None = None
    said: Progress | None = None
    floor: datetime | None = None


@dataclass(slots=True)
class _SlicePlace:
    """The backfill slice a read is in, and how far it got as last committed."""

    piece: SliceRef
    progress: SliceReach


@dataclass(slots=True)
class _Pending:
    """What the next commit writes: drafts (and their highest position, and the
    resolutions of the tickets among them, by draft), then the tombstones read since
    the last commit."""

    drafts: list[EpisodeDraft] = field(default_factory=list)
    high: datetime | None = None
    tombstones: list[Tombstone] = field(default_factory=list)
    said: Progress | None = None
    resolutions: dict[int, SessionResolution] = field(default_factory=dict)

    def add(
        self, draft: EpisodeDraft, position: datetime, resolution: SessionResolution | None
    ) -> None:
        if resolution is not None and draft.session_id is not None:
            self.resolutions[len(self.drafts)] = resolution
        self.drafts.append(draft)
        self.high = position if self.high is None else max(self.high, position)

    def changed_resolutions(self, outcomes: list[IngestOutcome]) -> list[SourceResolution]:
        """The resolutions of the drafts ``outcomes`` (theirs, in order) created or
        revised: a duplicate's was recorded when it was stored."""
        return [
            SourceResolution(draft.subject_id, draft.session_id, resolution)
            for index, resolution in self.resolutions.items()
            if outcomes[index].status in _CHANGED
            and (draft := self.drafts[index]).session_id is not None
        ]

    def tombstone_covers(self, draft: EpisodeDraft) -> bool:
        if not self.tombstones:
            return False
        key = draft.idempotency_key or ""
        return any(
            key == tombstone.key
            or (tombstone.with_children and key.startswith(tombstone.children_range[0]))
            for tombstone in self.tombstones
        )

    def clear(self) -> None:
        self.drafts, self.high, self.tombstones, self.said = [], None, [], None
        self.resolutions = {}


_CHANGED = frozenset({IngestStatus.CREATED, IngestStatus.REVISED})


class SyncRunner:
    """Runs incremental syncs and backfills of connector instances.

    Repeats: running a sync again re-reads ``[cursor - overlap, now]``; records read
    before are duplicates at ingest and store nothing. Re-running an interrupted
    backfill resumes it at its first slice not done. Conflicts: two runs of one
    connector never overlap; the second raises
    :class:`~memsync.runtime.sync.repository.RunInProgress` at once. Connector errors
    never escape: they end the run ``partial`` or ``failed`` and are in the record. A
    stop of the process (a connector's wait cut short, or a stop requested on the
    connector's sleeper seen after a batch commits) ends the run ``partial`` too,
    then raises :class:`RunInterrupted` carrying the stored record, as
    ``KeyboardInterrupt`` is re-raised once the run is stored.

    ``clock`` stamps run records and decides windows; ``heartbeat_every`` (real
    seconds, ``None``: no heartbeat thread) keeps the run's lease of ``lease`` fresh.
    Error texts and skip reasons are scrubbed of ``scrubber``'s secrets and the
    connector's own (:meth:`~memsync.connectors.base.Connector.secret_values`).
    """

    def __init__(
        self,
        runs: SyncRepository,
        ingest: IngestService,
        *,
        clock: Clock | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        lease: timedelta = DEFAULT_LEASE,
        heartbeat_every: float | None = DEFAULT_HEARTBEAT_SECONDS,
        host: str | None = None,
        pid: int | None = None,
        is_alive: Callable[[int], bool] = pid_alive,
        scrubber: Scrubber | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._clock: Clock = clock or SystemClock()
        self._batch_size = batch_size
        # Records reach the store only through the one ingest path (with whatever
        # triggers the application attached to it), ``batch_size`` at a time.
        self._ingest = ingest
        self._heartbeat_every = heartbeat_every
        # Known secrets (each connector adds its own) never reach a run record.
        self._scrubber = scrubber or Scrubber()
        self._owner = RunOwner(
            host=host or socket.gethostname(),
            pid=os.getpid() if pid is None else pid,
            lease=lease,
            pid_alive=is_alive,
        )
        self.repository = runs

    # -- the two kinds of run ----------------------------------------------------------

    def sync(
        self,
        connector: AnyConnector,
        *,
        full_refresh: bool = False,
        on_batch: BatchProgress | None = None,
    ) -> RunRecord:
        """Run one incremental sync now and return its record.

        Each stream is read in turn over ``[its checkpoint - overlap, now]`` (a stream
        without one: from ``config.start``). Its checkpoint moves forward only over
        committed episodes, never past ``now``: after every committed batch of an
        ordered stream, and to ``now`` when a stream was read to its end. A run cut
        short stops at the stream it was reading; the next run resumes every stream at
        its own checkpoint, so repeated partial runs make progress. ``full_refresh``
        reads every stream from ``config.start`` whatever its checkpoint says (keys
        keep it idempotent); checkpoints still only move forward. ``on_batch`` is
        called after each batch commits, for progress display.
        """
        config = connector.config
        now = self._clock.now()
        streams = list(connector.streams())
        checkpoints: dict[str, Cursor | None] = {}

        unusable: str | None = None

        def window_of(stream: Stream) -> Window:
            return incremental_window(checkpoints[stream.name], config.overlap, config.start, now)

        def plan(connection: Connection) -> RunPlan:
            nonlocal unusable
            names = [stream.name for stream in streams]
            stored = self.repository.checkpoints_in(connection, config.tenant, config.name, names)
            checkpoints.update(dict.fromkeys(stored) if full_refresh else stored)
            unusable = unusable_start(checkpoints, config.start, config.overlap, now)
            if unusable is not None:
                # No window can be computed from here: the run is recorded, and fails.
                return RunPlan(Window(None, now))
            return RunPlan(Window(earliest_start([window_of(s) for s in streams]), now))

        def read(run_id: uuid.UUID, decided: RunPlan, tally: Tally, reading: _Reading) -> None:
            if unusable is not None:
                # Only a person can move it: the job is not retried (needs attention).
                raise StopRun(unusable)
            for stream in streams:
                window, cursor = window_of(stream), checkpoints[stream.name]
                committed = tally.committed
                tally.progress = None
                try:
                    said = self._read_window(
                        connector,
                        stream,
                        window,
                        cursor,
                        run_id,
                        tally,
                        checkpoint=True,
                        on_batch=on_batch,
                    )
                except BaseException:
                    got_further = tally.committed > committed or tally.progressed_in(stream.name)
                    status = StreamStatus.PARTIAL if got_further else StreamStatus.FAILED
                    reading.stopped_in = StreamOutcome(stream.name, run_id, now, status)
                    raise
                end = checkpoint_position(
                    committed_high=None, window=window, ordered=stream.ordered, complete=True
                )
                self.repository.record_progress(
                    config.tenant,
                    run_id,
                    tally,
                    self._clock.now(),
                    connector=config.name,
                    stream=stream.name,
                    # With what the read said last: what its next read needs to know.
                    cursor=None if end is None else _cursor_at(end, said),
                    stream_outcome=StreamOutcome(
                        stream.name, run_id, now, StreamStatus.SUCCEEDED, complete_through=end
                    ),
                )

        kind = RunKind.FULL_REFRESH if full_refresh else RunKind.INCREMENTAL
        return self._run(connector, kind, now, plan, read)

    def backfill(
        self,
        connector: AnyConnector,
        *,
        since: datetime,
        until: datetime | None = None,
        slice_length: timedelta = DEFAULT_SLICE,
        on_slice: SliceProgress | None = None,
        on_batch: BatchProgress | None = None,
    ) -> RunRecord:
        """Re-read ``[since, until]`` (default: now) in slices and return the run record.

        Each slice is marked done only after its episodes are committed; re-running the
        same backfill resumes at the first slice not done. The incremental cursor is
        never touched. ``on_slice(done, total)`` is called at the start and after each
        slice, ``on_batch`` after each batch commits, for progress display.
        """
        config = connector.config
        now = self._clock.now()
        if until is not None and until > now:
            until = now
        if since >= (until or now):
            raise ValueError(
                f"backfill range is empty: since {since.isoformat()} is not before "
                f"{(until or now).isoformat()}"
            )
        backfill: BackfillPlan | None = None

        def plan(connection: Connection) -> RunPlan:
            nonlocal backfill
            backfill = self.repository.open_backfill(
                connection,
                tenant_id=config.tenant,
                connector=config.name,
                since=since,
                until=until,
                slice_length=slice_length,
                now=now,
            )
            return RunPlan(Window(start=backfill.since, end=backfill.until), backfill.id)

        def read(run_id: uuid.UUID, decided: RunPlan, tally: Tally, reading: _Reading) -> None:
            assert backfill is not None
            done = backfill.total_slices - len(backfill.pending)
            log.info(
                "backfill planned",
                extra={
                    "backfill_id": str(backfill.id),
                    "resumed": backfill.resumed,
                    "slices_done": done,
                    "slices_total": backfill.total_slices,
                },
            )
            if on_slice is not None:
                on_slice(done, backfill.total_slices)
            for piece in backfill.pending:
                if connector.sleeper.stop_requested:
                    # A safe point: every slice before this one is done and recorded.
                    # Empty slices commit no batch, so without this a backfill over
                    # years of nothing would run on for minutes after the signal.
                    raise StopRequested(
                        f"{connector.type} '{config.name}': stopped before slice "
                        f"{piece.start.isoformat()} ({done:,} of {backfill.total_slices:,} "
                        "slices done); the process is stopping"
                    )
                self._read_slice(connector, piece, run_id, tally, on_batch)
                done += 1
                log.info(
                    "backfill slice done",
                    extra={
                        "slice_start": piece.start.isoformat(),
                        "slice_end": piece.end.isoformat(),
                        "slices_done": done,
                        "slices_total": backfill.total_slices,
                        "counts": {"fetched": tally.fetched, "created": tally.created},
                    },
                )
                if on_slice is not None:
                    on_slice(done, backfill.total_slices)

        return self._run(connector, RunKind.BACKFILL, now, plan, read)

    # -- shared machinery --------------------------------------------------------------

    def _run(
        self,
        connector: AnyConnector,
        kind: RunKind,
        now: datetime,
        plan: Callable[[Connection], RunPlan],
        read: ReadStreams,
    ) -> RunRecord:
        config = connector.config
        run_id, decided = self.repository.start_run(
            tenant_id=config.tenant,
            connector=config.name,
            connector_type=connector.type,
            kind=kind,
            now=now,
            owner=self._owner,
            plan=plan,
        )
        # Every line logged during the run, by memsync or a connector's libraries,
        # carries the run's tenant, connector and id.
        with bound_log_context(tenant=config.tenant, connector=config.name, run_id=str(run_id)):
            record, error = self._read_and_finish(connector, kind, now, run_id, decided, read)
        if isinstance(error, KeyboardInterrupt):
            raise error
        if isinstance(error, StopRequested):
            raise RunInterrupted(record) from error
        return record

    def _read_and_finish(
        self,
        connector: AnyConnector,
        kind: RunKind,
        now: datetime,
        run_id: uuid.UUID,
        decided: RunPlan,
        read: ReadStreams,
    ) -> tuple[RunRecord, BaseException | None]:
        config = connector.config
        window = decided.window
        log.info(
            "sync run started",
            extra={
                "kind": kind.value,
                "window_start": window.start.isoformat() if window.start else None,
                "window_end": window.end.isoformat(),
            },
        )
        tally = Tally()
        reading = _Reading()
        error: BaseException | None = None
        with self._heartbeat(config.tenant, run_id):
            try:
                read(run_id, decided, tally, reading)
            except (Exception, KeyboardInterrupt) as caught:
                error = caught
                if not isinstance(caught, StopRequested):
                    # A stop cuts the run short, but the run and its source did no wrong.
                    tally.errors += 1
        finished = self._clock.now()
        record = self.repository.finish_run(
            config.tenant,
            run_id,
            tally,
            status=status_after(error, tally.committed, progressed=tally.progressed),
            error=None
            if error is None
            else self._scrub(connector)(describe_error(error, progress=tally.progress)),
            needs_attention=needs_attention(error),
            retry_at=retry_at(error, finished),
            started_at=now,
            now=finished,
            connector=config.name,
            stream_outcome=reading.stopped_in,
            finished_backfill=decided.backfill_id if error is None else None,
        )
        log.log(
            logging.INFO if error is None else logging.WARNING,
            "sync run finished",
            extra={
                "status": record.status.value,
                # Nested: "created" is a LogRecord attribute and cannot be an extra.
                "counts": record.counts(),
                "error": record.error,
                "duration_seconds": record.duration_seconds,
            },
        )
        return record, error

    def _read_slice(
        self,
        connector: AnyConnector,
        piece: SliceRef,
        run_id: uuid.UUID,
        tally: Tally,
        on_batch: BatchProgress | None,
    ) -> None:
        """Read every stream of the connector over the slice, recording after each
        committed batch how far the slice got (its page checkpoint): a slice an earlier
        run stopped in skips the streams it read completely and reads the stream it
        stopped in from its last committed position, less the overlap."""
        config = connector.config
        place = _SlicePlace(piece, piece.progress)
        for stream in connector.streams():
            if stream.name in place.progress.streams_done:
                continue
            start = piece.start
            if place.progress.stream == stream.name and place.progress.position is not None:
                # Bounded: positions and overlaps are checked (memsync.timerange).
                start = max(piece.start, place.progress.position - config.overlap)
            self._read_window(
                connector,
                stream,
                Window(start=start, end=piece.end),
                None,
                run_id,
                tally,
                checkpoint=False,
                in_slice=place,
                on_batch=on_batch,
            )
            place.progress = place.progress.finished(stream.name)
            self._record_slice(config, run_id, tally, piece, reach=place.progress)
        self._record_slice(config, run_id, tally, piece, done=True)

    def _record_slice(
        self,
        config: ConnectorConfig,
        run_id: uuid.UUID,
        tally: Tally,
        piece: SliceRef,
        *,
        reach: SliceReach | None = None,
        done: bool = False,
    ) -> None:
        """Record, with the run's counts, how far the slice got (``reach``) or that it
        is done."""
        self.repository.record_progress(
            config.tenant,
            run_id,
            tally,
            self._clock.now(),
            connector=config.name,
            slice_progress=None if reach is None else (piece, reach),
            slice_done=piece if done else None,
        )

    def _read_window(
        self,
        connector: AnyConnector,
        stream: Stream,
        window: Window,
        cursor: Cursor | None,
        run_id: uuid.UUID,
        tally: Tally,
        *,
        checkpoint: bool,
        in_slice: _SlicePlace | None = None,
        on_batch: BatchProgress | None = None,
    ) -> Progress | None:
        """Fetch one stream over the window and ingest it in batches, with the deletions
        it reports; with ``checkpoint``, an ordered stream's checkpoint moves with them,
        and ``in_slice``, how far the backfill slice got; ``on_batch`` after each commit.
        Returns the last :class:`Progress` committed (or stored before), for the
        checkpoint at the end of the stream.

        A :class:`Progress` is stored with the stream's checkpoint: at once when no record
        waits to be stored, else with the batch it joins (which holds everything read
        before it); without ``checkpoint``, a backfill, it is ignored.

        An error from the connector ends the fetch; the records and deletions it
        yielded before are still committed (they are valid), then the error is raised.
        An error while committing is raised at once: that batch rolled back and is read
        again next run. A :class:`~memsync.connectors.Listing` is applied after the
        window's last batch, when everything it lists as present is stored.
        """
        progress = _WindowProgress(floor=window.start)
        if cursor is not None:
            progress.floor = cursor.position
            if cursor.token is not None:
                progress.said = Progress(cursor.token, cursor.note)
        pending = _Pending()
        listings: list[Listing] = []
        scrub = self._scrub(connector)
        label_rules = label_rules_of(connector.config)
        records = iter(connector.fetch_stream(stream, window, cursor))
        cut_short: Exception | None = None

        def commit() -> None:
            self._commit(
                connector, stream, window, run_id, tally, pending, progress, checkpoint, in_slice
            )
            if on_batch is not None:
                on_batch(tally)

        while True:
            try:
                record = next(records)
            except StopIteration:
                break
            except Exception as error:
                cut_short = error
                break
            if isinstance(record, Tombstone):
                pending.tombstones.append(record)
                continue
            if isinstance(record, Listing):
                listings.append(record)
                continue
            if isinstance(record, Progress):
                if checkpoint:
                    pending.said = record
                    tally.progress = (
                        None if record.note is None else f"{stream.name}: {record.note}"
                    )
                    if not pending.drafts:
                        # Nothing waits to be stored: where the read stands, at once. Else
                        # it goes with the batch it joins, which stays full-sized.
                        commit()
                    if record.advanced:
                        tally.progressed_streams.add(stream.name)
                continue
            tally.fetched += 1
            try:
                draft = labelled_episode(connector, record, label_rules)
                position = connector.record_cursor(record)
                resolution = connector.resolution_of(record)
            except SkipRecord as skipped:
                tally.skip(scrub(skipped.reason))
                continue
            except (UnicodeError, NotCanonicalJSON) as error:
                # Text from the source with no UTF-8 form (a lone surrogate), or a number
                # JSON cannot hold exactly: this record cannot be stored, the rest can.
                tally.skip(scrub(f"not storable: {error}"))
                continue
            except Exception as error:
                cut_short = error
                break
            problem = draft_problem(draft)
            if problem is not None:
                # The rules every API request meets: a NUL or a too-deep payload must not
                # wedge this and every later run of the connector at this record.
                tally.skip(scrub(f"{draft.idempotency_key or draft.subject_id}: {problem}"))
                continue
            if pending.tombstone_covers(draft):
                # Deleted, then seen again in the same read: the deletion goes first.
                commit()
            pending.add(draft, position, resolution)
            if len(pending.drafts) >= self._batch_size:
                commit()
                if connector.sleeper.stop_requested:
                    # A safe point: everything read so far is committed, and so is the
                    # checkpoint. A connector that never waits stops here.
                    raise StopRequested(
                        f"{connector.type} '{connector.config.name}': stopped after a "
                        f"committed batch ({tally.committed:,} records stored); the process "
                        "is stopping"
                    )
        if pending.drafts or pending.tombstones:
            commit()
        for listing in listings:
            self._apply_listing(connector, run_id, tally, listing)
        if cut_short is not None:
            raise cut_short
        return progress.said

    def _commit(
        self,
        connector: AnyConnector,
        stream: Stream,
        window: Window,
        run_id: uuid.UUID,
        tally: Tally,
        pending: _Pending,
        progress: _WindowProgress,
        checkpoint: bool,
        in_slice: _SlicePlace | None,
    ) -> None:
        config = connector.config
        high = progress.high
        if pending.high is not None and (high is None or pending.high > high):
            high = pending.high
        position = (
            checkpoint_position(
                committed_high=high,
                window=window,
                ordered=stream.ordered,
                complete=False,
            )
            if checkpoint or in_slice is not None
            else None
        )
        said = pending.said or progress.said
        if checkpoint and said is not None and progress.floor is not None:
            # What the read said must be kept even where no record moved the position
            # (a re-read of old records hands few out): at the stored position then.
            position = progress.floor if position is None else max(position, progress.floor)
        cursor = None if position is None or not checkpoint else _cursor_at(position, said)
        reached = (
            None
            if position is None or in_slice is None
            else (in_slice.piece, in_slice.progress.reached(stream.name, position))
        )
        tenant = config.tenant
        if pending.drafts:
            # The cursor (or the slice's place) moves with the last write of the batch:
            # its tombstones, if any.
            last = not pending.tombstones
            outcomes = self._ingest.ingest(
                tenant,
                pending.drafts,
                before_commit=self._recorder(
                    config,
                    run_id,
                    tally,
                    stream.name,
                    cursor if last else None,
                    reached if last else None,
                    pending=pending,
                ),
            )
            # Committed: the counts now stand for what is stored.
            tally.add(IngestSummary.of(outcomes))
        if pending.tombstones:
            outcomes = self._ingest.tombstone(
                tenant,
                pending.tombstones,
                before_commit=self._recorder(config, run_id, tally, stream.name, cursor, reached),
            )
            tally.add(IngestSummary.of(outcomes))
        if pending.said is not None and not (pending.drafts or pending.tombstones):
            # Nothing to store, only where the read stands: its own small transaction.
            self.repository.record_progress(
                tenant,
                run_id,
                tally,
                self._clock.now(),
                connector=config.name,
                stream=stream.name,
                cursor=cursor,
            )
        progress.said = said
        if reached is not None and in_slice is not None:
            in_slice.progress = reached[1]
        pending.clear()
        progress.high = high

    def _recorder(
        self,
        config: ConnectorConfig,
        run_id: uuid.UUID,
        tally: Tally,
        stream: str,
        cursor: Cursor | None,
        reached: tuple[SliceRef, SliceReach] | None = None,
        *,
        pending: _Pending | None = None,
    ) -> BeforeCommit:
        """What an ingest transaction writes before it commits: the run's counts with its
        outcomes added, ``stream``'s checkpoint ``cursor`` when it moves, how far a
        backfill slice got (``reached``), and the resolutions of the tickets among the
        ``pending`` drafts it created or revised; all commit or roll back with it."""

        def record(connection: Connection, outcomes: list[IngestOutcome]) -> None:
            changed = [] if pending is None else pending.changed_resolutions(outcomes)
            if changed:
                # Cheap in the batch's own transaction (one statement): a ticket's
                # status and its resolution are stored together, or neither is.
                record_source_resolutions(
                    connection, config.tenant, changed, self._clock.now(), connector=config.name
                )
            counted = replace(tally, skipped_reasons=list(tally.skipped_reasons))
            counted.add(IngestSummary.of(outcomes))
            self.repository.record_progress(
                config.tenant,
                run_id,
                counted,
                self._clock.now(),
                connector=config.name,
                stream=stream,
                cursor=cursor,
                slice_progress=reached,
                connection=connection,
            )

        return record

    def _scrub(self, connector: AnyConnector) -> Scrubber:
        return self._scrubber.extended(connector.secret_values())

    def _apply_listing(
        self, connector: AnyConnector, run_id: uuid.UUID, tally: Tally, listing: Listing
    ) -> None:
        """Tombstone the stored records of a completely read scope that it did not list:
        one read of the scope's keys (a range of the key index), then the tombstones in
        batches, whatever the scope's size."""
        config = connector.config
        live = self._ingest.live_keys(config.tenant, listing.scope)
        gone = [key for key in live if listing.gone(key)]
        if not gone:
            return  # the usual case: a read that finds nothing deleted writes nothing
        tombstoned = self._ingest.tombstone(
            config.tenant,
            [Tombstone(key) for key in gone],
            before_commit=self._recorder(config, run_id, tally, DEFAULT_STREAM, None),
        )
        tally.add(IngestSummary.of(tombstoned))

    @contextmanager
    def _heartbeat(self, tenant_id: str, run_id: uuid.UUID) -> Iterator[None]:
        """Refresh the run's lease from a background thread while the body runs.

        Batches refresh it too; the thread covers long silences (a source that is slow
        or rate limiting for longer than the lease between two batches).
        """
        interval = self._heartbeat_every
        if interval is None:
            yield
            return
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    if not self.repository.heartbeat(tenant_id, run_id, self._clock.now()):
                        return
                except Exception:  # the next beat or batch tries again
                    log.warning(
                        "sync run heartbeat failed", extra={"run_id": str(run_id)}, exc_info=True
                    )

        thread = threading.Thread(target=beat, name=f"memsync-heartbeat-{run_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def _cursor_at(position: datetime, said: Progress | None) -> Cursor:
    """A checkpoint at ``position`` carrying what the read last said of where it stands."""
    if said is None:
        return Cursor(position=position)
    return Cursor(position=position, token=said.token, note=said.note)
