"""Fixtures of the API tests: a fake clock at API_NOW and a client of an app on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.runtime.storage import Store
from tests.helpers import API_NOW, LOOPBACK, build_app


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(API_NOW)


@pytest.fixture
def client(store: Store, clock: FakeClock) -> Iterator[TestClient]:
    with TestClient(build_app(store, clock=clock), base_url=LOOPBACK) as client:
        yield client
