"""The job commands in subprocesses: ``compile --async``, ``worker``, ``jobs wait``, ``run``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.jobs_support import wait_until
from tests.processes import free_port

pytestmark = pytest.mark.slow


def write_config(tmp_path: Path, *, port: int = 8100) -> Path:
    """A SQLite store and one workspace connector over a two-file workspace."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "NOTES.md").write_text("We decided to use Postgres for the queue.\n")
    (workspace / "TODO.md").write_text("I prefer small commits.\n")
    config = tmp_path / "memsync.yaml"
    config.write_text(
        f"""
store: sqlite:///{tmp_path}/memsync.db
api: {{port: {port}}}
jobs: {{poll_seconds: 0.05}}
connectors:
  - name: notes
    type: workspace
    subject: "ws:notes"
    root: {workspace}
    schedule: every 1m
"""
    )
    return config


def environment(config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    env["MEMSYNC_CONFIG"] = str(config)
    return env


def memsync(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memsync", *args],
        cwd=config.parent,
        env=environment(config),
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextmanager
def background(config: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``memsync ARGS`` running; stopped with SIGTERM, which must exit it cleanly."""
    process = subprocess.Popen(
        [sys.executable, "-m", "memsync", *args],
        cwd=config.parent,
        env=environment(config),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 0, stderr


def test_an_async_sync_then_an_async_compile_are_run_by_a_worker(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    unknown_connector = memsync(config, "sync", "nope", "--async")
    assert unknown_connector.returncode == 2
    assert "no connector named 'nope'" in unknown_connector.stderr
    sync_job = memsync(config, "sync", "notes", "--async")
    assert sync_job.returncode == 0, sync_job.stderr
    assert memsync(config, "sync", "notes", "--async").stdout == sync_job.stdout  # coalesced
    with background(config, "worker"):
        synced = memsync(config, "jobs", "wait", sync_job.stdout.strip(), "--poll", "0.05")
    assert synced.returncode == 0, synced.stderr
    assert json.loads(synced.stdout)["result"]["created"] == 3
    subject = "ws:notes"

    enqueued = memsync(config, "compile", subject, "--async")
    assert enqueued.returncode == 0, enqueued.stderr
    job_id = enqueued.stdout.strip()
    again = memsync(config, "compile", subject, "--async")
    assert again.stdout.strip() == job_id  # coalesced into the pending job

    pending = memsync(config, "jobs", "wait", job_id, "--timeout", "0")
    assert pending.returncode == 1
    assert "still pending" in pending.stderr

    with background(config, "worker"):
        done = memsync(config, "jobs", "wait", job_id, "--timeout", "60", "--poll", "0.05")
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    assert (job["status"], job["kind"], job["target"]) == ("completed", "compile", subject)
    assert job["result"]["memories_created"] > 0

    unknown = memsync(config, "jobs", "wait", "00000000-0000-0000-0000-000000000000")
    assert unknown.returncode == 1
    assert "no job" in unknown.stderr


def test_run_serves_the_api_and_syncs_the_connector_on_its_schedule(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port=port)
    base = f"http://127.0.0.1:{port}"

    def sync_job_done() -> bool:
        try:
            jobs = httpx.get(f"{base}/v1/jobs", params={"kind": "sync"}, timeout=5).json()
        except httpx.TransportError:
            return False  # not listening yet
        return any(job["status"] == "completed" for job in jobs["jobs"])

    with background(config, "run"):
        # On start the scheduler fires the latest tick of `every 1m` it missed, so
        # the connector is synced without waiting for the next minute.
        wait_until(sync_job_done, timeout=90, what="the scheduled sync job to complete")
        jobs = httpx.get(f"{base}/v1/jobs", params={"kind": "sync"}, timeout=5).json()["jobs"]
        runs = httpx.get(f"{base}/v1/runs", timeout=5).json()

    # On a slow machine a later minute's tick may have run too; the first sync is the
    # oldest completed job (the list is newest first).
    job = [job for job in jobs if job["status"] == "completed"][-1]
    assert job["target"] == "notes"
    assert job["trigger"] == "schedule:sync:default:notes"
    # Two files and the scan's snapshot of the workspace.
    assert (job["result"]["run_status"], job["result"]["created"]) == ("succeeded", 3)
    assert runs["runs"][-1]["id"] == job["result"]["run_id"]
    assert all(run["created"] == 0 for run in runs["runs"][:-1])


def test_serve_alone_runs_async_compiles_so_the_sdk_wait_completes(tmp_path: Path) -> None:
    from statewave import StatewaveClient

    port = free_port()
    config = write_config(tmp_path, port=port)
    base = f"http://127.0.0.1:{port}"

    def listening() -> bool:
        try:
            return httpx.get(f"{base}/v1/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    with background(config, "serve"):
        wait_until(listening, timeout=60, what="memsync serve to listen")
        with StatewaveClient(base) as client:
            client.create_episode(
                subject_id="ana",
                source="chat",
                type="message",
                payload={"messages": [{"role": "user", "content": "I live in Lisbon."}]},
            )
            job = client.compile_memories_wait("ana", poll_interval=0.05, timeout=60)
    assert job.status == "completed"
    assert job.memories_created > 0


def test_serve_with_no_workers_leaves_jobs_queued(tmp_path: Path) -> None:
    port = free_port()
    config = write_config(tmp_path, port=port)
    enqueued = memsync(config, "compile", "ws:notes", "--async").stdout.strip()
    base = f"http://127.0.0.1:{port}"

    def listening() -> bool:
        try:
            return httpx.get(f"{base}/v1/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    with background(config, "serve", "--workers", "0"):
        wait_until(listening, timeout=60, what="memsync serve to listen")
        job = httpx.get(f"{base}/v1/jobs/{enqueued}", timeout=5).json()
    assert job["status"] == "pending"
