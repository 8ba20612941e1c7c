"""Run records, cursors and backfill checkpoints in the store.

Every statement is scoped to a tenant. The invariants live in the schema: one
``running`` run per connector (partial unique index), one ``open`` backfill per
connector, and a cursor upsert that only ever moves forward (``WHERE position <
excluded.position``), so even a buggy caller cannot move a cursor backwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from memsync.connectors import Cursor, Window
from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store
from memsync.runtime.sync.policy import (
    BackfillStatus,
    Holder,
    RunKind,
    RunStatus,
    is_stale,
    plan_slices,
)
from memsync.runtime.sync.records import RunRecord, Tally

__all__ = [
    "BackfillPlan",
    "ConnectorState",
    "RunInProgress",
    "RunLost",
    "RunOwner",
    "RunPlan",
    "SliceRef",
    "SyncRepository",
]

_runs = tables.sync_runs
_cursors = tables.connector_cursors
_backfills = tables.backfills
_slices = tables.backfill_slices


class RunInProgress(Exception):
    """Another run of the same connector is running; this one did not start."""


class RunLost(Exception):
    """This run was declared abandoned (its lease expired) and may no longer write."""


@dataclass(frozen=True, slots=True)
class RunOwner:
    """The process starting a run, and how long its heartbeat stays valid."""

    host: str
    pid: int
    lease: timedelta
    pid_alive: Callable[[int], bool]


@dataclass(frozen=True, slots=True)
class ConnectorState:
    """What ``memsync state show`` and ``GET /v1/connectors/{name}/state`` report."""

    connector: str
    cursor: Cursor | None
    cursor_updated_at: datetime | None
    last_run: RunRecord | None
    last_success: RunRecord | None
    lag_seconds: float | None
    """Now minus the end of the last window read completely (None: never)."""


@dataclass(frozen=True, slots=True)
class SliceRef:
    """One backfill slice still to read."""

    backfill_id: uuid.UUID
    start: datetime
    end: datetime


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


class SyncRepository:
    """Reads and writes ``sync_runs``, ``connector_cursors`` and backfill tables."""

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
        for attempt in range(3):
            run_id = uuid.uuid4()
            try:
                with self._store.write() as connection:
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
        cursor: Cursor | None = None,
        slice_done: SliceRef | None = None,
        connection: Connection | None = None,
    ) -> None:
        """After a committed batch (or slice): counters, heartbeat, and the checkpoint.

        One transaction, so the cursor or slice checkpoint is never ahead of the run
        record; given a ``connection``, the caller's transaction (ingest's, so the
        counters commit with the episodes they count). Raises :class:`RunLost`
        (writing nothing) if the run is no longer ours.
        """
        if connection is None:
            with self._store.write() as own:
                self.record_progress(
                    tenant_id,
                    run_id,
                    tally,
                    now,
                    connector=connector,
                    cursor=cursor,
                    slice_done=slice_done,
                    connection=own,
                )
            return
        self._update_owned(connection, tenant_id, run_id, heartbeat_at=now, **tally.columns())
        if cursor is not None:
            self._advance_cursor(connection, tenant_id, connector, cursor, run_id, now)
        if slice_done is not None:
            connection.execute(
                _slices.update()
                .where(
                    _slices.c.tenant_id == tenant_id,
                    _slices.c.backfill_id == slice_done.backfill_id,
                    _slices.c.slice_start == slice_done.start,
                )
                .values(done_at=now, run_id=run_id)
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
        cursor: Cursor | None = None,
        finished_backfill: uuid.UUID | None = None,
        needs_attention: bool = False,
        retry_at: datetime | None = None,
    ) -> RunRecord:
        """Close the run with its final counts and status; move the cursor if given.

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
            if cursor is not None:
                self._advance_cursor(connection, tenant_id, connector, cursor, run_id, now)
            if finished_backfill is not None:
                connection.execute(
                    _backfills.update()
                    .where(
                        _backfills.c.tenant_id == tenant_id, _backfills.c.id == finished_backfill
                    )
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

    # -- cursors -----------------------------------------------------------------------

    def cursor(self, tenant_id: str, connector: str) -> Cursor | None:
        """The connector's committed cursor, or ``None`` before its first checkpoint."""
        with self._store.read() as connection:
            return self.cursor_in(connection, tenant_id, connector)

    @staticmethod
    def cursor_in(connection: Connection, tenant_id: str, connector: str) -> Cursor | None:
        stored = connection.execute(
            sa.select(_cursors.c.cursor).where(
                _cursors.c.tenant_id == tenant_id, _cursors.c.connector == connector
            )
        ).scalar_one_or_none()
        return None if stored is None else Cursor.from_json(stored)

    def committed_positions(self, tenant_id: str | None = None) -> dict[tuple[str, str], datetime]:
        """Where each connector's incremental sync has committed up to, by (tenant,
        connector), of one tenant or of all: the end of the last window read completely.
        A connector before its first checkpoint is absent."""
        query = sa.select(_cursors.c.tenant_id, _cursors.c.connector, _cursors.c.position)
        if tenant_id is not None:
            query = query.where(_cursors.c.tenant_id == tenant_id)
        with self._store.read() as connection:
            return {
                (row.tenant_id, row.connector): row.position for row in connection.execute(query)
            }

    def _advance_cursor(
        self,
        connection: Connection,
        tenant_id: str,
        connector: str,
        cursor: Cursor,
        run_id: uuid.UUID,
        now: datetime,
    ) -> None:
        dialect_insert = postgresql.insert if self._store.is_postgresql else sqlite.insert
        insert = dialect_insert(_cursors).values(
            tenant_id=tenant_id,
            connector=connector,
            position=cursor.position,
            cursor=cursor.to_json(),
            run_id=run_id,
            updated_at=now,
        )
        connection.execute(
            insert.on_conflict_do_update(
                index_elements=[_cursors.c.tenant_id, _cursors.c.connector],
                set_={
                    "position": insert.excluded.position,
                    "cursor": insert.excluded.cursor,
                    "run_id": insert.excluded.run_id,
                    "updated_at": insert.excluded.updated_at,
                },
                # Forward only: the database refuses to move a cursor backwards.
                where=_cursors.c.position < insert.excluded.position,
            )
        )

    def state(self, tenant_id: str, connector: str, now: datetime) -> ConnectorState:
        """Where the connector stands: its cursor, its last run and last success, and
        its lag (``now`` - the end of the last window it read completely)."""
        latest = sa.select(_runs).where(
            _runs.c.tenant_id == tenant_id, _runs.c.connector == connector
        )
        latest = latest.order_by(_runs.c.started_at.desc(), _runs.c.id).limit(1)
        with self._store.read() as connection:
            stored = connection.execute(
                sa.select(_cursors.c.cursor, _cursors.c.updated_at).where(
                    _cursors.c.tenant_id == tenant_id, _cursors.c.connector == connector
                )
            ).first()
            last = connection.execute(latest).first()
            success = connection.execute(
                latest.where(_runs.c.status == RunStatus.SUCCEEDED.value)
            ).first()
        last_success = RunRecord.from_row(success) if success is not None else None
        return ConnectorState(
            connector=connector,
            cursor=Cursor.from_json(stored.cursor) if stored is not None else None,
            cursor_updated_at=stored.updated_at if stored is not None else None,
            last_run=RunRecord.from_row(last) if last is not None else None,
            last_success=last_success,
            lag_seconds=(now - last_success.window_end).total_seconds()
            if last_success is not None
            else None,
        )

    def reset_cursor(
        self, tenant_id: str, connector: str, *, to: datetime | None, now: datetime
    ) -> Cursor | None:
        """Move the cursor to ``to`` (backwards too: a person decided it), or remove it
        (``None``: the next sync reads from the configured ``start``). Returns the new
        cursor. Raises :class:`RunInProgress` while a run of the connector is going, as
        its next checkpoint would race the reset."""
        with self._store.write() as connection:
            running = connection.execute(
                sa.select(_runs.c.id).where(
                    _runs.c.tenant_id == tenant_id,
                    _runs.c.connector == connector,
                    _runs.c.status == RunStatus.RUNNING.value,
                )
            ).first()
            if running is not None:
                raise RunInProgress(
                    f"connector {connector!r} is running (run {running.id}); reset it once "
                    "the run has ended"
                )
            connection.execute(
                _cursors.delete().where(
                    _cursors.c.tenant_id == tenant_id, _cursors.c.connector == connector
                )
            )
            if to is None:
                return None
            cursor = Cursor(position=to)
            connection.execute(
                _cursors.insert().values(
                    tenant_id=tenant_id,
                    connector=connector,
                    position=to,
                    cursor=cursor.to_json(),
                    run_id=None,
                    updated_at=now,
                )
            )
            return cursor

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
        slice_seconds = int(slice_length.total_seconds())
        query = sa.select(_backfills).where(
            _backfills.c.tenant_id == tenant_id,
            _backfills.c.connector == connector,
            _backfills.c.status == BackfillStatus.OPEN.value,
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
                    _backfills.update()
                    .where(_backfills.c.tenant_id == tenant_id, _backfills.c.id == existing.id)
                    .values(status=BackfillStatus.ABANDONED.value, finished_at=now)
                )
            backfill_id, until = uuid.uuid4(), until or now
            slices = plan_slices(since, until, slice_length)
            connection.execute(
                _backfills.insert().values(
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
                _slices.insert(),
                [
                    {
                        "tenant_id": tenant_id,
                        "backfill_id": backfill_id,
                        "slice_start": start,
                        "slice_end": end,
                    }
                    for start, end in slices
                ],
            )
        rows = connection.execute(
            sa.select(_slices.c.slice_start, _slices.c.slice_end, _slices.c.done_at)
            .where(_slices.c.tenant_id == tenant_id, _slices.c.backfill_id == backfill_id)
            .order_by(_slices.c.slice_start)
        ).all()
        return BackfillPlan(
            id=backfill_id,
            since=since,
            until=until,
            resumed=resumed,
            total_slices=len(rows),
            pending=[
                SliceRef(backfill_id, row.slice_start, row.slice_end)
                for row in rows
                if row.done_at is None
            ],
        )

    # -- reading run records -----------------------------------------------------------

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


def _owned(tenant_id: str, run_id: uuid.UUID) -> tuple[sa.ColumnElement[bool], ...]:
    return (
        _runs.c.tenant_id == tenant_id,
        _runs.c.id == run_id,
        _runs.c.status == RunStatus.RUNNING.value,
    )
