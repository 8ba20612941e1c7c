"""Shared pieces of the job tests: episodes to compile, workers, and waiting on the DB."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from memsync.clock import Clock
from memsync.episode import EpisodeDraft
from memsync.runtime.app.config import JobsSettings, Settings
from memsync.runtime.app.handlers import compile_handler
from memsync.runtime.app.services import Services
from memsync.runtime.compiling import COMPILE_JOB, CompileService
from memsync.runtime.jobs import Job, JobHandler, JobQueue, Worker
from memsync.runtime.storage import Store

BLOCKING_KIND = "test-blocking-compile"
LEASE = timedelta(seconds=60)
MID_COMPILE_CHUNK = 2
"""Episodes per compile chunk in the mid-compile crash test."""


def drafts(subject: str, count: int, start: int = 0) -> list[EpisodeDraft]:
    """Episodes the heuristic compiler turns into one memory each."""
    tools = ["Postgres", "Redis", "Kafka", "Terraform", "Rust", "Go", "Docker", "Nix"]
    return [
        EpisodeDraft(
            subject_id=subject,
            source="chat",
            type="message",
            payload={"messages": [{"role": "user", "content": f"I use {tools[i % 8]} at work."}]},
            idempotency_key=f"{subject}:{i}",
        )
        for i in range(start, start + count)
    ]


def blocking_handler(compiler: CompileService, queue: JobQueue, release: Path) -> JobHandler:
    """A compile that first waits until ``release`` exists: a known point mid-job."""

    def handle(job: Job) -> Mapping[str, Any]:
        waiting = threading.Event()
        while not release.exists():
            waiting.wait(0.02)
        return compile_handler(compiler, queue)(job)

    return handle


def worker(
    store: Store,
    clock: Clock,
    handlers: Mapping[str, JobHandler] | None = None,
    queue: JobQueue | None = None,
    name: str = "test-worker",
) -> Worker:
    compiler = CompileService(store, clock=clock)
    queue = queue or JobQueue(store)
    return Worker(
        queue,
        handlers if handlers is not None else {COMPILE_JOB: compile_handler(compiler, queue)},
        clock=clock,
        lease=LEASE,
        poll_interval=0.02,
        name=name,
    )


def services(store: Store, clock: Clock, jobs: JobsSettings | None = None) -> Services:
    """The composition root over ``store``, with these job settings."""
    return Services(Settings(jobs=jobs or JobsSettings()), store, clock)


def wait_until(condition: Callable[[], bool], timeout: float = 60.0, what: str = "") -> None:
    """Poll ``condition`` (a database look) until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or condition}")
        pause.wait(0.05)


def scalar(store: Store, sql: str, **params: Any) -> Any:
    with store.read() as connection:
        return connection.execute(sa.text(sql), params).scalar()
