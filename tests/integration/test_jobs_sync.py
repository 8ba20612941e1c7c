"""Connector schedules enqueue sync jobs; workers run them through the sync runner."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memsync.clock import FakeClock
from memsync.connectors import RateLimitExhausted, RetryableError, StopRun
from memsync.connectors.config import ConnectorConfig
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.runtime.app.config import JobsSettings, load_settings
from memsync.runtime.app.handlers import SYNC_JOB as SYNC
from memsync.runtime.app.handlers import sync_handler
from memsync.runtime.app.services import NIGHTLY_COMPILE, Services, schedules_from_settings
from memsync.runtime.compiling import COMPILE_JOB as COMPILE
from memsync.runtime.ingest import IngestService
from memsync.runtime.jobs import (
    JobOutcome,
    JobQueue,
    JobStatus,
    RetryPolicy,
    Schedule,
    Worker,
    fire_key,
)
from memsync.runtime.jobs.queue import FOLLOW_UP
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunRecord, RunStatus, SyncRepository, SyncRunner
from tests.helpers import BlockingConnector
from tests.jobs_support import scalar, services, worker

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def config(name: str = "notes", tenant: str = "acme", schedule: str = "every 15m") -> FakeConfig:
    return FakeConfig.model_validate(
        {"name": name, "subject": "thing:{id}", "tenant": tenant, "schedule": schedule}
    )


def records(count: int) -> list[FakeRecord]:
    return [
        FakeRecord(id=f"r{i}", updated_at=T0 + timedelta(minutes=i), body=f"v{i}")
        for i in range(count)
    ]


def sync_worker(
    store: Store,
    clock: FakeClock,
    connector: FakeConnector,
    queue: JobQueue,
    batch_size: int = 1000,
) -> Worker:
    """A worker whose sync jobs run ``connector`` (the fake stands in for the registry)."""
    runner = SyncRunner(
        SyncRepository(store),
        IngestService(store, clock),
        clock=clock,
        heartbeat_every=None,
        batch_size=batch_size,
    )

    def sync_one(configured: ConnectorConfig) -> RunRecord:
        assert configured == connector.config
        return runner.sync(connector)

    configs = {(connector.config.tenant, connector.config.name): connector.config}
    handlers = {SYNC: sync_handler(configs, sync_one)}
    return worker(store, clock, handlers, queue=queue)


def test_every_connector_gets_a_sync_schedule_with_a_stable_id() -> None:
    jobs = JobsSettings(nightly_compile="0 3 * * *", timezone="Europe/Lisbon")
    connectors = [
        config("notes"),
        config("tickets", tenant="globex", schedule="*/5 * * * *"),
        config("archive", schedule="manual"),  # never scheduled
    ]

    schedules = schedules_from_settings(jobs, connectors)

    assert schedules == schedules_from_settings(jobs, connectors)
    assert [(s.id, s.job_kind, s.expression, s.target) for s in schedules] == [
        (NIGHTLY_COMPILE, COMPILE, "0 3 * * *", None),
        ("sync:acme:notes", SYNC, "every 15m", ("acme", "notes")),
        ("sync:globex:tickets", SYNC, "*/5 * * * *", ("globex", "tickets")),
    ]


def test_interval_schedules_tick_on_the_same_grid_for_every_replica() -> None:
    every_15m = Schedule("sync:acme:notes", SYNC, "every 15m", target=("acme", "notes"))
    now = datetime(2026, 3, 1, 10, 7, 30, tzinfo=UTC)

    assert every_15m.latest_fire_time(now, timedelta(hours=1)) == datetime(
        2026, 3, 1, 10, 0, tzinfo=UTC
    )
    assert every_15m.latest_fire_time(now, timedelta(minutes=5)) is None
    on_the_tick = datetime(2026, 3, 1, 10, 15, tzinfo=UTC)
    assert every_15m.latest_fire_time(on_the_tick, timedelta(hours=1)) == on_the_tick


def test_a_manual_schedule_has_no_trigger() -> None:
    manual = Schedule("sync:acme:archive", SYNC, "manual", target=("acme", "archive"))
    with pytest.raises(ValueError, match="is manual: it never fires"):
        manual.trigger()


def test_a_sync_tick_is_enqueued_once_however_many_schedulers_fire_it(store: Store) -> None:
    queue = JobQueue(store)
    schedule = schedules_from_settings(JobsSettings(), [config()])[0]
    tick = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
    clock = FakeClock(tick)
    replicas = [services(store, clock).schedule_firer, services(store, clock).schedule_firer]

    assert [firer.fire(schedule, tick, now=tick) for firer in replicas] == [1, 0]
    [job] = queue.list("acme")
    assert (job.kind, job.target, job.trigger) == (SYNC, "notes", "schedule:sync:acme:notes")
    assert job.dedup_key == fire_key(schedule.id, tick)

    # The next tick, while the first job still waits, coalesces into it: a slow
    # connector never has two syncs queued.
    later = tick + timedelta(minutes=15)
    assert replicas[0].fire(schedule, later, now=later) == 0
    assert len(queue.list("acme")) == 1


def test_a_worker_runs_a_sync_job_and_a_rerun_stores_nothing_new(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    queue = JobQueue(store)
    connector = FakeConnector(config(), records(5))
    run = sync_worker(store, clock, connector, queue)

    first, _ = queue.enqueue("acme", SYNC, "notes", now=clock.now())
    assert run.run_once() is not None
    clock.advance(timedelta(minutes=15))
    second, _ = queue.enqueue("acme", SYNC, "notes", now=clock.now())
    assert run.run_once() is not None

    done = [queue.get("acme", job.id) for job in (first, second)]
    assert [job.status for job in done if job] == [JobStatus.COMPLETED] * 2
    results = [job.result for job in done if job and job.result]
    assert [(r["run_status"], r["created"], r["duplicates"]) for r in results] == [
        (RunStatus.SUCCEEDED.value, 5, 0),
        (RunStatus.SUCCEEDED.value, 0, 5),
    ]
    assert scalar(store, "SELECT count(*) FROM episodes") == 5
    assert scalar(store, "SELECT count(*) FROM sync_runs WHERE status = 'succeeded'") == 2


def test_a_failed_run_fails_the_attempt_and_the_job_is_retried_until_it_succeeds(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    queue = JobQueue(store, RetryPolicy(max_attempts=3, base_delay=timedelta(seconds=30)))
    connector = FakeConnector(config(), records(3))
    connector.fail_at("r0", RetryableError("source answered 503"), times=100)
    run = sync_worker(store, clock, connector, queue)
    job, _ = queue.enqueue("acme", SYNC, "notes", now=clock.now())

    run.run_once()
    retrying = queue.get("acme", job.id)
    assert retrying is not None
    assert retrying.status is JobStatus.PENDING
    assert retrying.error is not None
    assert retrying.error.startswith("SyncRunFailed: sync run ")
    assert "503" in retrying.error
    assert scalar(store, "SELECT count(*) FROM sync_runs WHERE status = 'failed'") == 1

    connector.fail_at("r0", RetryableError("source answered 503"), times=0)
    clock.advance(timedelta(seconds=31))
    run.run_once()
    done = queue.get("acme", job.id)
    assert done is not None
    assert (done.status, done.attempts) == (JobStatus.COMPLETED, 2)
    assert done.result is not None
    assert done.result["created"] == 3


def test_a_job_for_a_connector_no_longer_configured_fails_for_good(store: Store) -> None:
    clock = FakeClock(T0)
    queue = JobQueue(store)
    run = sync_worker(store, clock, FakeConnector(config("notes")), queue)
    job, _ = queue.enqueue("acme", SYNC, "removed", now=clock.now())

    run.run_once()

    failed = queue.get("acme", job.id)
    assert failed is not None
    assert (failed.status, failed.attempts) == (JobStatus.FAILED, 1)
    assert failed.error is not None
    assert "no connector named 'removed' for tenant 'acme'" in failed.error


def test_a_job_for_a_connector_whose_secret_this_worker_lacks_needs_attention(
    store: Store, tmp_path: Path
) -> None:
    path = tmp_path / "memsync.yaml"
    path.write_text(
        "connectors:\n"
        "  - {name: tickets, type: zendesk, tenant: acme, subject: 'org:{organization_id}',"
        " subdomain: acme, email: bot@acme.test, token: '${UNSET_IN_THIS_TEST}'}\n"
    )
    clock = FakeClock(T0)
    composed = Services(load_settings(path, environ={}), store, clock)
    # Scheduled as any connector: enqueuing needs no secret; running it does.
    [schedule] = composed.schedules
    assert schedule.target == ("acme", "tickets")
    job, _ = composed.queue.enqueue("acme", SYNC, "tickets", now=clock.now())

    composed.worker().run_once()

    failed = composed.queue.get("acme", job.id)
    assert failed is not None
    assert (failed.status, failed.outcome, failed.attempts) == (
        JobStatus.FAILED,
        JobOutcome.NEEDS_ATTENTION,
        1,
    )
    assert failed.error == (
        f"NeedsAttention: connector 'tickets' in {path}: token: environment variable "
        "UNSET_IN_THIS_TEST is not set (set it, or write ${UNSET_IN_THIS_TEST:-default})"
    )
    assert scalar(store, "SELECT count(*) FROM sync_runs") == 0


def test_a_sync_job_runs_the_connector_of_its_own_tenant_only(store: Store) -> None:
    tenant = "globex"
    clock = FakeClock(T0)
    queue = JobQueue(store)
    run = sync_worker(store, clock, FakeConnector(config("notes", tenant="acme")), queue)
    job, _ = queue.enqueue(tenant, SYNC, "notes", now=clock.now())

    run.run_once()

    failed = queue.get(tenant, job.id)
    assert failed is not None
    assert failed.status is JobStatus.FAILED
    assert scalar(store, "SELECT count(*) FROM sync_runs") == 0


def test_a_sync_job_waits_while_another_run_of_the_connector_is_going(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    queue = JobQueue(store, RetryPolicy(max_attempts=3, base_delay=timedelta(seconds=30)))
    manual = BlockingConnector(config(), records(3), block_at="r1")
    manual_run = threading.Thread(
        target=SyncRunner(
            SyncRepository(store), IngestService(store, clock), clock=clock, heartbeat_every=None
        ).sync,
        args=(manual,),
    )
    manual_run.start()
    try:
        assert manual.reached.wait(timeout=60)
        run = sync_worker(store, clock, FakeConnector(config(), records(3)), queue)
        job, _ = queue.enqueue("acme", SYNC, "notes", now=clock.now())
        run.run_once()
        waiting = queue.get("acme", job.id)
        assert waiting is not None
        assert waiting.status is JobStatus.PENDING
        assert waiting.error is not None
        assert waiting.error.startswith("RunInProgress: connector 'notes'")
    finally:
        manual.release.set()
        manual_run.join(timeout=60)

    clock.advance(timedelta(seconds=31))
    run.run_once()
    done = queue.get("acme", job.id)
    assert done is not None
    assert (done.status, done.attempts) == (JobStatus.COMPLETED, 2)
    assert scalar(store, "SELECT count(*) FROM sync_runs WHERE status = 'running'") == 0


def test_an_error_a_person_must_fix_fails_the_job_at_once_needing_attention(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    queue = JobQueue(store)
    connector = FakeConnector(config(), records(3))
    connector.fail_at("r0", StopRun("HTTP 401: the source refused the token"), times=100)
    job, _ = queue.enqueue("acme", SYNC, "notes", now=clock.now())

    sync_worker(store, clock, connector, queue).run_once()

    failed = queue.get("acme", job.id)
    assert failed is not None
    assert (failed.status, failed.outcome, failed.attempts) == (
        JobStatus.FAILED,
        JobOutcome.NEEDS_ATTENTION,
        1,
    )
    assert failed.error is not None
    assert "401" in failed.error
    [run] = SyncRepository(store).list_runs("acme")
    assert run.needs_attention


def test_a_long_rate_limit_ends_the_job_partial_and_enqueues_a_follow_up_at_the_reset(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    queue = JobQueue(store)
    connector = FakeConnector(config(), records(3))
    limited = RateLimitExhausted("rate limited", attempts=1, waited=0, retry_after=3600)
    connector.fail_at("r2", limited, times=1)
    job, _ = queue.enqueue("acme", SYNC, "notes", now=clock.now())

    sync_worker(store, clock, connector, queue, batch_size=1).run_once()

    done = queue.get("acme", job.id)
    assert done is not None
    assert (done.status, done.outcome) == (JobStatus.COMPLETED, JobOutcome.PARTIAL)
    assert done.result is not None
    assert (done.result["run_status"], done.result["created"]) == ("partial", 2)
    [follow_up] = queue.list("acme", statuses=[JobStatus.PENDING])
    assert (follow_up.kind, follow_up.target, follow_up.trigger) == (SYNC, "notes", FOLLOW_UP)
    assert follow_up.run_after == clock.now() + timedelta(seconds=3600)
    assert queue.list("acme", outcomes=[JobOutcome.PARTIAL]) == [done]


def test_a_rate_limit_before_anything_is_stored_retries_the_job_at_the_reset(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    queue = JobQueue(store)
    connector = FakeConnector(config(), records(3))
    limited = RateLimitExhausted("rate limited", attempts=1, waited=0, retry_after=1800)
    connector.fail_at("r0", limited, times=1)
    job, _ = queue.enqueue("acme", SYNC, "notes", now=clock.now())
    run = sync_worker(store, clock, connector, queue)

    run.run_once()
    waiting = queue.get("acme", job.id)
    assert waiting is not None
    assert (waiting.status, waiting.attempts) == (JobStatus.PENDING, 1)
    assert waiting.run_after == clock.now() + timedelta(seconds=1800)
    assert waiting.error is not None
    assert "retrying at 2026-03-01T01:30:00+00:00" in waiting.error

    assert run.run_once() is None  # not before the reset
    clock.advance(timedelta(seconds=1800))
    run.run_once()
    done = queue.get("acme", job.id)
    assert done is not None
    assert (done.status, done.outcome, done.attempts) == (
        JobStatus.COMPLETED,
        JobOutcome.SUCCEEDED,
        2,
    )


def test_a_partial_run_without_a_known_reset_completes_partial_with_no_follow_up(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(hours=1))
    queue = JobQueue(store)
    connector = FakeConnector(config(), records(3))
    connector.fail_at("r1", RetryableError("source answered 503"), times=1)
    job, _ = queue.enqueue("acme", SYNC, "notes", now=clock.now())

    sync_worker(store, clock, connector, queue, batch_size=1).run_once()

    done = queue.get("acme", job.id)
    assert done is not None
    assert (done.status, done.outcome) == (JobStatus.COMPLETED, JobOutcome.PARTIAL)
    assert queue.list("acme", statuses=[JobStatus.PENDING]) == []
