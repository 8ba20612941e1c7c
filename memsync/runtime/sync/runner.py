"""The sync runner: windows, batches, checkpoints and run records around a connector.

A run reads one window from a connector, maps each record to an episode draft, and
ingests the drafts in batches through :class:`~memsync.runtime.ingest.IngestService`
(the one ingest path; each batch commits on its own). Each batch's transaction also
records the run's counts and, when the rule in :func:`~memsync.runtime.sync.policy.
checkpoint_position` allows, the cursor: a run killed at any point shows exactly
what it committed. See docs/sync.md.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Connection
from structlog.contextvars import bound_contextvars

from memsync.clock import Clock, SystemClock
from memsync.connectors import Connector, Cursor, SkipRecord, Window
from memsync.episode import EpisodeDraft
from memsync.runtime.ingest import (
    DEFAULT_BATCH_SIZE,
    IngestOutcome,
    IngestService,
    IngestSummary,
)
from memsync.runtime.ingest.limits import draft_problem
from memsync.runtime.sync.policy import (
    RunKind,
    checkpoint_position,
    describe_error,
    incremental_window,
    needs_attention,
    retry_at,
    status_after,
)
from memsync.runtime.sync.records import RunRecord, Tally
from memsync.runtime.sync.repository import (
    BackfillPlan,
    RunOwner,
    RunPlan,
    SliceRef,
    SyncRepository,
)
from memsync.scrub import Scrubber

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
class _WindowProgress:
    """The highest record position committed so far in the current window."""

    high: datetime | None = None


class SyncRunner:
    """Runs incremental syncs and backfills of connector instances.

    Repeats: running a sync again re-reads ``[cursor - overlap, now]``; records read
    before are duplicates at ingest and store nothing. Re-running an interrupted
    backfill resumes it at its first slice not done. Conflicts: two runs of one
    connector never overlap; the second raises
    :class:`~memsync.runtime.sync.repository.RunInProgress` at once. Connector errors
    never escape: they end the run ``partial`` or ``failed`` and are in the record.

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

        The window is ``[cursor - overlap, now]`` (first run: from ``config.start``).
        The cursor moves forward only over committed episodes, never past ``now``.
        ``full_refresh`` reads from ``config.start`` whatever the cursor says (keys keep
        it idempotent); the cursor still only moves forward. ``on_batch`` is called after
        each batch commits, for progress display.
        """
        config = connector.config
        now = self._clock.now()
        start_cursor: Cursor | None = None

        def plan(connection: Connection) -> RunPlan:
            nonlocal start_cursor
            if not full_refresh:
                start_cursor = self.repository.cursor_in(connection, config.tenant, config.name)
            return RunPlan(incremental_window(start_cursor, config.overlap, config.start, now))

        def read(run_id: uuid.UUID, decided: RunPlan, tally: Tally) -> Cursor:
            self._read_window(
                connector,
                decided.window,
                start_cursor,
                run_id,
                tally,
                checkpoint=True,
                on_batch=on_batch,
            )
            return Cursor(position=decided.window.end)

        return self._run(connector, RunKind.INCREMENTAL, now, plan, read)

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

        def read(run_id: uuid.UUID, decided: RunPlan, tally: Tally) -> None:
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
        read: Callable[[uuid.UUID, RunPlan, Tally], Cursor | None],
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
        with bound_contextvars(tenant=config.tenant, connector=config.name, run_id=str(run_id)):
            record, error = self._read_and_finish(connector, kind, now, run_id, decided, read)
        if isinstance(error, KeyboardInterrupt):
            raise error
        return record

    def _read_and_finish(
        self,
        connector: AnyConnector,
        kind: RunKind,
        now: datetime,
        run_id: uuid.UUID,
        decided: RunPlan,
        read: Callable[[uuid.UUID, RunPlan, Tally], Cursor | None],
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
        error: BaseException | None = None
        final_cursor: Cursor | None = None
        with self._heartbeat(config.tenant, run_id):
            try:
                final_cursor = read(run_id, decided, tally)
            except (Exception, KeyboardInterrupt) as caught:
                error = caught
                tally.errors += 1
        finished = self._clock.now()
        record = self.repository.finish_run(
            config.tenant,
            run_id,
            tally,
            status=status_after(error, tally.committed),
            error=None if error is None else self._scrub(connector)(describe_error(error)),
            needs_attention=needs_attention(error),
            retry_at=retry_at(error, finished),
            started_at=now,
            now=finished,
            connector=config.name,
            cursor=final_cursor,
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
        window = Window(start=piece.start, end=piece.end)
        self._read_window(
            connector, window, None, run_id, tally, checkpoint=False, on_batch=on_batch
        )
        self.repository.record_progress(
            connector.config.tenant,
            run_id,
            tally,
            self._clock.now(),
            connector=connector.config.name,
            slice_done=piece,
        )

    def _read_window(
        self,
        connector: AnyConnector,
        window: Window,
        cursor: Cursor | None,
        run_id: uuid.UUID,
        tally: Tally,
        *,
        checkpoint: bool,
        on_batch: BatchProgress | None = None,
    ) -> None:
        """Fetch the window and ingest it in batches (``on_batch`` after each commits).

        An error from the connector ends the fetch; the records it yielded before are
        still committed (they are valid), then the error is raised. An error while
        committing is raised at once: that batch rolled back and is read again next run.
        """
        progress = _WindowProgress()
        scrub = self._scrub(connector)
        batch: list[EpisodeDraft] = []
        batch_high: datetime | None = None
        records = iter(connector.fetch(window, cursor))
        cut_short: Exception | None = None

        def commit() -> None:
            self._commit(connector, window, run_id, tally, batch, batch_high, progress, checkpoint)
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
            tally.fetched += 1
            try:
                draft = connector.to_episode(record)
                position = connector.record_cursor(record)
            except SkipRecord as skipped:
                tally.skip(scrub(skipped.reason))
                continue
            except UnicodeError as error:
                # Text from the source with no UTF-8 form (a lone surrogate): this record
                # cannot be stored, the rest of the run can.
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
            batch.append(draft)
            batch_high = position if batch_high is None else max(batch_high, position)
            if len(batch) >= self._batch_size:
                commit()
                batch, batch_high = [], None
        if batch:
            commit()
        if cut_short is not None:
            raise cut_short

    def _commit(
        self,
        connector: AnyConnector,
        window: Window,
        run_id: uuid.UUID,
        tally: Tally,
        batch: list[EpisodeDraft],
        batch_high: datetime | None,
        progress: _WindowProgress,
        checkpoint: bool,
    ) -> None:
        config = connector.config
        high = progress.high
        if batch_high is not None and (high is None or batch_high > high):
            high = batch_high
        position = (
            checkpoint_position(
                committed_high=high,
                window=window,
                ordered=connector.ordered_by_cursor,
                complete=False,
            )
            if checkpoint
            else None
        )

        def record(connection: Connection, outcomes: list[IngestOutcome]) -> None:
            counted = replace(tally, skipped_reasons=list(tally.skipped_reasons))
            counted.add(IngestSummary.of(outcomes))
            self.repository.record_progress(
                config.tenant,
                run_id,
                counted,
                self._clock.now(),
                connector=config.name,
                cursor=None if position is None else Cursor(position=position),
                connection=connection,
            )

        outcomes = self._ingest.ingest(config.tenant, batch, before_commit=record)
        # Committed: the counts and the high mark now stand for what is stored.
        tally.add(IngestSummary.of(outcomes))
        progress.high = high

    def _scrub(self, connector: AnyConnector) -> Scrubber:
        return self._scrubber.extended(connector.secret_values())

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
