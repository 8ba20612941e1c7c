"""The job queue, workers, retries and triggers, on both databases, with a fake clock."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft
from memsync.runtime.app.config import ApiKey, ApiSettings, JobsSettings, Settings
from memsync.runtime.app.services import NIGHTLY_COMPILE, Services, schedules_from_settings
from memsync.runtime.compiling import COMPILE_JOB as COMPILE
from memsync.runtime.ingest import IngestService
from memsync.runtime.jobs import (
    Job,
    JobOutcome,
    JobQueue,
    JobStatus,
    PermanentJobError,
    RetryPolicy,
    Schedule,
    Worker,
    fire_key,
)
from memsync.runtime.jobs.queue import RELEASE_HOLD
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import jobs
from memsync.stopping import FakeSleeper, StopRequested
from tests.jobs_support import LEASE, drafts, scalar, services, worker

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
NIGHTLY = Schedule(NIGHTLY_COMPILE, COMPILE, "0 3 * * *")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


def test_a_second_compile_request_coalesces_into_the_pending_job(store: Store) -> None:
    queue = JobQueue(store)
    first, first_new = queue.enqueue("acme", COMPILE, "ana", now=START)
    again, again_new = queue.enqueue("acme", COMPILE, "ana", now=START + timedelta(seconds=1))
    other, _ = queue.enqueue("acme", COMPILE, "bob", now=START)
    elsewhere, _ = queue.enqueue("globex", COMPILE, "ana", now=START)

    assert (first_new, again_new) == (True, False)
    assert again.id == first.id
    assert len({first.id, other.id, elsewhere.id}) == 3
    assert scalar(store, "SELECT count(*) FROM jobs") == 3


def test_the_database_refuses_a_second_pending_job_for_a_subject(store: Store) -> None:
    queue = JobQueue(store)
    queue.enqueue("acme", COMPILE, "ana", now=START)
    row = queue._row("acme", COMPILE, "ana", now=START, trigger="manual", dedup_key=None)
    with pytest.raises(sa.exc.IntegrityError), store.write() as connection:
        connection.execute(sa.insert(jobs), [row])


def test_a_worker_compiles_with_the_job_id_on_what_it_writes(
    store: Store, clock: FakeClock
) -> None:
    IngestService(store, clock).ingest("acme", drafts("ana", 3))
    job, _ = JobQueue(store).enqueue("acme", COMPILE, "ana", now=clock.now())

    ran = worker(store, clock).run_once()

    assert ran is not None
    assert ran.id == job.id
    done = JobQueue(store).get("acme", job.id)
    assert done is not None
    assert done.status is JobStatus.COMPLETED
    assert (done.attempts, done.error) == (1, None)
    assert done.result is not None
    assert done.result["memories_created"] > 0
    assert done.result["compile_id"] == str(job.id)
    created = scalar(store, "SELECT count(*) FROM memories")
    assert created == done.result["memories_created"] == len(done.result["memory_ids"])
    stamped = scalar(store, "SELECT count(*) FROM memories WHERE job_id = :job", job=str(job.id))
    assert stamped == created
    assert worker(store, clock).run_once() is None


def said(subject: str, key: str, text: str) -> list[EpisodeDraft]:
    payload = {"messages": [{"role": "user", "content": text}]}
    return [EpisodeDraft(subject, "chat", "message", payload, idempotency_key=key)]


def test_a_supersession_decided_by_a_job_records_the_job_id(store: Store, clock: FakeClock) -> None:
    queue, ingest = JobQueue(store), IngestService(store, clock)
    ingest.ingest("acme", said("ana", "m1", "I live in Lisbon."))
    queue.enqueue("acme", COMPILE, "ana", now=clock.now())
    worker(store, clock, queue=queue).run_once()
    clock.advance(timedelta(days=1))
    ingest.ingest("acme", said("ana", "m2", "I moved to Berlin, I live in Berlin now."))
    job, _ = queue.enqueue("acme", COMPILE, "ana", now=clock.now())
    worker(store, clock, queue=queue).run_once()

    recorded = scalar(store, "SELECT job_id FROM supersessions")
    assert recorded == str(job.id)


def test_a_job_whose_lease_expired_is_reclaimed_and_the_late_worker_cannot_finish_it(
    store: Store, clock: FakeClock
) -> None:
    queue = JobQueue(store)
    IngestService(store, clock).ingest("acme", drafts("ana", 2))
    queue.enqueue("acme", COMPILE, "ana", now=clock.now())
    lost = queue.claim("worker-a", now=clock.now(), lease=LEASE)
    assert lost is not None
    assert lost.attempts == 1
    assert queue.claim("worker-b", now=clock.now() + LEASE / 2, lease=LEASE) is None

    clock.advance(LEASE + timedelta(seconds=1))
    reclaimed = worker(store, clock, name="worker-b").run_once()

    assert reclaimed is not None
    assert reclaimed.id == lost.id
    assert reclaimed.attempts == 2
    assert queue.complete(lost, "worker-a", {"late": True}, now=clock.now()) is False
    done = queue.get("acme", lost.id)
    assert done is not None
    assert done.status is JobStatus.COMPLETED
    assert done.attempts == 2
    assert done.result is not None
    assert "late" not in done.result
    assert scalar(store, "SELECT count(*) FROM memories") == done.result["memories_created"] > 0


def test_a_lease_lost_on_the_last_attempt_fails_the_job_with_the_reason(
    store: Store, clock: FakeClock
) -> None:
    queue = JobQueue(store, RetryPolicy(max_attempts=1))
    job, _ = queue.enqueue("acme", COMPILE, "ana", now=clock.now())
    assert queue.claim("worker-a", now=clock.now(), lease=LEASE) is not None

    assert queue.claim("worker-b", now=clock.now() + LEASE * 2, lease=LEASE) is None

    failed = queue.get("acme", job.id)
    assert failed is not None
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    assert "lease expired" in failed.error


def flaky(failures: int, calls: list[Job]) -> Any:
    def handle(job: Job) -> Mapping[str, Any]:
        calls.append(job)
        if len(calls) <= failures:
            raise ConnectionError(f"source unavailable (call {len(calls)})")
        return {"ok": True}

    return handle


def test_transient_errors_are_retried_with_backoff_then_fail_keeping_the_error(
    store: Store, clock: FakeClock
) -> None:
    policy = RetryPolicy(max_attempts=3, base_delay=timedelta(seconds=10))
    queue = JobQueue(store, policy)
    job, _ = queue.enqueue("acme", "test", "x", now=clock.now())
    calls: list[Job] = []
    retrying = worker(store, clock, {"test": flaky(99, calls)}, queue=queue)

    assert retrying.run_once() is not None
    first = queue.get("acme", job.id)
    assert first is not None
    assert first.status is JobStatus.PENDING
    assert first.run_after == clock.now() + timedelta(seconds=10)
    assert first.error == "ConnectionError: source unavailable (call 1)"

    assert retrying.run_once() is None  # backing off
    clock.advance(timedelta(seconds=10))
    assert retrying.run_once() is not None
    second = queue.get("acme", job.id)
    assert second is not None
    assert second.run_after == clock.now() + timedelta(seconds=20)

    clock.advance(timedelta(seconds=20))
    assert retrying.run_once() is not None
    final = queue.get("acme", job.id)
    assert final is not None
    assert final.status is JobStatus.FAILED
    assert (final.attempts, final.error) == (3, "ConnectionError: source unavailable (call 3)")
    assert len(calls) == 3


def test_a_retry_that_succeeds_completes_the_job(store: Store, clock: FakeClock) -> None:
    queue = JobQueue(store, RetryPolicy(max_attempts=3, base_delay=timedelta(seconds=5)))
    job, _ = queue.enqueue("acme", "test", "x", now=clock.now())
    retrying = worker(store, clock, {"test": flaky(1, [])}, queue=queue)
    retrying.run_once()
    clock.advance(timedelta(seconds=5))
    retrying.run_once()
    done = queue.get("acme", job.id)
    assert done is not None
    assert done.status is JobStatus.COMPLETED
    assert (done.attempts, done.error, done.result) == (2, None, {"ok": True})


def test_a_permanent_error_fails_at_once(store: Store, clock: FakeClock) -> None:
    queue = JobQueue(store)

    def broken(_job: Job) -> Mapping[str, Any]:
        raise PermanentJobError("connector 'gh' is not configured")

    job, _ = queue.enqueue("acme", "test", "x", now=clock.now())
    worker(store, clock, {"test": broken}, queue=queue).run_once()
    failed = queue.get("acme", job.id)
    assert failed is not None
    assert failed.status is JobStatus.FAILED
    assert failed.attempts == 1
    assert failed.error == "PermanentJobError: connector 'gh' is not configured"


def stopped_during(calls: list[Job]) -> Any:
    """A handler whose work is cut short by a stop, as a sync in a retry wait is."""

    def handle(job: Job) -> Mapping[str, Any]:
        calls.append(job)
        raise StopRequested("GET /issues: stopped 0.2s into a 60s wait after attempt 1")

    return handle


def test_a_job_cut_short_by_a_stop_is_released_without_backoff_or_using_an_attempt(
    store: Store, clock: FakeClock
) -> None:
    queue = JobQueue(store, RetryPolicy(max_attempts=1))
    job, _ = queue.enqueue("acme", "test", "x", now=clock.now())
    calls: list[Job] = []

    assert worker(store, clock, {"test": stopped_during(calls)}, queue=queue).run_once()

    released = queue.get("acme", job.id)
    assert released is not None
    assert (released.status, released.attempts, released.lease_owner) == (
        JobStatus.PENDING,
        0,
        None,
    )
    # No backoff: the next worker takes it once the processes stopped with this one
    # have stopped claiming.
    assert released.run_after == clock.now() + RELEASE_HOLD
    assert released.error == (
        "released by a stopping worker: GET /issues: stopped 0.2s into a 60s wait after attempt 1"
    )
    # Not claimed during the hold (a sibling process stopping a moment later), then
    # run again, to the end, by the next worker, even on its only attempt.
    assert not worker(store, clock, {"test": flaky(0, calls)}, queue=queue).run_once()
    clock.advance(RELEASE_HOLD)
    assert worker(store, clock, {"test": flaky(0, calls)}, queue=queue).run_once()
    done = queue.get("acme", job.id)
    assert done is not None
    assert (done.status, done.attempts, done.error) == (JobStatus.COMPLETED, 1, None)
    assert len(calls) == 2


def claimed_by_worker_a(store: Store, clock: FakeClock) -> tuple[JobQueue, Job]:
    queue = JobQueue(store)
    queue.enqueue("acme", "test", "x", now=clock.now())
    job = queue.claim("worker-a", now=clock.now(), lease=LEASE)
    assert job is not None
    return queue, job


def test_a_release_by_a_worker_that_lost_the_lease_changes_nothing(
    store: Store, clock: FakeClock
) -> None:
    queue, lost = claimed_by_worker_a(store, clock)
    reclaimed = queue.claim("worker-b", now=clock.now() + LEASE * 2, lease=LEASE)
    assert reclaimed is not None

    assert queue.release(lost, "worker-a", "stopping", now=clock.now()) is None

    held = queue.get("acme", lost.id)
    assert held is not None
    assert (held.status, held.attempts, held.lease_owner) == (JobStatus.RUNNING, 2, "worker-b")


def test_a_released_job_whose_target_has_a_newer_pending_job_leaves_the_work_to_it(
    store: Store, clock: FakeClock
) -> None:
    queue, running = claimed_by_worker_a(store, clock)
    newer, created = queue.enqueue("acme", "test", "x", now=clock.now())
    assert created

    status = queue.release(running, "worker-a", "released by a stopping worker", now=clock.now())

    assert status is JobStatus.COMPLETED
    finished = queue.get("acme", running.id)
    assert finished is not None
    assert (finished.status, finished.outcome) == (JobStatus.COMPLETED, JobOutcome.PARTIAL)
    assert finished.error == (
        "released by a stopping worker (not released: a newer job of 'x' is pending)"
    )
    pending = queue.get("acme", newer.id)
    assert pending is not None
    assert pending.status is JobStatus.PENDING


def test_an_idle_worker_waits_on_the_stop_and_returns_when_it_is_requested(
    store: Store, clock: FakeClock
) -> None:
    stop = FakeSleeper(clock, stop_during_wait=3)

    worker(store, clock).run(stop)

    # Two idle polls of 0.02 s ran out; the third was cut short and the worker returned.
    assert stop.waits == [0.02, 0.02, 0.02]
    assert stop.stop_requested


def test_every_n_new_episodes_enqueue_one_coalesced_compile(store: Store, clock: FakeClock) -> None:
    queue = JobQueue(store)
    ingest = services(store, clock, JobsSettings(compile_every_n_episodes=3)).ingest

    ingest.ingest("acme", drafts("ana", 2))
    assert queue.list("acme") == []

    ingest.ingest("acme", drafts("ana", 1, start=2) + drafts("bob", 1))
    [job] = queue.list("acme")
    assert (job.target, job.status, job.trigger) == ("ana", JobStatus.PENDING, "every_n_episodes")

    ingest.ingest("acme", drafts("ana", 3, start=3))  # still pending: coalesced
    ingest.ingest("acme", drafts("ana", 6))  # duplicates only: nothing to count
    assert [j.id for j in queue.list("acme")] == [job.id]

    worker(store, clock, queue=queue).run_once()
    ingest.ingest("acme", drafts("ana", 2, start=6))
    assert len(queue.list("acme", statuses=[JobStatus.PENDING])) == 0
    ingest.ingest("acme", drafts("ana", 1, start=8))
    assert len(queue.list("acme", statuses=[JobStatus.PENDING])) == 1


def test_every_n_is_off_at_zero(store: Store, clock: FakeClock) -> None:
    queue = JobQueue(store)
    services(store, clock).ingest.ingest("acme", drafts("ana", 500))
    assert queue.list("acme") == []


def test_the_nightly_schedule_fires_at_local_time_across_daylight_saving() -> None:
    [nightly] = schedules_from_settings(
        JobsSettings(nightly_compile="0 3 * * *", timezone="Europe/Lisbon")
    )
    assert (nightly.id, nightly.job_kind) == (NIGHTLY_COMPILE, COMPILE)
    lookback = timedelta(days=1)
    winter = nightly.latest_fire_time(datetime(2026, 1, 10, 12, tzinfo=UTC), lookback)
    summer = nightly.latest_fire_time(datetime(2026, 7, 10, 12, tzinfo=UTC), lookback)
    assert winter == datetime(2026, 1, 10, 3, tzinfo=UTC)
    assert summer == datetime(2026, 7, 10, 2, tzinfo=UTC)
    before = datetime(2026, 7, 10, 1, tzinfo=UTC)
    assert nightly.latest_fire_time(before, timedelta(hours=1)) is None


def test_a_nightly_tick_compiles_every_subject_with_news_in_every_tenant_once(
    store: Store, clock: FakeClock
) -> None:
    ingest = IngestService(store, clock)
    ingest.ingest("acme", drafts("ana", 2) + drafts("bob", 1))
    ingest.ingest("globex", drafts("carol", 1))
    queue = JobQueue(store)
    firer = services(store, clock).schedule_firer
    nightly = Schedule(NIGHTLY_COMPILE, COMPILE, "0 3 * * *", "Europe/Lisbon")
    clock.set(datetime(2026, 3, 2, 3, 0, 5, tzinfo=UTC))
    tick = nightly.latest_fire_time(clock.now(), timedelta(hours=1))
    assert tick == datetime(2026, 3, 2, 3, 0, tzinfo=UTC)

    assert firer.fire(nightly, tick, now=clock.now()) == 3
    assert firer.fire(nightly, tick, now=clock.now()) == 0
    every = queue.list("acme") + queue.list("globex")
    assert sorted(job.target for job in every) == ["ana", "bob", "carol"]
    assert {job.dedup_key for job in every} == {fire_key(NIGHTLY_COMPILE, tick)}
    assert {job.trigger for job in every} == {"schedule:nightly-compile"}

    run = worker(store, clock, queue=queue)
    while run.run_once() is not None:
        pass
    # A late replica firing the same tick after the jobs ran enqueues nothing.
    assert firer.fire(nightly, tick, now=clock.now()) == 0
    assert scalar(store, "SELECT count(*) FROM jobs") == 3


def test_a_tick_coalesced_into_a_pending_job_is_not_enqueued_again_later(
    store: Store, clock: FakeClock
) -> None:
    IngestService(store, clock).ingest("acme", drafts("ana", 2))
    queue = JobQueue(store)
    manual, _ = queue.enqueue("acme", COMPILE, "ana", now=clock.now())
    firer = services(store, clock).schedule_firer

    assert firer.fire(NIGHTLY, START, now=clock.now()) == 0
    stamped = queue.get("acme", manual.id)
    assert stamped is not None
    assert stamped.dedup_key == fire_key(NIGHTLY_COMPILE, START)

    IngestService(store, clock).ingest("acme", drafts("ana", 1, start=5))
    worker(store, clock, queue=queue).run_once()
    IngestService(store, clock).ingest("acme", drafts("ana", 1, start=9))
    assert firer.fire(NIGHTLY, START, now=clock.now()) == 0
    later = START + timedelta(days=1)
    assert firer.fire(NIGHTLY, later, now=clock.now()) == 1


def test_a_schedule_of_a_kind_nobody_runs_is_refused(store: Store, clock: FakeClock) -> None:
    firer = services(store, clock).schedule_firer
    with pytest.raises(ValueError, match="no worker runs jobs of kind 'backfill'"):
        firer.fire(Schedule("gh-weekly", "backfill", "0 4 * * 0"), START, now=START)
    with pytest.raises(ValueError, match="kind 'sync' without a target"):
        firer.fire(Schedule("gh-hourly", "sync", "every 1h"), START, now=START)


def test_a_job_error_quoting_a_known_secret_is_stored_scrubbed(
    store: Store, clock: FakeClock
) -> None:
    settings = Settings(
        store="postgresql+psycopg://memsync:db-pass-123456@127.0.0.1/x",
        api=ApiSettings(keys=[ApiKey(name="ops", key="k-api-key-123456")]),
        connectors=[
            {"name": "gh", "type": "github", "repo": "acme/api", "token": "ghp_conn_123456",
             "subject": "repo:{repository}"}
        ],
    )  # fmt: skip
    scrub = Services(settings, store, clock).scrubber
    queue = JobQueue(store)

    def leaky(_job: Job) -> Mapping[str, Any]:
        raise RuntimeError("upstream echoed ghp_conn_123456, k-api-key-123456 and db-pass-123456")

    job, _ = queue.enqueue("acme", "test", "x", now=clock.now())
    Worker(queue, {"test": leaky}, clock=clock, lease=LEASE, scrub=scrub).run_once()

    failed = queue.get("acme", job.id)
    assert failed is not None
    assert failed.error == "RuntimeError: upstream echoed ***, *** and ***"
