"""``memsync sync`` and ``state show`` on a Slack channel whose week of lookback holds more
than a run's budget, as a user sees them: the CLI in a subprocess (wall clock), slack-sdk
against the fake Slack on loopback, the real store. Each run is partial and says how far
the overlap re-read got (the progress line at a terminal, the run record, ``state
show``); successive runs complete it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memsync.connectors.slack.fake_api import FakeSlack
from tests.slack_week import BusyWeek

pytestmark = pytest.mark.slow

TERMINAL = {"TTY_COMPATIBLE": "1", "COLUMNS": "400"}


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack(token="xoxb-test") as server:
        yield server


def memsync(
    config: Path, store_url: str, *args: str, terminal: bool = False
) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    environment.update(MEMSYNC_STORE=store_url, SLACK_TEST_TOKEN="xoxb-test")
    environment.update(TERMINAL if terminal else {})
    return subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), *args],
        cwd=config.parent,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_each_run_of_a_long_overlap_re_read_says_how_far_it_got_until_one_completes(
    fake: FakeSlack, store_url: str, tmp_path: Path
) -> None:
    start = (datetime.now(UTC) - timedelta(days=7, hours=1)).replace(microsecond=0)
    week = BusyWeek.post(fake, start)
    config = tmp_path / "memsync.yaml"
    config.write_text(
        "connectors:\n"
        "  - name: sl\n"
        "    type: slack\n"
        "    token: ${SLACK_TEST_TOKEN}\n"
        f"    base_url: {fake.base_url}/api\n"
        "    channels: [C1]\n"
        '    subject: "slack:{channel}"\n'
        "    page_size: 20\n"
        "    overlap: 1m\n"
        f"    start: {start.isoformat()}\n"
        "    retry:\n"
        "      max_attempts: 1\n"
    )
    first = memsync(config, store_url, "sync", "sl", "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["created"] == len(week.posted)

    fake.limit_budget(6)
    shown = memsync(config, store_url, "sync", "sl", terminal=True)
    state = memsync(config, store_url, "state", "show", "sl")

    assert shown.returncode == 3, shown.stdout + shown.stderr
    # At a terminal, the progress line says where the re-read stands as it goes.
    assert "sync sl: 0 read, 0 stored" in shown.stderr
    assert "; C1: overlap re-read " in shown.stderr
    # The run record (printed) and the stream's state say it too.
    assert "partial" in shown.stdout
    assert "[C1: overlap re-read " in shown.stdout
    assert "resumes at ts " in shown.stdout
    assert state.returncode == 0, state.stderr
    assert "C1: overlap re-read " in state.stdout

    statuses = []
    for _ in range(15):
        fake.limit_budget(6)
        run = json.loads(memsync(config, store_url, "sync", "sl", "--json").stdout)
        statuses.append(run["status"])
        if run["status"] == "succeeded":
            break
    assert statuses[-1] == "succeeded", statuses
    assert set(statuses[:-1]) <= {"partial"}
    done = memsync(config, store_url, "state", "show", "sl")
    assert "C1: overlap re-read complete: " in done.stdout
