"""Fixtures the integration modules share: the ingest and compile services on the
module's ``store`` and ``clock``."""

from __future__ import annotations

import pytest

from memsync.clock import FakeClock
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store


@pytest.fixture
def ingest(store: Store, clock: FakeClock) -> IngestService:
    return IngestService(store, clock)


@pytest.fixture
def compiler(store: Store, clock: FakeClock) -> CompileService:
    return CompileService(store, clock=clock)
