"""SIGTERM stops a process running jobs within seconds, even while its connector waits
out a rate limit, and gives the sync job back to the queue for another worker; SIGINT
or SIGTERM stops a foreground ``sync`` or ``backfill`` there too, recording the run
``partial``, and the next run reads on from what it committed.

Each test runs memsync in a child process (``worker``, ``serve`` with its embedded
worker in one API process and in two, ``run``) syncing the real GitHub connector against
the fake GitHub on loopback, whose eleventh page answers "rate limited, reset in a
minute" (within the connector's retry cap, so the connector waits). Nothing sleeps:
the test polls the process's log and the store with deadlines.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pytest

from memsync.connectors.github.fake_api import FakeGitHub
from memsync.runtime.app.handlers import SYNC_JOB
from memsync.runtime.jobs import JobOutcome, JobQueue, JobStatus
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunStatus, SyncRepository
from tests.jobs_support import scalar, wait_until
from tests.processes import StderrLines, free_port, spawn

pytestmark = pytest.mark.slow

ISSUES = 1100
"""Eleven pages of 100 and a bit: the eleventh page is rate limited."""
RATE_LIMITED_PAGE = 11
READ_BEFORE_THE_LIMIT = 100 + 9 * 99
"""What the first ten pages hold: each keyset page after the first starts with the last
issue of the page before (``since`` is inclusive), a repeat. The run commits them when
the stop cuts it short."""
RESET_IN = 60
"""Seconds until the rate limit resets: the connector waits that long (the default
retry cap is ten minutes), unless a stop cuts the wait short."""
STOP_DEADLINE = 5.0
"""How long a stopped process may take to exit: the 2 s the stop itself needs, plus
tearing down an interpreter and its database connections on a busy two-core machine.
Far below RESET_IN, so a process that waited the rate limit out cannot pass."""

COMMANDS = {
    "worker": ("worker",),
    "serve": ("serve", "--workers", "1", "--processes", "1"),
    # Two API processes with a worker each: the signal reaches the job through the
    # parent, which stops every child.
    "serve-processes": ("serve", "--workers", "1", "--processes", "2"),
    "run": ("run",),
}


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=datetime(2024, 3, 1, tzinfo=UTC)) as fake:
        for number in range(1, ISSUES + 1):
            fake.add_issue("acme", "api", number, f"Issue {number}", "body")
        yield fake


def write_config(tmp_path: Path, github: FakeGitHub) -> Path:
    config = tmp_path / "memsync.yaml"
    config.write_text(
        f"api: {{port: {free_port()}}}\n"
        "jobs: {poll_seconds: 0.05}\n"
        "connectors:\n"
        "  - name: gh\n"
        "    type: github\n"
        "    repo: acme/api\n"
        "    token: ${GH_TEST_TOKEN}\n"
        f"    base_url: {github.base_url}\n"
        '    subject: "repo:{repository}"\n'
        "    streams: [issues]\n"
        "    schedule: manual\n"  # the one sync job is the test's
    )
    return config


def memsync(command: str, config: Path, store_url: str) -> subprocess.Popen[str]:
    return spawn(
        "-m", "memsync", "--config", str(config), *COMMANDS[command],
        store_url=store_url, environment={"GH_TEST_TOKEN": "t"},
    )  # fmt: skip


def exit_code_within(process: subprocess.Popen[str], deadline: float) -> int:
    try:
        return process.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the process was still running {deadline:g}s after SIGTERM") from None


def episode_keys(store: Store) -> list[str]:
    with store.read() as connection:
        rows = connection.exec_driver_sql("SELECT idempotency_key FROM episodes")
        return [row[0] for row in rows]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_sigterm_in_a_rate_limit_wait_stops_the_process_and_another_worker_finishes_the_job(
    command: str,
    store: Store,
    store_url: str,
    tmp_path: Path,
    github: FakeGitHub,
    processes: list[subprocess.Popen[str]],
) -> None:
    config = write_config(tmp_path, github)
    queue = JobQueue(store)
    job, _ = queue.enqueue("default", SYNC_JOB, "gh", now=datetime.now(UTC))
    limit = github.script_rate_limit(
        "primary",
        path=r"/issues$",
        on_request_number=RATE_LIMITED_PAGE,
        reset_at=int(time.time()) + RESET_IN,
    )

    first = memsync(command, config, store_url)
    processes.append(first)
    log = StderrLines(first)
    log.wait_for('"request retried"', '"rate limited"', timeout=120)
    first.send_signal(signal.SIGTERM)

    assert exit_code_within(first, STOP_DEADLINE) == 0, log.text()
    log.close()
    assert '"job released"' in log.text()
    released = queue.get("default", job.id)
    assert released is not None
    assert (released.status, released.attempts, released.lease_owner) == (
        JobStatus.PENDING,
        0,
        None,
    )
    assert released.error is not None
    assert released.error.startswith("released by a stopping worker: sync run ")
    [interrupted] = SyncRepository(store).list_runs("default")
    assert interrupted.status is RunStatus.PARTIAL
    assert interrupted.error is not None
    assert interrupted.error.startswith("interrupted: github 'gh': GET /repos/acme/api/issues")
    assert interrupted.created == len(episode_keys(store)) == READ_BEFORE_THE_LIMIT  # kept

    second = memsync("worker", config, store_url)
    processes.append(second)
    wait_until(
        lambda: scalar(store, "SELECT status FROM jobs") == JobStatus.COMPLETED.value,
        timeout=120,
        what="the second worker to finish the released job",
    )
    second.send_signal(signal.SIGTERM)
    assert exit_code_within(second, STOP_DEADLINE) == 0

    done = queue.get("default", job.id)
    assert done is not None
    assert (done.status, done.outcome, done.attempts) == (
        JobStatus.COMPLETED,
        JobOutcome.SUCCEEDED,
        1,
    )
    assert limit.served == 1
    keys = episode_keys(store)
    assert len(keys) == len(set(keys)) == ISSUES


FOREGROUND = {
    "sync": ("sync", "gh", "--json"),
    "backfill": ("backfill", "gh", "--since", "2024-02-01", "--slice", "3650d", "--json"),
}


@pytest.mark.parametrize(
    ("command", "stop"),
    [
        ("sync", signal.SIGINT),
        ("sync", signal.SIGTERM),
        ("backfill", signal.SIGINT),
        ("backfill", signal.SIGTERM),
    ],
)
def test_a_signal_during_a_foreground_run_records_it_partial_and_the_rerun_reads_on(
    command: str,
    stop: signal.Signals,
    store: Store,
    store_url: str,
    tmp_path: Path,
    github: FakeGitHub,
    processes: list[subprocess.Popen[str]],
) -> None:
    config = write_config(tmp_path, github)
    limit = github.script_rate_limit(
        "primary",
        path=r"/issues$",
        on_request_number=RATE_LIMITED_PAGE,
        reset_at=int(time.time()) + RESET_IN,
    )

    def foreground() -> subprocess.Popen[str]:
        process = spawn(
            "-m", "memsync", "--config", str(config), *FOREGROUND[command],
            store_url=store_url, environment={"GH_TEST_TOKEN": "t"},
        )  # fmt: skip
        processes.append(process)
        return process

    first = foreground()
    log = StderrLines(first)
    log.wait_for('"request retried"', '"rate limited"', timeout=120)
    first.send_signal(stop)

    assert exit_code_within(first, STOP_DEADLINE) == 128 + stop  # 130 SIGINT, 143 SIGTERM
    log.close()
    assert first.stdout is not None
    printed = json.loads(first.stdout.read())
    assert f"{stop.name}: stopping gh at the next safe point" in log.text()
    assert "Traceback" not in log.text()
    [interrupted] = SyncRepository(store).list_runs("default")
    assert (interrupted.id, interrupted.status.value) == (UUID(printed["id"]), "partial")
    assert interrupted.error is not None
    assert interrupted.error.startswith("interrupted: github 'gh': GET /repos/acme/api/issues")
    assert interrupted.created == len(episode_keys(store)) == READ_BEFORE_THE_LIMIT  # kept

    second = foreground()
    out, err = second.communicate(timeout=120)

    assert second.returncode == 0, err
    resumed = json.loads(out)
    assert resumed["status"] == "succeeded"
    assert resumed["created"] == ISSUES - READ_BEFORE_THE_LIMIT
    assert limit.served == 1
    keys = episode_keys(store)
    assert len(keys) == len(set(keys)) == ISSUES
    if command == "sync":
        # The first run read from the beginning; the second from its checkpoint.
        assert interrupted.window_start is None
        assert resumed["window_start"] is not None
    else:
        # The same backfill, resumed at its slice not done.
        assert resumed["backfill_id"] == str(interrupted.backfill_id)
