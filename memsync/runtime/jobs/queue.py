"""The job queue, in the database.

Every state change is one short write transaction; the invariants are indexes:
at most one pending job per (tenant, kind, target) and one job per schedule fire
and target (see ``memsync.runtime.storage.schema.jobs``). Workers claim with
``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so any number of them share the queue
without waiting on each other; on SQLite the claim runs inside the database write
lock (``BEGIN IMMEDIATE``), the single-writer equivalent.

The queue is generic: a job is a kind, a target and a tenant, and what a kind does is
the business of the handler the application registers for it on its workers.
Nothing here reads the clock: every method takes ``now``.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Annotated, Any

import sqlalchemy as sa
from pydantic import Field, TypeAdapter
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import IntegrityError

from memsync.clock import IsoDatetime
from memsync.retry import RetryPolicy
from memsync.runtime.jobs.status import JobOutcome, JobStatus
from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store

__all__ = ["JOB_RETRY", "Job", "JobOutcome", "JobQueue", "JobStatus", "RetryPolicy"]

_jobs = tables.jobs


@dataclass(frozen=True, slots=True)
class Job:
    """One job as stored. ``attempts`` counts claims, including the current one.

    As JSON (``to_dict``, the body of ``GET /v1/jobs/{id}``) it shows every field but
    the tenant, and moments as ``isoformat()``.
    """

    tenant_id: Annotated[str, Field(exclude=True)]
    id: uuid.UUID
    kind: str
    target: str
    status: JobStatus
    trigger: str
    dedup_key: str | None
    attempts: int
    max_attempts: int
    lease_owner: str | None
    lease_expires_at: IsoDatetime | None
    heartbeat_at: IsoDatetime | None
    run_after: IsoDatetime
    queued_at: IsoDatetime
    started_at: IsoDatetime | None
    finished_at: IsoDatetime | None
    result: dict[str, Any] | None
    error: str | None
    outcome: JobOutcome | None = None

    @property
    def finished(self) -> bool:
        return self.status in (JobStatus.COMPLETED, JobStatus.FAILED)

    def to_dict(self) -> dict[str, Any]:
        """The job as JSON-ready data (the body of ``GET /v1/jobs/{id}``)."""
        dumped: dict[str, Any] = _JOB.dump_python(self, mode="json")
        return dumped


_JOB: TypeAdapter[Job] = TypeAdapter(Job)
_JOB_FIELDS = tuple(job_field.name for job_field in fields(Job))


def _job(row: Row[Any]) -> Job:
    # The job's fields are named as the columns that hold them.
    values = row._mapping
    return Job(
        **{
            **{name: values[name] for name in _JOB_FIELDS},
            "status": JobStatus(values["status"]),
            "outcome": JobOutcome(values["outcome"]) if values["outcome"] else None,
        }
    )


FOLLOW_UP = "follow_up"
"""The trigger of a job a finished one enqueued to carry on its work later."""

RELEASE_HOLD = timedelta(seconds=2)
"""How long a job a stopping worker gave back waits before any worker may claim it.

The processes of one server are stopped together (``serve --processes N`` signals its
children at once), but each handles its signal a moment apart: a sibling whose own
stop was still a moment away claimed the job its neighbour had just released, opened a
sync run, and gave both back at once (a second, empty ``partial`` run). Two seconds is
far more than that moment, and nothing to a job whose worker a deploy is replacing."""

JOB_RETRY = RetryPolicy(
    max_attempts=5, base_delay=timedelta(seconds=10), max_delay=timedelta(minutes=10)
)
"""The default for jobs: a source that is down for a while usually comes back."""


class JobQueue:
    """Enqueue, claim, renew and finish jobs.

    Repeats: enqueueing a (tenant, kind, target) that already has a pending job
    returns that job and inserts nothing (coalescing); enqueueing with a
    ``dedup_key`` that an earlier job of the target carried returns that job, in any
    status (a schedule tick is enqueued once, however many schedulers fire it).
    Conflicts: two workers never hold the same job; a worker that lost its lease
    (it expired and another worker claimed the job) cannot complete or fail it.
    """

    def __init__(self, store: Store, retry: RetryPolicy | None = None) -> None:
        self._store = store
        self.retry = retry or JOB_RETRY

    # -- enqueue ---------------------------------------------------------------------

    def _insert(self) -> Any:
        # No conflict target: a clash on either partial unique index (a pending job
        # of the target, or the same schedule fire) means "already enqueued".
        insert = tables.insert_or_ignore(_jobs, postgresql=self._store.is_postgresql)
        return insert.returning(_jobs.c.id)

    def _row(
        self,
        tenant_id: str,
        kind: str,
        target: str,
        *,
        now: datetime,
        trigger: str,
        dedup_key: str | None,
    ) -> dict[str, Any]:
        return {
            "tenant_id": tenant_id,
            "id": uuid.uuid4(),
            "kind": kind,
            "target": target,
            "status": JobStatus.PENDING.value,
            "trigger": trigger,
            "dedup_key": dedup_key,
            "attempts": 0,
            "max_attempts": self.retry.max_attempts,
            "lease_owner": None,
            "lease_expires_at": None,
            "heartbeat_at": None,
            "run_after": now,
            "queued_at": now,
            "started_at": None,
            "finished_at": None,
            "result": None,
            "error": None,
        }

    def enqueue(
        self,
        tenant_id: str,
        kind: str,
        target: str,
        *,
        now: datetime,
        trigger: str = "manual",
        dedup_key: str | None = None,
    ) -> tuple[Job, bool]:
        """Enqueue a job; return it and whether it is new (see the class docstring).

        The returned job is the pending one of the target when the request coalesced,
        or the job that already carried ``dedup_key``.
        """
        row = self._row(tenant_id, kind, target, now=now, trigger=trigger, dedup_key=dedup_key)
        existing = sa.select(_jobs).where(
            _jobs.c.tenant_id == tenant_id,
            _jobs.c.kind == kind,
            _jobs.c.target == target,
            sa.or_(
                _jobs.c.status == JobStatus.PENDING.value,
                _jobs.c.dedup_key == dedup_key if dedup_key is not None else sa.false(),
            ),
        )
        # The pending job that blocked the insert can be claimed before we read it;
        # then the insert goes through on the next round.
        for _ in range(3):
            with self._store.write() as connection:
                inserted = connection.execute(self._insert(), [row]).first()
                if inserted is not None:
                    return _job(connection.execute(self._by_id(tenant_id, row["id"])).one()), True
                found = connection.execute(existing).first()
                if found is not None:
                    return _job(found), False
        raise RuntimeError(f"could not enqueue {kind} {target!r} for {tenant_id!r}")

    def enqueue_many(
        self,
        kind: str,
        targets: Collection[tuple[str, str]],
        *,
        now: datetime,
        trigger: str,
        dedup_key: str | None = None,
        connection: Connection | None = None,
    ) -> int:
        """Enqueue one job per (tenant, target) with coalescing; return how many are new.

        With a ``dedup_key``, a target whose job coalesced into one already pending
        (and carrying no key) has the key stamped on that job, so a second scheduler
        firing the same tick later finds the tick done even if that job ran already.
        """
        if not targets:
            return 0
        if connection is None:
            with self._store.write() as own:
                return self.enqueue_many(
                    kind, targets, now=now, trigger=trigger, dedup_key=dedup_key, connection=own
                )
        rows = [
            self._row(tenant, kind, target, now=now, trigger=trigger, dedup_key=dedup_key)
            for tenant, target in sorted(targets)  # one insertion order for every writer
        ]
        created = len(connection.execute(self._insert(), rows).all())
        if dedup_key is not None and created < len(rows):
            already = (
                sa.select(sa.literal(1))
                .select_from(_other := _jobs.alias("other"))
                .where(
                    _other.c.tenant_id == _jobs.c.tenant_id,
                    _other.c.kind == _jobs.c.kind,
                    _other.c.target == _jobs.c.target,
                    _other.c.dedup_key == dedup_key,
                )
            )
            connection.execute(
                _jobs.update()
                .where(
                    sa.tuple_(_jobs.c.tenant_id, _jobs.c.target).in_(sorted(targets)),
                    _jobs.c.kind == kind,
                    _jobs.c.status == JobStatus.PENDING.value,
                    _jobs.c.dedup_key.is_(None),
                    ~sa.exists(already),
                )
                .values(dedup_key=dedup_key)
            )
        return created

    # -- claim, renew, finish --------------------------------------------------------

    def claim(
        self,
        owner: str,
        *,
        now: datetime,
        lease: timedelta,
        kinds: Collection[str] | None = None,
    ) -> Job | None:
        """Claim the next ready job for ``owner`` until ``now + lease``; None if none.

        A running job whose lease expired is reclaimed first (its worker died; the
        attempt counter grows). One whose lease expired on its last attempt is failed
        instead, with the error kept. Pending jobs are taken in ``run_after`` order.
        """
        with self._store.write() as connection:
            self._fail_exhausted(connection, now)
            for expired in (True, False):
                job = self._claim_one(connection, owner, now, lease, kinds, expired=expired)
                if job is not None:
                    return job
        return None

    def _fail_exhausted(self, connection: Connection, now: datetime) -> None:
        connection.execute(
            _jobs.update()
            .where(
                _jobs.c.status == JobStatus.RUNNING.value,
                _jobs.c.lease_expires_at < now,
                _jobs.c.attempts >= _jobs.c.max_attempts,
            )
            .values(
                status=JobStatus.FAILED.value,
                outcome=JobOutcome.FAILED.value,
                error="the worker running the last attempt stopped (its lease expired)",
                finished_at=now,
                lease_owner=None,
                lease_expires_at=None,
            )
        )

    def _claim_one(
        self,
        connection: Connection,
        owner: str,
        now: datetime,
        lease: timedelta,
        kinds: Collection[str] | None,
        *,
        expired: bool,
    ) -> Job | None:
        if expired:
            ready = [
                _jobs.c.status == JobStatus.RUNNING.value,
                _jobs.c.lease_expires_at < now,
                _jobs.c.attempts < _jobs.c.max_attempts,
            ]
            order = _jobs.c.lease_expires_at
        else:
            ready = [_jobs.c.status == JobStatus.PENDING.value, _jobs.c.run_after <= now]
            order = _jobs.c.run_after
        if kinds is not None:
            ready.append(_jobs.c.kind.in_(list(kinds)))
        pick = sa.select(_jobs.c.tenant_id, _jobs.c.id).where(*ready).order_by(order).limit(1)
        if self._store.is_postgresql:
            # Rows another worker is claiming are skipped, not waited for.
            pick = pick.with_for_update(skip_locked=True)
        picked = pick.cte("picked")
        statement = (
            _jobs.update()
            .where(_jobs.c.tenant_id == picked.c.tenant_id, _jobs.c.id == picked.c.id)
            .values(
                status=JobStatus.RUNNING.value,
                attempts=_jobs.c.attempts + 1,
                lease_owner=owner,
                lease_expires_at=now + lease,
                heartbeat_at=now,
                started_at=now,
            )
            .returning(*_jobs.c)
        )
        row = connection.execute(statement).first()
        return _job(row) if row is not None else None

    def _held(self, job: Job, owner: str) -> list[sa.ColumnElement[bool]]:
        """The job is still ours: running, our lease, the attempt we claimed."""
        return [
            _jobs.c.tenant_id == job.tenant_id,
            _jobs.c.id == job.id,
            _jobs.c.status == JobStatus.RUNNING.value,
            _jobs.c.lease_owner == owner,
            _jobs.c.attempts == job.attempts,
        ]

    def heartbeat(self, job: Job, owner: str, *, now: datetime, lease: timedelta) -> bool:
        """Extend ``owner``'s lease on ``job`` to ``now + lease``; False if it was lost."""
        with self._store.write() as connection:
            updated = connection.execute(
                _jobs.update()
                .where(*self._held(job, owner))
                .values(lease_expires_at=now + lease, heartbeat_at=now)
            )
        return updated.rowcount == 1

    def add_progress(
        self, connection: Connection, job: Job, counts: Mapping[str, int | list[Any]]
    ) -> dict[str, Any]:
        """Add ``counts`` to the job's ``result`` in the caller's transaction and return
        the new totals: numbers add up, lists are extended.

        A handler calls it in the transaction that commits what it counts, so the counts
        survive a crash with the data, and a reclaimed attempt adds to them instead of
        starting over. It is not guarded by the lease: what was committed was done,
        whichever attempt did it. While the job runs, ``result`` shows these totals.
        """
        current = sa.select(_jobs.c.result).where(
            _jobs.c.tenant_id == job.tenant_id, _jobs.c.id == job.id
        )
        if self._store.is_postgresql:
            current = current.with_for_update()
        totals: dict[str, Any] = dict(connection.execute(current).scalar_one_or_none() or {})
        for name, value in counts.items():
            if isinstance(value, list):
                totals[name] = [*totals.get(name, []), *value]
            else:
                totals[name] = int(totals.get(name, 0)) + value
        connection.execute(
            _jobs.update()
            .where(_jobs.c.tenant_id == job.tenant_id, _jobs.c.id == job.id)
            .values(result=totals)
        )
        return totals

    def complete(
        self,
        job: Job,
        owner: str,
        result: Mapping[str, Any],
        *,
        now: datetime,
        outcome: JobOutcome = JobOutcome.SUCCEEDED,
        follow_up_at: datetime | None = None,
    ) -> bool:
        """Record success (``outcome`` says whether all of it); False, and nothing
        written, if ``owner`` lost the lease.

        ``follow_up_at`` enqueues, in the same transaction, another job of the same kind
        and target to run then (a sync stopped by a rate limit continues at its reset);
        it coalesces into a job of the target already pending.
        """
        with self._store.write() as connection:
            updated = connection.execute(
                _jobs.update()
                .where(*self._held(job, owner))
                .values(
                    status=JobStatus.COMPLETED.value,
                    outcome=outcome.value,
                    result=dict(result),
                    error=None,
                    finished_at=now,
                    lease_owner=None,
                    lease_expires_at=None,
                )
            )
            if updated.rowcount == 1 and follow_up_at is not None:
                row = self._row(
                    job.tenant_id, job.kind, job.target, now=now, trigger=FOLLOW_UP, dedup_key=None
                )
                connection.execute(self._insert(), [{**row, "run_after": follow_up_at}])
        return updated.rowcount == 1

    def fail(
        self,
        job: Job,
        owner: str,
        error: str,
        *,
        now: datetime,
        retryable: bool,
        needs_attention: bool = False,
        retry_at: datetime | None = None,
    ) -> JobStatus | None:
        """Record a failed attempt; return the job's new status (None: lease lost).

        A retryable error with attempts left puts the job back to ``pending`` at
        ``retry_at`` (when the source said to come back) or after the backoff;
        otherwise it is ``failed`` with ``error`` kept, its outcome ``needs_attention``
        when a person must fix the cause, else ``failed``. If another job of the same
        target was enqueued meanwhile, that pending job is the retry (the pending index
        allows one) and this one is ``failed``, saying so.
        """
        retry = retryable and not needs_attention and job.attempts < job.max_attempts
        outcome = JobOutcome.NEEDS_ATTENTION if needs_attention else JobOutcome.FAILED
        return self._requeue_or_finish(
            job,
            owner,
            requeue={"error": error, "run_after": retry_at or now + self.retry.delay(job.attempts)}
            if retry
            else None,
            finish={
                "status": JobStatus.FAILED.value,
                "outcome": outcome.value,
                "error": error,
                "finished_at": now,
            },
            clash=f"not retried: a newer job of {job.target!r} is pending",
        )

    def release(self, job: Job, owner: str, reason: str, *, now: datetime) -> JobStatus | None:
        """Give back a job whose worker is stopping (SIGTERM), not failing; return its
        new status (None: ``owner`` had lost the lease, and nothing is written).

        The job is ``pending`` again, ready after :data:`RELEASE_HOLD` (not a backoff:
        long enough for the other processes being stopped with this one to stop
        claiming), and the attempt does not count: ``attempts`` goes back down
        by one, since an operator stopping workers (a deploy, a scale-down) says nothing
        about the job and must never use up its attempts. A worker killed outright
        still uses one (its lease expires), so a job that crashes its worker cannot
        loop for ever. ``reason`` is kept in ``error``. Conflicts: when another job of
        the target was enqueued meanwhile, that pending job carries on (the pending
        index allows one) and this one is ``completed`` with outcome ``partial``,
        saying so.
        """
        return self._requeue_or_finish(
            job,
            owner,
            requeue={
                "attempts": _jobs.c.attempts - 1,
                "error": reason,
                "run_after": now + RELEASE_HOLD,
            },
            finish={
                "status": JobStatus.COMPLETED.value,
                "outcome": JobOutcome.PARTIAL.value,
                "error": reason,
                "finished_at": now,
            },
            clash=f"not released: a newer job of {job.target!r} is pending",
        )

    def _requeue_or_finish(
        self,
        job: Job,
        owner: str,
        *,
        requeue: Mapping[str, Any] | None,
        finish: Mapping[str, Any],
        clash: str,
    ) -> JobStatus | None:
        """Put the held job back to ``pending`` with ``requeue``'s values or, when
        ``requeue`` is None or another job of the target is pending already, finish it
        with ``finish``'s (its error then notes the ``clash``). Returns the new status;
        None, and nothing written, when ``owner`` no longer holds the job."""
        released = {"lease_owner": None, "lease_expires_at": None}
        values = dict(finish)
        with self._store.write() as connection:
            if requeue is not None:
                try:
                    with connection.begin_nested():
                        updated = connection.execute(
                            _jobs.update()
                            .where(*self._held(job, owner))
                            .values(status=JobStatus.PENDING.value, **requeue, **released)
                        )
                    return JobStatus.PENDING if updated.rowcount == 1 else None
                except IntegrityError:
                    values["error"] = f"{values['error']} ({clash})"
            updated = connection.execute(
                _jobs.update().where(*self._held(job, owner)).values(**values, **released)
            )
        return JobStatus(values["status"]) if updated.rowcount == 1 else None

    # -- reads -----------------------------------------------------------------------

    @staticmethod
    def _by_id(tenant_id: str, job_id: uuid.UUID) -> sa.Select[Any]:
        return sa.select(_jobs).where(_jobs.c.tenant_id == tenant_id, _jobs.c.id == job_id)

    def get(self, tenant_id: str, job_id: uuid.UUID) -> Job | None:
        """The job with that id in this tenant, or None."""
        with self._store.read() as connection:
            row = connection.execute(self._by_id(tenant_id, job_id)).first()
        return _job(row) if row is not None else None

    def ids_starting_with(self, tenant_id: str, prefix: str, *, limit: int = 2) -> list[uuid.UUID]:
        """Ids of the tenant's jobs that start with ``prefix`` (at most ``limit``), for
        shortened ids; ``ValueError`` when ``prefix`` is not hex."""
        with self._store.read() as connection:
            return tables.ids_starting_with(connection, _jobs, tenant_id, prefix, limit=limit)

    def depth(
        self, tenant_id: str | None = None, *, with_completed: bool = True
    ) -> dict[tuple[str, JobStatus], int]:
        """How many jobs there are by (kind, status), of one tenant or of all (one
        grouped statement). Kinds and statuses with no job are absent.

        ``with_completed=False`` leaves out the completed jobs, which only ever grow:
        the count then reads the ``ix_jobs_depth`` index of the others alone, as cheap
        as the backlog is small (what every metrics scrape does).
        """
        query = sa.select(_jobs.c.kind, _jobs.c.status, sa.func.count().label("jobs"))
        if tenant_id is not None:
            query = query.where(_jobs.c.tenant_id == tenant_id)
        if not with_completed:
            # Written as the index's own predicate, so SQLite uses it too.
            query = query.where(_jobs.c.status != JobStatus.COMPLETED.value)
        query = query.group_by(_jobs.c.kind, _jobs.c.status)
        with self._store.read() as connection:
            return {
                (row.kind, JobStatus(row.status)): row.jobs for row in connection.execute(query)
            }

    def list(
        self,
        tenant_id: str,
        *,
        statuses: Sequence[JobStatus] | None = None,
        outcomes: Sequence[JobOutcome] | None = None,
        kind: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> list[Job]:
        """The tenant's jobs, newest first."""
        query = sa.select(_jobs).where(_jobs.c.tenant_id == tenant_id)
        if statuses:
            query = query.where(_jobs.c.status.in_([status.value for status in statuses]))
        if outcomes:
            query = query.where(_jobs.c.outcome.in_([outcome.value for outcome in outcomes]))
        if kind is not None:
            query = query.where(_jobs.c.kind == kind)
        query = query.order_by(_jobs.c.queued_at.desc(), _jobs.c.id).limit(limit).offset(offset)
        with self._store.read() as connection:
            return [_job(row) for row in connection.execute(query)]
