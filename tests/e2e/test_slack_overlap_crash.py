"""A Slack sync killed with SIGKILL in the middle of its overlap re-read, then run again:
the next run resumes the re-read after the last window the killed one committed (it asks
the fake for none of the history it had stored), and the store ends as after clean runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from memsync.clock import FakeClock
from memsync.connectors.fake_http import FakeResponse, RecordedRequest
from memsync.connectors.slack import SlackConnector
from memsync.connectors.slack.connector import OverlapPass
from memsync.connectors.slack.fake_api import FakeSlack, ts_to_micros
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunStatus, SyncRepository, SyncRunner
from tests.e2e import slack_driver
from tests.e2e.test_sync_crash import revisions, stored
from tests.jobs_support import wait_until
from tests.slack_week import FIRST_SYNC_AT, BusyWeek, week_config

pytestmark = pytest.mark.slow

REPOSITORY = Path(__file__).resolve().parents[2]
HISTORY = "/api/conversations.history"


class HeldSlack(FakeSlack):
    """The fake Slack, holding back its answer to the ``hold_at``-th history request
    (counted from :meth:`hold`) until :attr:`release` is set."""

    def __init__(self) -> None:
        super().__init__(token="xoxb-test")
        self.reached, self.release = threading.Event(), threading.Event()
        self._hold_at: int | None = None

    def hold(self, at: int) -> None:
        self._hold_at = at

    def handle(self, request: RecordedRequest) -> FakeResponse:
        if request.path == HISTORY and self._hold_at is not None:
            self._hold_at -= 1
            if self._hold_at == 0:
                self.reached.set()
                self.release.wait(timeout=120)
        return super().handle(request)


@pytest.fixture
def fake() -> Iterator[HeldSlack]:
    with HeldSlack() as server:
        yield server
        server.release.set()


def sync_in_process(store: Store, clock: FakeClock, fake: FakeSlack) -> SyncRunner:
    runner = SyncRunner(
        SyncRepository(store),
        IngestService(store, clock),
        clock=clock,
        batch_size=slack_driver.BATCH,
        heartbeat_every=None,
    )
    connector = SlackConnector(week_config(fake.base_url), clock=clock)
    try:
        assert runner.sync(connector).status is RunStatus.SUCCEEDED
    finally:
        connector.close()
    return runner


def test_a_sync_killed_in_its_overlap_re_read_resumes_after_the_windows_it_stored(
    fake: HeldSlack, store_url: str, store: Store
) -> None:
    week = BusyWeek.post(fake)
    clock = FakeClock(FIRST_SYNC_AT)
    sync_in_process(store, clock, fake)
    clock.advance(timedelta(hours=1))
    week.change(fake, clock.now())
    fake.hold(at=8)  # well inside the week's re-read

    process = subprocess.Popen(
        [sys.executable, "-m", slack_driver.__name__, store_url, fake.base_url,
         clock.now().isoformat()],
        cwd=REPOSITORY,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until(fake.reached.is_set, timeout=60, what="the killed sync's 8th history request")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        assert process.stderr is not None
        process.stderr.close()
    fake.release.set()

    repository = SyncRepository(store)
    checkpoint = repository.cursor("default", "sl", "C1")
    assert checkpoint is not None
    walk = OverlapPass.from_token(checkpoint.token)
    assert walk is not None
    assert walk.current
    assert walk.after is not None
    assert checkpoint.note is not None
    assert "overlap re-read " in checkpoint.note
    asked_before = len(fake.requests)

    clock.advance(timedelta(minutes=5))
    sync_in_process(store, clock, fake)

    history = [r for r in fake.requests[asked_before:] if r.path == HISTORY]
    assert history
    assert min(ts_to_micros(r.form["oldest"][0]) for r in history) > walk.after
    assert set(stored(store)) == week.posted | week.new
    assert revisions(store) == len(week.edited)
