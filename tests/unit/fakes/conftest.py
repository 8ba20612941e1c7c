"""Started fake servers, one per test, stopped (and checked for handler errors) after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes import FakeGitHub, FakeSlack


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t") as fake:
        yield fake


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack(token="xoxb-test") as fake:
        yield fake
