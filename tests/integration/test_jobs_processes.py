"""Workers and schedulers as separate processes sharing one database.

No test sleeps for real time: processes are awaited by polling the database with a
deadline, and lease expiry is reached by giving the rescuing worker a clock that is
past the lease (a FakeClock), not by waiting for it.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft
from memsync.runtime.app.handlers import compile_handler
from memsync.runtime.app.services import NIGHTLY_COMPILE
from memsync.runtime.compiling import COMPILE_JOB as COMPILE
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.jobs import (
    JobQueue,
    JobStatus,
    Schedule,
    ScheduleFirer,
    fire_key,
)
from memsync.runtime.storage import Store
from tests.jobs_support import (
    BLOCKING_KIND,
    MID_COMPILE_CHUNK,
    blocking_handler,
    drafts,
    scalar,
    services,
    wait_until,
    worker,
)
from tests.processes import spawn

pytestmark = pytest.mark.slow

CLI = ("-m", "memsync")


def wait_for_line(process: subprocess.Popen[str], *texts: str) -> None:
    """Read the process's stderr until a line contains every one of ``texts`` (EOF: it
    died)."""
    assert process.stderr is not None
    for line in process.stderr:
        if all(text in line for text in texts):
            return
    raise AssertionError(f"the process exited before saying {texts!r}")


@pytest.fixture
def fast_config(tmp_path: Path) -> Path:
    config = tmp_path / "memsync.yaml"
    config.write_text("jobs:\n  poll_seconds: 0.05\n")
    return config


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr


def test_a_worker_killed_mid_job_is_replaced_after_its_lease_and_nothing_is_duplicated(
    store: Store, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    IngestService(store).ingest("acme", drafts("ana", 5))
    queue = JobQueue(store)
    job, _ = queue.enqueue("acme", BLOCKING_KIND, "ana", now=datetime.now(UTC))
    release = tmp_path / "release"

    doomed = spawn("-m", "tests.jobs_child", store_url, str(release), store_url=store_url)
    processes.append(doomed)
    wait_until(
        lambda: scalar(store, "SELECT attempts FROM jobs WHERE status = 'running'") == 1,
        what="the doomed worker to claim the job",
    )
    doomed.kill()  # SIGKILL: no cleanup, the lease stays
    doomed.communicate(timeout=30)
    release.touch()

    claimed = queue.get("acme", job.id)
    assert claimed is not None
    assert claimed.lease_owner == "doomed"
    assert claimed.lease_expires_at is not None
    after_lease = FakeClock(claimed.lease_expires_at + timedelta(seconds=1))
    handlers = {BLOCKING_KIND: blocking_handler(CompileService(store), queue, release)}
    rescuer = worker(store, after_lease, handlers, name="rescuer")
    assert worker(store, FakeClock(claimed.lease_expires_at), handlers).run_once() is None
    assert rescuer.run_once() is not None

    done = queue.get("acme", job.id)
    assert done is not None
    assert (done.status, done.attempts, done.lease_owner) == (JobStatus.COMPLETED, 2, None)
    assert done.result is not None
    memories = scalar(store, "SELECT count(*) FROM memories")
    distinct = scalar(store, "SELECT count(DISTINCT memory_key) FROM memories")
    assert memories == distinct == done.result["memories_created"] > 0
    assert CompileService(store).compile("acme", "ana").memories_created == 0


def moves(subject: str) -> list[EpisodeDraft]:
    """Episodes in a fixed time order whose compile creates, merges and supersedes."""
    texts = [f"I use {tool} at work." for tool in ("Postgres", "Redis", "Kafka", "Postgres")]
    texts += [f"I live in {city}." for city in ("Lisbon", "Porto", "Berlin", "Lisbon")]
    texts += [f"I use {tool} at work." for tool in ("Rust", "Go")]
    return [
        EpisodeDraft(
            subject_id=subject,
            source="chat",
            type="message",
            payload={"messages": [{"role": "user", "content": text}]},
            idempotency_key=f"{subject}:{index}",
            occurred_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(hours=index),
        )
        for index, text in enumerate(texts)
    ]


COUNTS = ("episodes_compiled", "memories_created", "memories_superseded", "conflicts_opened")


def compiled_so_far(queue: JobQueue, tenant: str, job_id: uuid.UUID) -> int:
    """How many episodes a compile job's committed chunks have compiled."""
    job = queue.get(tenant, job_id)
    return 0 if job is None or job.result is None else int(job.result["episodes_compiled"])


def test_a_worker_killed_mid_compile_leaves_a_job_whose_counts_equal_a_clean_runs(
    store: Store, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    ingest = IngestService(store)
    ingest.ingest("clean", moves("ana"))
    ingest.ingest("acme", moves("ana"))
    queue = JobQueue(store)
    now = datetime.now(UTC)
    clean_job, _ = queue.enqueue("clean", COMPILE, "ana", now=now)
    compiler = CompileService(store, chunk_episodes=MID_COMPILE_CHUNK)
    handlers = {COMPILE: compile_handler(compiler, queue)}
    assert worker(store, FakeClock(now), handlers, queue=queue).run_once() is not None
    crashed_job, _ = queue.enqueue("acme", COMPILE, "ana", now=now)
    reached, release = tmp_path / "reached", tmp_path / "release"

    doomed = spawn(
        "-m", "tests.jobs_child", store_url, str(release), "--mid-compile", str(reached),
        store_url=store_url,
    )  # fmt: skip
    processes.append(doomed)
    wait_until(reached.exists, what="the doomed worker to reach its third chunk")
    # The third chunk is derived ahead, while the second one writes: kill once the
    # second has committed, so that what is killed is the third chunk.
    wait_until(
        lambda: compiled_so_far(queue, "acme", crashed_job.id) == 2 * MID_COMPILE_CHUNK,
        what="the doomed worker to commit its second chunk",
    )
    doomed.kill()  # SIGKILL inside the third chunk
    doomed.communicate(timeout=30)
    killed = queue.get("acme", crashed_job.id)
    assert killed is not None
    assert killed.result is not None
    # Two chunks committed their episodes and, in the same transactions, their counts.
    assert killed.result["episodes_compiled"] == 2 * MID_COMPILE_CHUNK
    assert killed.lease_expires_at is not None
    rescuer = worker(store, FakeClock(killed.lease_expires_at + timedelta(seconds=1)), handlers)
    assert rescuer.run_once() is not None

    clean, crashed = queue.get("clean", clean_job.id), queue.get("acme", crashed_job.id)
    assert clean is not None
    assert crashed is not None
    assert crashed.status is JobStatus.COMPLETED
    assert crashed.attempts == 2
    assert clean.result is not None
    assert crashed.result is not None
    assert {name: crashed.result[name] for name in COUNTS} == {
        name: clean.result[name] for name in COUNTS
    }
    assert clean.result["memories_superseded"] > 0
    assert len(crashed.result["memory_ids"]) == len(clean.result["memory_ids"])
    stored = scalar(store, "SELECT count(*) FROM memories WHERE tenant_id = 'acme'")
    assert stored == crashed.result["memories_created"]


NIGHTLY = Schedule(NIGHTLY_COMPILE, COMPILE, "0 3 * * *")


def fire_together(firers: list[ScheduleFirer], tick: datetime) -> list[int]:
    """Every firer fires ``tick`` at the same moment, each from its own thread."""
    together = threading.Barrier(len(firers))
    created: list[int] = []

    def fire(firer: ScheduleFirer) -> None:
        together.wait(timeout=30)
        created.append(firer.fire(NIGHTLY, tick, now=tick))

    threads = [threading.Thread(target=fire, args=(firer,)) for firer in firers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return created


def test_two_schedulers_and_two_worker_processes_enqueue_each_tick_once_and_run_each_job_once(
    store: Store,
    store_url: str,
    fast_config: Path,
    processes: list[subprocess.Popen[str]],
) -> None:
    for _ in range(2):
        processes.append(spawn(*CLI, "--config", str(fast_config), "worker", store_url=store_url))
    for process in processes:
        # SIGTERM before the handlers are installed would kill the process outright.
        wait_for_line(process, "worker ready")
    ingest = IngestService(store)
    clock = FakeClock(ticks_start := datetime(2026, 5, 1, 3, tzinfo=UTC))
    firers = [
        services(store, clock).schedule_firer,
        services(Store.from_url(store_url), clock).schedule_firer,
    ]
    ticks = [ticks_start + timedelta(days=day) for day in range(6)]
    subjects = {tick: [f"day{i}-user{j}" for j in range(3)] for i, tick in enumerate(ticks)}

    for tick in ticks:
        for subject in subjects[tick]:
            ingest.ingest("acme", drafts(subject, 2))
        # Which replica wins each target is a race; that the tick lands once is not.
        assert sum(fire_together(firers, tick)) >= len(subjects[tick])

    # A generous deadline: two worker processes start and compile 18 subjects, and CI
    # runs this on two cores next to PostgreSQL.
    wait_until(
        lambda: scalar(store, "SELECT count(*) FROM jobs WHERE status <> 'completed'") == 0,
        timeout=240,
        what="the workers to finish every job",
    )
    for process in processes:
        returncode, stderr = stop(process)
        assert returncode == 0, stderr

    for tick in ticks:
        key = fire_key(NIGHTLY_COMPILE, tick)
        with store.read() as connection:
            rows = connection.execute(
                sa.text("SELECT target FROM jobs WHERE dedup_key = :k ORDER BY target"),
                {"k": key},
            ).all()
        tick_targets = [row.target for row in rows]
        assert set(subjects[tick]) <= set(tick_targets)
        assert len(tick_targets) == len(set(tick_targets))
    assert scalar(store, "SELECT max(attempts) FROM jobs") == 1
    assert scalar(store, "SELECT count(*) FROM episodes WHERE compiled_revision < revision") == 0
    assert scalar(store, "SELECT count(*) FROM memories") == scalar(
        store, "SELECT count(DISTINCT memory_key || subject_id) FROM memories"
    )


def test_the_scheduler_process_catches_up_the_latest_tick_and_exits_0_on_sigterm(
    store: Store, store_url: str, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    IngestService(store).ingest("acme", drafts("ana", 2) + drafts("bob", 2))
    config = tmp_path / "memsync.yaml"
    config.write_text("jobs:\n  nightly_compile: '* * * * *'\n  timezone: Europe/Lisbon\n")
    scheduler = spawn(*CLI, "--config", str(config), "scheduler", store_url=store_url)
    processes.append(scheduler)

    wait_until(
        lambda: scalar(store, "SELECT count(*) FROM jobs") == 2,
        what="the scheduler to enqueue the missed tick",
    )
    returncode, stderr = stop(scheduler)

    assert returncode == 0, stderr
    assert scalar(store, "SELECT count(DISTINCT dedup_key) FROM jobs") == 1
    assert scalar(store, "SELECT min(trigger) FROM jobs") == "schedule:nightly-compile"


def test_two_scheduler_processes_enqueue_a_connector_tick_once_and_its_runs_never_overlap(
    store_url: str, store: Store, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "NOTES.md").write_text("We decided to use Postgres for the queue.\n")
    config = tmp_path / "memsync.yaml"
    config.write_text(
        "jobs: {poll_seconds: 0.05}\n"
        "connectors:\n"
        f"  - {{name: notes, type: workspace, subject: 'ws:notes', root: '{workspace}',"
        " schedule: every 1m}\n"
    )
    schedulers = [
        spawn(*CLI, "--config", str(config), "scheduler", store_url=store_url) for _ in range(2)
    ]
    processes.extend(schedulers)
    for scheduler in schedulers:
        # Each catches up the latest `every 1m` tick as it starts.
        wait_for_line(scheduler, '"schedule fired"', '"sync:default:notes"')
    workers = [
        spawn(*CLI, "--config", str(config), "worker", store_url=store_url) for _ in range(2)
    ]
    processes.extend(workers)
    wait_until(
        lambda: scalar(store, "SELECT count(*) FROM jobs WHERE status <> 'completed'") == 0,
        timeout=120,
        what="the workers to run the sync jobs",
    )
    for process in schedulers + workers:
        returncode, stderr = stop(process)
        assert returncode == 0, stderr

    ticks = scalar(store, "SELECT count(DISTINCT dedup_key) FROM jobs WHERE kind = 'sync'")
    jobs = scalar(store, "SELECT count(*) FROM jobs WHERE kind = 'sync'")
    # Usually both schedulers start within the same minute: one tick, one job.
    assert 1 <= jobs <= ticks <= 2
    assert scalar(store, "SELECT max(attempts) FROM jobs") == 1
    with store.read() as connection:
        runs = connection.execute(
            sa.text("SELECT started_at, finished_at, status FROM sync_runs ORDER BY started_at")
        ).all()
    assert len(runs) == jobs
    assert {run.status for run in runs} == {"succeeded"}
    for earlier, later in itertools.pairwise(runs):
        assert earlier.finished_at <= later.started_at
