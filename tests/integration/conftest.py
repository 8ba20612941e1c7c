"""Fixtures the integration modules share: a fake clock at API_NOW, a client of an app
on it, the ingest and compile services on the module's ``store`` and ``clock``, and
the child processes a test started (killed if the test left them running)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from tests.helpers import API_NOW, LOOPBACK, build_app


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(API_NOW)


@pytest.fixture
def client(store: Store, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(build_app(store, clock=clock), base_url=LOOPBACK) as client:
        yield client


@pytest.fixture
def ingest(store: Store, clock: FakeClock) -> IngestService:
    return IngestService(store, clock)


@pytest.fixture
def compiler(store: Store, clock: FakeClock) -> CompileService:
    return CompileService(store, clock=clock)


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes the test appends are killed at its end if they still run."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
