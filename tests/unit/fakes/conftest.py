"""Started fake servers, one per test, stopped (and checked for handler errors) after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.slack.fake_api import FakeSlack


@pytest.fixture
def fake_github() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t") as fake:
        yield fake


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    with FakeSlack(token="xoxb-test") as fake:
        yield fake
