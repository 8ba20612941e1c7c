"""Runs it takes to get through a Slack channel's overlap re-read that holds more than a
run's budget: ``--messages`` messages over the week of lookback (20,160: one every 30
s), every 200th with a reply, stored by a first sync with no budget; then an hour later
50 new messages, 20 edits of old ones and a reply to each of 10 old threads, and runs
of at most ``--budget`` requests each (the fake's 429s past it, no retry wait), an hour
apart, until one succeeds or ``--max-runs`` have run.

``after``: the re-read resumes where the last run stopped (each history window is
checkpointed). ``before``: each run's checkpoint loses its resume token before the next
run, so every run walks the week from its start again, as the connector did before the
re-read checkpointed. Real store (SQLite or PostgreSQL), real slack-sdk against the
fake Slack on loopback, fake clock. Prints a Markdown table; see docs/benchmarks.md
("Slack channels of any size").

    python -m bench.slack_overlap [--messages 20160] [--budget 20] [--db sqlite]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from datetime import UTC, datetime, timedelta

from bench.common import machine, print_table, throwaway_store
from memsync.clock import FakeClock
from memsync.connectors.slack import SlackConfig, SlackConnector
from memsync.connectors.slack.fake_api import FakeSlack
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunRecord, RunStatus, SyncRepository, SyncRunner
from memsync.stopping import FakeSleeper

WEEK = timedelta(days=7)
START = datetime(2026, 11, 1, tzinfo=UTC)
FIRST_SYNC_AT = START + WEEK + timedelta(minutes=10)


def ts(moment: datetime) -> str:
    return f"{moment.timestamp():.6f}"


def busy_week(fake: FakeSlack, messages: int) -> list[str]:
    """The week before ``FIRST_SYNC_AT``; returns every top-level ts."""
    fake.add_channel("C1", "busy", created=int(START.timestamp()))
    every = WEEK / messages
    posted = []
    for i in range(messages):
        message = fake.post_message("C1", f"m{i}", ts=ts(START + i * every))
        posted.append(message.ts)
        if i % 200 == 7:
            fake.post_reply("C1", message.ts, f"re {i}", ts=ts(START + i * every + every / 2))
    return posted


def change(fake: FakeSlack, posted: list[str], now: datetime) -> None:
    """Within the hour before ``now``: new messages, edits, replies to old threads."""
    for i in range(50):
        fake.post_message(
            "C1", f"new {i}", ts=ts(now - timedelta(minutes=50) + i * timedelta(seconds=30))
        )
    step = (len(posted) - 1000) // 20  # past the first hours, which leave the lookback
    for i in range(20):
        fake.edit_message(
            "C1", posted[i * step + 1000], f"edited {i}", edited_ts=ts(now - timedelta(minutes=30))
        )
    for i in range(10):
        parent = posted[(i * (len(posted) - 2000) // 10 + 1007) // 200 * 200 + 7]
        fake.post_reply(
            "C1", parent, f"late {i}", ts=ts(now - timedelta(minutes=20) + i * timedelta(seconds=1))
        )


def connector(fake: FakeSlack, clock: FakeClock) -> SlackConnector:
    config = SlackConfig(
        name="busy",
        token="xoxb-bench",
        channels=["C1"],
        base_url=fake.base_url + "/api",
        subject="slack:{channel}",
        overlap="1m",
        start=START,
        retry={"max_attempts": 1},
    )  # lookback: the default week; page_size: the default 200
    return SlackConnector(config, sleeper=FakeSleeper(clock, max_waits=0), clock=clock)


def sync_once(runner: SyncRunner, fake: FakeSlack, clock: FakeClock) -> RunRecord:
    instance = connector(fake, clock)
    try:
        return runner.sync(instance)
    finally:
        instance.close()


def scenario(mode: str, url: str, messages: int, budget: int, max_runs: int) -> list[object]:
    store = Store.from_url(url)
    clock = FakeClock(FIRST_SYNC_AT)
    repository = SyncRepository(store)
    runner = SyncRunner(repository, IngestService(store, clock), clock=clock, heartbeat_every=None)
    try:
        with FakeSlack(token="xoxb-bench") as fake:
            posted = busy_week(fake, messages)
            assert sync_once(runner, fake, clock).status is RunStatus.SUCCEEDED
            clock.advance(timedelta(hours=1))
            change(fake, posted, clock.now())
            asked = fake.method_count("conversations.history") + fake.method_count(
                "conversations.replies"
            )
            runs: list[RunRecord] = []
            started = time.perf_counter()
            while len(runs) < max_runs and (not runs or runs[-1].status is not RunStatus.SUCCEEDED):
                if runs and mode == "before":
                    # What the connector did before: no resume point, the week again.
                    stored = repository.cursor("default", "busy", "C1")
                    assert stored is not None
                    repository.reset_checkpoints(
                        "default", "busy", stream="C1", to=stored.position, now=clock.now()
                    )
                fake.limit_budget(budget)
                runs.append(sync_once(runner, fake, clock))
                clock.advance(timedelta(hours=1))
            seconds = time.perf_counter() - started
            requests = (
                fake.method_count("conversations.history")
                + fake.method_count("conversations.replies")
                - asked
            )
    finally:
        store.dispose()
    done = runs[-1].status is RunStatus.SUCCEEDED
    return [
        mode,
        f"{len(runs)}" if done else f"never ({len(runs)} runs, none got past the week)",
        f"{requests:,}",
        sum(run.created for run in runs),
        sum(run.revised for run in runs),
        sum(run.duplicates for run in runs),
        f"{seconds:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_160)
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--max-runs", type=int, default=12)
    parser.add_argument("--db", choices=("sqlite", "postgresql"), default="sqlite")
    arguments = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for mode in ("before", "after"):
            with throwaway_store(arguments.db, directory) as url:
                rows.append(
                    scenario(mode, url, arguments.messages, arguments.budget, arguments.max_runs)
                )
    print(
        f"{machine()}; {arguments.db}; {arguments.messages:,} messages in the week of lookback, "
        f"{arguments.budget} requests a run\n"
    )
    print_table(
        (
            "re-read",
            "runs to complete",
            "history + replies requests",
            "created",
            "revised",
            "duplicates",
            "wall s",
        ),
        rows,
    )


if __name__ == "__main__":
    main()
