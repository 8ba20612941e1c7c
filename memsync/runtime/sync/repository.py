"""Run records, stream checkpoints and backfill checkpoints in the store.

Every statement is scoped to a tenant. The invariants live in the schema: one
``running`` run per connector (partial unique index), one ``open`` backfill per
connector, and a checkpoint upsert that only ever moves forward (``WHERE position <
excluded.position``), so even a buggy caller cannot move a checkpoint backwards.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.connectors import DEFAULT_STREAM, Cursor
from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store
from memsync.runtime.sync.policy import (
    BackfillStatus,
    Holder,
    RunKind,
    RunStatus,
    StreamStatus,
    is_stale,
    plan_slices,
)
from memsync.runtime.sync.records import RunRecord
from memsync.runtime.sync.webhook_deliveries import WebhookState

if TYPE_CHECKING:
    from memsync.runtime.sync.plans import (
        BackfillPlan,
        RunOwner,
        RunPlan,
        SliceReach,
        SliceRef,
        SliceState,
        StreamOutcome,
        SyncStateForgotten,
        Tally,
    )

__all__ = [
    "ALL_STREAMS",
    "ConnectorState",
    "RunInProgress",
    "RunLost",
    "StreamState",
    "SyncRepository",
]

ALL_STREAMS = "*"
"""The stream name of a checkpoint for every stream of a connector without its own."""

_runs = tables.sync_runs
_streams = tables.sync_streams
# What a stream without a row of its own takes over from its connector's "*" row.
_INHERITED = (
    "tenant_id",
    "connector",
    "position",
    "cursor",
    "checkpoint_run_id",
    "checkpointed_at",
    "complete_through",
    "completed_run_id",
)
# The backfill tables are named where a backfill is worked on: a command that reads
# checkpoints and run records builds neither (docs/architecture.md, "Start-up").


class RunInProgress(Exception):
    """Another run of the same connector is running; this one did not start."""


class RunLost(Exception):
    """This run was declared abandoned (its lease expired) and may no longer write."""


@dataclass(frozen=True, slots=True)
class StreamState:
    """Where one stream of a connector stands."""

    stream: str
    declared: bool
    """Whether the connector's configuration reads this stream now."""
    cursor: Cursor | None
    """Its checkpoint (``None``: the next run reads it from ``start``)."""
    checkpointed_at: datetime | None
    last_run_id: uuid.UUID | None
    last_run_at: datetime | None
    last_status: StreamStatus | None
    """How the last run that read it ended for it."""
    last_success_at: datetime | None
    """The end of the last window it read completely."""
    last_success_run_id: uuid.UUID | None
    lag_seconds: float | None
    """Now minus :attr:`last_success_at` (None: never read completely)."""


@dataclass(frozen=True, slots=True)
class ConnectorState:
    """What ``memsync state show`` and ``GET /v1/connectors/{name}/state`` report."""

    connector: str
    last_run: RunRecord | None
    last_success: RunRecord | None
    lag_seconds: float | None
    """Its stalest stream's lag: now minus the end of the earliest window among the
    last ones each stream read completely (None: some stream never was)."""
    streams: list[StreamState]
    webhook: WebhookState | None = None
    """Its webhook deliveries and push gap (None: it has no ``webhook:``)."""


class SyncRepository:
    """Reads and writes ``sync_runs``, ``sync_streams`` and backfill tables."""

    def __init__(self, store: Store) -> None:
        self._store = store

    # -- starting and owning a run -----------------------------------------------------

    def start_run(
        self,
        *,
        tenant_id: str,
        connector: str,
        connector_type: str,
        kind: RunKind,
        now: datetime,
        owner: RunOwner,
        plan: Callable[[Connection], RunPlan],
    ) -> tuple[uuid.UUID, RunPlan]:
        """Insert a ``running`` run; ``plan`` runs in the same transaction first.

        Conflicts: if the connector already has a running run, that run is checked: a
        stale one (expired heartbeat, or a dead process on this host) is marked
        ``failed`` and this run starts; a live one makes this call raise
        :class:`RunInProgress` at once (fail fast, never wait). Whatever ``plan``
        wrote is rolled back with the refused insert.
        """
        from memsync.runtime.sync.plans import Tally

        for attempt in range(3):
            run_id = uuid.uuid4()
            try:
                with self._store.write() as connection:
                    self.lock_connector(connection, tenant_id, connector)
                    decided = plan(connection)
                    connection.execute(
                        _runs.insert().values(
                            tenant_id=tenant_id,
                            id=run_id,
                            connector=connector,
                            connector_type=connector_type,
                            kind=kind.value,
                            window_start=decided.window.start,
                            window_end=decided.window.end,
                            status=RunStatus.RUNNING.value,
                            backfill_id=decided.backfill_id,
                            host=owner.host,
                            pid=owner.pid,
                            started_at=now,
                            heartbeat_at=now,
                            **Tally().columns(),
                        )
                    )
                return run_id, decided
            except sa.exc.IntegrityError:
                if attempt == 2:
                    raise
                self._reclaim_if_stale(tenant_id, connector, now, owner)
        raise AssertionError("unreachable")

    def _reclaim_if_stale(
        self, tenant_id: str, connector: str, now: datetime, owner: RunOwner
    ) -> None:
        with self._store.write() as connection:
            query = sa.select(_runs).where(
                _runs.c.tenant_id == tenant_id,
                _runs.c.connector == connector,
                _runs.c.status == RunStatus.RUNNING.value,
            )
            if self._store.is_postgresql:
                query = query.with_for_update()
            holder = connection.execute(query).one_or_none()
            if holder is None:
                return  # it finished in between: just try again
            alive = not is_stale(
                Holder(holder.host, holder.pid, holder.heartbeat_at),
                now=now,
                lease=owner.lease,
                this_host=owner.host,
                pid_alive=owner.pid_alive,
            )
            if alive:
                raise RunInProgress(
                    f"connector '{connector}' (tenant '{tenant_id}') is already running: "
                    f"{holder.kind} run {holder.id} started {holder.started_at.isoformat()} "
                    f"by pid {holder.pid} on {holder.host}, last heartbeat "
                    f"{holder.heartbeat_at.isoformat()}. Two runs of one connector never "
                    "overlap: wait for it to finish (a run whose process died is recovered "
                    f"automatically once its heartbeat is older than {owner.lease})."
                )
            connection.execute(
                _runs.update()
                .where(_runs.c.tenant_id == tenant_id, _runs.c.id == holder.id)
                .values(
                    status=RunStatus.FAILED.value,
                    errors=holder.errors + 1,
                    error=(
                        f"abandoned: process {holder.pid} on {holder.host} stopped "
                        f"heartbeating (last {holder.heartbeat_at.isoformat()})"
                    ),
                    finished_at=now,
                    duration_seconds=(now - holder.started_at).total_seconds(),
                )
            )

    def heartbeat(self, tenant_id: str, run_id: uuid.UUID, now: datetime) -> bool:
        """Refresh the run's lease; ``False`` if it is no longer running."""
        with self._store.write() as connection:
            updated = connection.execute(
                _runs.update().where(*_owned(tenant_id, run_id)).values(heartbeat_at=now)
            )
        return updated.rowcount == 1

    def record_progress(
        self,
        tenant_id: str,
        run_id: uuid.UUID,
        tally: Tally,
        now: datetime,
        *,
        connector: str,
        stream: str = DEFAULT_STREAM,
        cursor: Cursor | None = None,
        stream_outcome: StreamOutcome | None = None,
        slice_done: SliceRef | None = None,
        slice_progress: tuple[SliceRef, SliceReach] | None = None,
        connection: Connection | None = None,
    ) -> None:
        """After a committed batch (or slice, or stream): counters, heartbeat, and the
        checkpoint of ``stream`` (``cursor``) or the slice (done, or how far it got:
        ``slice_progress``, replacing what it said), and how the run ended for a
        stream (``stream_outcome``).

        One transaction, so a checkpoint is never ahead of the run record; given a
        ``connection``, the caller's transaction (ingest's, so the counters commit with
        the episodes they count). Raises :class:`RunLost` (writing nothing) if the run
        is no longer ours.
        """
        if connection is None:
            with self._store.write() as own:
                self.record_progress(
                    tenant_id,
                    run_id,
                    tally,
                    now,
                    connector=connector,
                    stream=stream,
                    cursor=cursor,
                    stream_outcome=stream_outcome,
                    slice_done=slice_done,
                    slice_progress=slice_progress,
                    connection=own,
                )
            return
        self._update_owned(connection, tenant_id, run_id, heartbeat_at=now, **tally.columns())
        if cursor is not None:
            self._advance_checkpoint(connection, tenant_id, connector, stream, cursor, run_id, now)
        if stream_outcome is not None:
            self._record_stream_outcome(connection, tenant_id, connector, stream_outcome)
        if slice_done is not None:
            connection.execute(_of_slice(tenant_id, slice_done).values(done_at=now, run_id=run_id))
        if slice_progress is not None:
            piece, progress = slice_progress
            connection.execute(
                _of_slice(tenant_id, piece).values(progress=progress.to_json(), run_id=run_id)
            )

    def finish_run(
        self,
        tenant_id: str,
        run_id: uuid.UUID,
        tally: Tally,
        *,
        status: RunStatus,
        error: str | None,
        started_at: datetime,
        now: datetime,
        connector: str,
        stream_outcome: StreamOutcome | None = None,
        finished_backfill: uuid.UUID | None = None,
        needs_attention: bool = False,
        retry_at: datetime | None = None,
    ) -> RunRecord:
        """Close the run with its final counts and status, and how it ended for the
        stream it was reading when it stopped (``stream_outcome``).

        Raises :class:`RunLost` if the run was reclaimed meanwhile (nothing written).
        """
        with self._store.write() as connection:
            self._update_owned(
                connection,
                tenant_id,
                run_id,
                status=status.value,
                error=error,
                heartbeat_at=now,
                finished_at=now,
                duration_seconds=(now - started_at).total_seconds(),
                needs_attention=needs_attention,
                retry_at=retry_at,
                **tally.columns(),
            )
            if stream_outcome is not None:
                self._record_stream_outcome(connection, tenant_id, connector, stream_outcome)
            if finished_backfill is not None:
                backfills = tables.backfills
                connection.execute(
                    backfills.update()
                    .where(backfills.c.tenant_id == tenant_id, backfills.c.id == finished_backfill)
                    .values(status=BackfillStatus.FINISHED.value, finished_at=now)
                )
        record = self.get_run(tenant_id, run_id)
        assert record is not None
        return record

    @staticmethod
    def _update_owned(
        connection: Connection, tenant_id: str, run_id: uuid.UUID, **values: Any
    ) -> None:
        updated = connection.execute(
            _runs.update().where(*_owned(tenant_id, run_id)).values(**values)
        )
        if updated.rowcount != 1:
            raise RunLost(
                f"run {run_id} is no longer running: another run found it abandoned (stale "
                "heartbeat or dead process) and took over; stopping without a checkpoint"
            )

    # -- stream checkpoints ------------------------------------------------------------

    def cursor(self, tenant_id: str, connector: str, stream: str = DEFAULT_STREAM) -> Cursor | None:
        """The stream's own committed checkpoint, or ``None`` before its first one."""
        with self._store.read() as connection:
            stored = connection.execute(
                sa.select(_streams.c.cursor).where(*_of_stream(tenant_id, connector, stream))
            ).scalar_one_or_none()
        return None if stored is None else Cursor.from_json(stored)

    @staticmethod
    def checkpoints_in(
        connection: Connection, tenant_id: str, connector: str, streams: Sequence[str]
    ) -> dict[str, Cursor | None]:
        """Each of ``streams``' checkpoint (``None``: read from ``start``), in the caller's
        transaction: a run's start.

        A stream without a row of its own takes over the connector's ``*`` row (the
        cursor of before streams, or a reset of every stream), which then goes: streams
        the connector reads from now on start from its ``start``.
        """
        rows = {
            row.stream: row
            for row in connection.execute(
                sa.select(_streams).where(
                    _streams.c.tenant_id == tenant_id, _streams.c.connector == connector
                )
            )
        }
        every = rows.get(ALL_STREAMS)
        if every is not None:
            adopted = [name for name in streams if name not in rows]
            if adopted:
                inherited = {column: every._mapping[column] for column in _INHERITED}
                connection.execute(
                    _streams.insert(), [{**inherited, "stream": name} for name in adopted]
                )
                rows.update(dict.fromkeys(adopted, every))
            connection.execute(
                _streams.delete().where(*_of_stream(tenant_id, connector, ALL_STREAMS))
            )
        return {
            name: Cursor.from_json(row.cursor)
            if (row := rows.get(name)) is not None and row.cursor is not None
            else None
            for name in streams
        }

    def committed_positions(self, tenant_id: str | None = None) -> dict[tuple[str, str], datetime]:
        """Where each connector's incremental sync has read completely up to, by (tenant,
        connector), of one tenant or of all: the end of the last window its stalest
        stream read to its end. A connector none of whose streams was read completely
        yet is absent."""
        stalest = sa.func.min(_streams.c.complete_through)
        query = (
            sa.select(_streams.c.tenant_id, _streams.c.connector, stalest.label("position"))
            .where(_streams.c.complete_through.is_not(None))
            .group_by(_streams.c.tenant_id, _streams.c.connector)
        )
        if tenant_id is not None:
            query = query.where(_streams.c.tenant_id == tenant_id)
        with self._store.read() as connection:
            return {
                (row.tenant_id, row.connector): row.position for row in connection.execute(query)
            }

    def _advance_checkpoint(
        self,
        connection: Connection,
        tenant_id: str,
        connector: str,
        stream: str,
        cursor: Cursor,
        run_id: uuid.UUID,
        now: datetime,
    ) -> None:
        insert = tables.upsert(_streams, postgresql=self._store.is_postgresql).values(
            tenant_id=tenant_id,
            connector=connector,
            stream=stream,
            position=cursor.position,
            cursor=cursor.to_json(),
            checkpoint_run_id=run_id,
            checkpointed_at=now,
        )
        connection.execute(
            insert.on_conflict_do_update(
                index_elements=[_streams.c.tenant_id, _streams.c.connector, _streams.c.stream],
                set_={
                    "position": insert.excluded.position,
                    "cursor": insert.excluded.cursor,
                    "checkpoint_run_id": insert.excluded.checkpoint_run_id,
                    "checkpointed_at": insert.excluded.checkpointed_at,
                },
                # Forward only: the database refuses to move a checkpoint backwards. At the
                # same position the later write wins: it carries what the read said since.
                where=sa.or_(
                    _streams.c.position.is_(None), _streams.c.position <= insert.excluded.position
                ),
            )
        )

    def _record_stream_outcome(
        self, connection: Connection, tenant_id: str, connector: str, outcome: StreamOutcome
    ) -> None:
        insert = tables.upsert(_streams, postgresql=self._store.is_postgresql).values(
            tenant_id=tenant_id,
            connector=connector,
            stream=outcome.stream,
            last_run_id=outcome.run_id,
            last_run_at=outcome.run_at,
            last_status=outcome.status.value,
            complete_through=outcome.complete_through,
            completed_run_id=outcome.run_id if outcome.complete_through else None,
        )
        changes: dict[str, Any] = {
            "last_run_id": insert.excluded.last_run_id,
            "last_run_at": insert.excluded.last_run_at,
            "last_status": insert.excluded.last_status,
        }
        if outcome.complete_through is not None:
            # Forward only, as checkpoints: a run whose clock is behind leaves it.
            later = sa.or_(
                _streams.c.complete_through.is_(None),
                _streams.c.complete_through < insert.excluded.complete_through,
            )
            for column in ("complete_through", "completed_run_id"):
                changes[column] = sa.case(
                    (later, insert.excluded[column]), else_=_streams.c[column]
                )
        connection.execute(
            insert.on_conflict_do_update(
                index_elements=[_streams.c.tenant_id, _streams.c.connector, _streams.c.stream],
                set_=changes,
            )
        )

    def state(
        self,
        tenant_id: str,
        connector: str,
        now: datetime,
        streams: Sequence[str] | None = None,
    ) -> ConnectorState:
        """Where the connector stands: each stream's checkpoint, last run and lag, the
        connector's last run and last success, and its lag (its stalest stream's).

        ``streams`` are the streams the configuration reads now, in order: each is
        listed, read or not; stored streams it no longer reads follow, marked so, and do
        not count towards the lag. ``None``: every stored stream counts.
        """
        latest = sa.select(_runs).where(
            _runs.c.tenant_id == tenant_id, _runs.c.connector == connector
        )
        latest = latest.order_by(_runs.c.started_at.desc(), _runs.c.id).limit(1)
        with self._store.read() as connection:
            rows = {
                row.stream: row
                for row in connection.execute(
                    sa.select(_streams).where(
                        _streams.c.tenant_id == tenant_id, _streams.c.connector == connector
                    )
                )
            }
            last = connection.execute(latest).first()
            success = connection.execute(
                latest.where(_runs.c.status == RunStatus.SUCCEEDED.value)
            ).first()
        read_now = list(rows) if streams is None else list(streams)
        every = rows.get(ALL_STREAMS)
        states = [
            _stream_state(name, rows.get(name) or every, now, declared=True) for name in read_now
        ]
        # The "*" row stands in for the streams read now that have no row of their own.
        states += [
            _stream_state(name, row, now, declared=False)
            for name, row in sorted(rows.items())
            if name not in read_now and (streams is None or name != ALL_STREAMS)
        ]
        lags = [state.lag_seconds for state in states if state.declared]
        return ConnectorState(
            connector=connector,
            last_run=RunRecord.from_row(last) if last is not None else None,
            last_success=RunRecord.from_row(success) if success is not None else None,
            lag_seconds=max(lags) if lags and None not in lags else None,  # type: ignore[type-var]
            streams=states,
        )

    def reset_checkpoints(
        self,
        tenant_id: str,
        connector: str,
        *,
        stream: str | None,
        to: datetime | None,
        now: datetime,
    ) -> None:
        """Move the checkpoint of ``stream`` (``None``: of every stream) to ``to``,
        backwards too (a person decided it), or remove it (``to`` ``None``: the next
        sync reads from the configured ``start``). Every stream includes those without
        a checkpoint yet: they start at ``to`` as well. What the streams' last runs were
        is kept. Raises :class:`RunInProgress` while a run of the connector is going, as
        its next checkpoint would race the reset."""
        with self._store.write() as connection:
            self.refuse_while_running(connection, tenant_id, connector, "reset it")
            checkpoint = {
                "position": to,
                "cursor": Cursor(position=to).to_json() if to is not None else None,
                "checkpoint_run_id": None,
                "checkpointed_at": now,
            }
            of_connector = (_streams.c.tenant_id == tenant_id, _streams.c.connector == connector)
            if stream is None:
                connection.execute(
                    _streams.delete().where(*of_connector, _streams.c.stream == ALL_STREAMS)
                )
                connection.execute(_streams.update().where(*of_connector).values(**checkpoint))
                if to is None:
                    return
                stream = ALL_STREAMS
            insert = tables.upsert(_streams, postgresql=self._store.is_postgresql).values(
                tenant_id=tenant_id, connector=connector, stream=stream, **checkpoint
            )
            connection.execute(
                insert.on_conflict_do_update(
                    index_elements=[_streams.c.tenant_id, _streams.c.connector, _streams.c.stream],
                    set_={column: insert.excluded[column] for column in checkpoint},
                )
            )

    # -- a connector as a whole -------------------------------------------------------

    def lock_connector(self, connection: Connection, tenant_id: str, connector: str) -> None:
        """Take the connector's lock for the caller's transaction: a run's start, a
        reset and a forget of one connector happen one after the other, so none reads
        checkpoints another is about to change. On PostgreSQL a transaction-scoped
        advisory lock; on SQLite the write transaction already holds the database lock."""
        if self._store.is_postgresql:
            connection.execute(
                sa.text("SELECT pg_advisory_xact_lock(:key)"),
                {"key": _connector_lock_key(tenant_id, connector)},
            )

    def refuse_while_running(
        self, connection: Connection, tenant_id: str, connector: str, action: str
    ) -> None:
        """Take the connector's lock; raise :class:`RunInProgress` (saying to ``action``
        once the run has ended) while a run of it is going."""
        self.lock_connector(connection, tenant_id, connector)
        running = connection.execute(
            sa.select(_runs.c.id).where(
                _runs.c.tenant_id == tenant_id,
                _runs.c.connector == connector,
                _runs.c.status == RunStatus.RUNNING.value,
            )
        ).first()
        if running is not None:
            raise RunInProgress(
                f"connector {connector!r} is running (run {running.id}); {action} once the "
                "run has ended"
            )

    @staticmethod
    def forget_state(connection: Connection, tenant_id: str, connector: str) -> SyncStateForgotten:
        """Delete the connector's checkpoints, run records and backfills in the caller's
        transaction (take :meth:`refuse_while_running` first); return how many."""

        from memsync.runtime.sync.plans import SyncStateForgotten

        def of_connector(table: sa.Table) -> tuple[sa.ColumnElement[bool], ...]:
            return table.c.tenant_id == tenant_id, table.c.connector == connector

        backfills, slices = tables.backfills, tables.backfill_slices
        connection.execute(
            slices.delete().where(
                slices.c.tenant_id == tenant_id,
                slices.c.backfill_id.in_(sa.select(backfills.c.id).where(*of_connector(backfills))),
            )
        )
        deleted = {
            table.name: connection.execute(table.delete().where(*of_connector(table))).rowcount
            for table in (backfills, _streams, _runs)
        }
        return SyncStateForgotten(
            streams=deleted[_streams.name],
            runs=deleted[_runs.name],
            backfills=deleted[backfills.name],
        )

    # -- backfills ---------------------------------------------------------------------

    def open_backfill(
        self,
        connection: Connection,
        *,
        tenant_id: str,
        connector: str,
        since: datetime,
        until: datetime | None,
        slice_length: timedelta,
        now: datetime,
    ) -> BackfillPlan:
        """Resume the connector's open backfill if it has the same parameters, else
        start a new one (abandoning a different open one).

        Repeats: the same ``since`` and slice (and ``until``, when given) resume; their
        done slices are not read again. ``until`` ``None`` means "now" for a new
        backfill and "whatever it was" for a resumed one. Slices are written in one
        statement when the backfill is created.
        """
        from memsync.runtime.sync.plans import BackfillPlan, SliceReach, SliceRef

        backfills, slices = tables.backfills, tables.backfill_slices
        slice_seconds = int(slice_length.total_seconds())
        query = sa.select(backfills).where(
            backfills.c.tenant_id == tenant_id,
            backfills.c.connector == connector,
            backfills.c.status == BackfillStatus.OPEN.value,
        )
        existing = connection.execute(query).one_or_none()
        resumed = existing is not None and (
            existing.since == since
            and existing.slice_seconds == slice_seconds
            and (until is None or existing.until == until)
        )
        if existing is not None and resumed:
            backfill_id, until = existing.id, existing.until
        else:
            if existing is not None:
                connection.execute(
                    backfills.update()
                    .where(backfills.c.tenant_id == tenant_id, backfills.c.id == existing.id)
                    .values(status=BackfillStatus.ABANDONED.value, finished_at=now)
                )
            backfill_id, until = uuid.uuid4(), until or now
            planned = plan_slices(since, until, slice_length)
            connection.execute(
                backfills.insert().values(
                    tenant_id=tenant_id,
                    id=backfill_id,
                    connector=connector,
                    since=since,
                    until=until,
                    slice_seconds=slice_seconds,
                    status=BackfillStatus.OPEN.value,
                    created_at=now,
                )
            )
            connection.execute(
                slices.insert(),
                [
                    {
                        "tenant_id": tenant_id,
                        "backfill_id": backfill_id,
                        "slice_start": start,
                        "slice_end": end,
                    }
                    for start, end in planned
                ],
            )
        rows = connection.execute(
            sa.select(slices.c.slice_start, slices.c.slice_end, slices.c.done_at, slices.c.progress)
            .where(slices.c.tenant_id == tenant_id, slices.c.backfill_id == backfill_id)
            .order_by(slices.c.slice_start)
        ).all()
        return BackfillPlan(
            id=backfill_id,
            since=since,
            until=until,
            resumed=resumed,
            total_slices=len(rows),
            pending=[
                SliceRef(
                    backfill_id,
                    row.slice_start,
                    row.slice_end,
                    SliceReach.from_json(row.progress),
                )
                for row in rows
                if row.done_at is None
            ],
        )

    # -- reading run records -----------------------------------------------------------

    def backfill_slices(self, tenant_id: str, backfill_id: uuid.UUID) -> list[SliceState]:
        """Every slice of a backfill, in order, with how far each got."""
        from memsync.runtime.sync.plans import SliceReach, SliceState

        slices = tables.backfill_slices
        query = (
            sa.select(slices)
            .where(slices.c.tenant_id == tenant_id, slices.c.backfill_id == backfill_id)
            .order_by(slices.c.slice_start)
        )
        with self._store.read() as connection:
            return [
                SliceState(
                    row.slice_start,
                    row.slice_end,
                    row.done_at,
                    SliceReach.from_json(row.progress),
                )
                for row in connection.execute(query)
            ]

    def get_run(self, tenant_id: str, run_id: uuid.UUID) -> RunRecord | None:
        """One run of the tenant, or ``None``."""
        with self._store.read() as connection:
            row = connection.execute(
                sa.select(_runs).where(_runs.c.tenant_id == tenant_id, _runs.c.id == run_id)
            ).one_or_none()
        return None if row is None else RunRecord.from_row(row)

    def run_ids_starting_with(
        self, tenant_id: str, prefix: str, *, limit: int = 2
    ) -> list[uuid.UUID]:
        """Ids of the tenant's runs that start with ``prefix`` (at most ``limit``), for
        shortened ids; ``ValueError`` when ``prefix`` is not hex."""
        with self._store.read() as connection:
            return tables.ids_starting_with(connection, _runs, tenant_id, prefix, limit=limit)

    def list_runs(
        self,
        tenant_id: str,
        *,
        connector: str | None = None,
        status: RunStatus | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[RunRecord]:
        """The tenant's runs, newest first, optionally of one connector or status."""
        query = sa.select(_runs).where(_runs.c.tenant_id == tenant_id)
        if connector is not None:
            query = query.where(_runs.c.connector == connector)
        if status is not None:
            query = query.where(_runs.c.status == status.value)
        query = query.order_by(_runs.c.started_at.desc(), _runs.c.id).limit(limit).offset(offset)
        with self._store.read() as connection:
            return [RunRecord.from_row(row) for row in connection.execute(query)]

    def latest_runs(self, tenant_id: str) -> dict[str, RunRecord]:
        """Each connector's most recent run in the tenant, by connector name (one
        statement, whatever the number of connectors)."""
        newest_first = (
            sa.func.row_number()
            .over(
                partition_by=_runs.c.connector,
                order_by=(_runs.c.started_at.desc(), _runs.c.id),
            )
            .label("newest_first")
        )
        ranked = sa.select(_runs, newest_first).where(_runs.c.tenant_id == tenant_id).subquery()
        query = sa.select(ranked).where(ranked.c.newest_first == 1)
        with self._store.read() as connection:
            return {row.connector: RunRecord.from_row(row) for row in connection.execute(query)}


def _connector_lock_key(tenant_id: str, connector: str) -> int:
    digest = hashlib.sha256(f"memsync-sync\0{tenant_id}\0{connector}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _of_stream(tenant_id: str, connector: str, stream: str) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        _streams.c.tenant_id == tenant_id,
        _streams.c.connector == connector,
        _streams.c.stream == stream,
    )


def _stream_state(name: str, row: Any, now: datetime, *, declared: bool) -> StreamState:
    """``row``: the stream's own, its connector's ``*`` row it starts from, or ``None``."""
    if row is None:
        return StreamState(name, declared, None, None, None, None, None, None, None, None)
    own = row.stream == name
    done = row.complete_through
    return StreamState(
        stream=name,
        declared=declared,
        cursor=Cursor.from_json(row.cursor) if row.cursor is not None else None,
        checkpointed_at=row.checkpointed_at,
        last_run_id=row.last_run_id if own else None,
        last_run_at=row.last_run_at if own else None,
        last_status=StreamStatus(row.last_status) if own and row.last_status else None,
        last_success_at=done,
        last_success_run_id=row.completed_run_id,
        lag_seconds=(now - done).total_seconds() if done is not None else None,
    )


def _of_slice(tenant_id: str, piece: SliceRef) -> sa.Update:
    slices = tables.backfill_slices
    return slices.update().where(
        slices.c.tenant_id == tenant_id,
        slices.c.backfill_id == piece.backfill_id,
        slices.c.slice_start == piece.start,
    )


def _owned(tenant_id: str, run_id: uuid.UUID) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        _runs.c.tenant_id == tenant_id,
        _runs.c.id == run_id,
        _runs.c.status == RunStatus.RUNNING.value,
    )
