"""Slack's overlap re-read (the `lookback` walked before new messages) when it holds more
than one run's budget can read, against a real store (SQLite or PostgreSQL): successive
runs each get further, every history window they finish checkpointed, until one
completes; every record is stored once and every edit is one revision."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.connectors.slack import SlackConnector
from memsync.connectors.slack.connector import OverlapPass
from memsync.connectors.slack.fake_api import FakeSlack
from memsync.runtime.storage import Store, tables
from memsync.runtime.sync import RunRecord, RunStatus, SyncRunner
from tests.integration.test_sync_streams import never_waits, runner, stored_keys
from tests.slack_week import FIRST_SYNC_AT, T0, BusyWeek, key, ts, week_config

BUDGET = 6  # calls a run may make; the week of history takes about 20


@dataclass
class BusyChannel:
    """The busy week (:class:`BusyWeek`) stored by one run with no budget, then changed."""

    fake: FakeSlack
    clock: FakeClock
    week: BusyWeek

    def sync(self, sync: SyncRunner) -> RunRecord:
        connector = SlackConnector(
            week_config(self.fake.base_url), sleeper=never_waits(self.clock), clock=self.clock
        )
        try:
            return sync.sync(connector)
        finally:
            connector.close()


@pytest.fixture
def channel(store: Store) -> Iterator[BusyChannel]:
    with FakeSlack(token="xoxb-test") as fake:
        clock = FakeClock(FIRST_SYNC_AT)
        busy = BusyChannel(fake, clock, BusyWeek.post(fake))
        assert busy.sync(runner(store, clock, batch_size=50)).status is RunStatus.SUCCEEDED
        clock.advance(timedelta(hours=1))
        busy.week.change(fake, clock.now())
        yield busy


@pytest.mark.parametrize("budget", [4, BUDGET, 9])
def test_an_overlap_larger_than_a_runs_budget_is_re_read_by_successive_runs_each_checkpointed(
    store: Store, channel: BusyChannel, budget: int
) -> None:
    sync = runner(store, channel.clock, batch_size=50)
    resume_points: list[int] = []
    runs: list[RunRecord] = []
    while not runs or runs[-1].status is not RunStatus.SUCCEEDED:
        assert len(runs) < 40, "\n".join(f"{r.status.value} {r.error}" for r in runs)
        channel.fake.limit_budget(budget)
        runs.append(channel.sync(sync))
        channel.clock.advance(timedelta(hours=1))
        walk = OverlapPass.from_token(stored_token(sync))
        assert walk is not None
        if walk.current:
            assert walk.after is not None
            resume_points.append(walk.after)

    *partial, last = runs
    assert len(partial) >= 2
    # Each run got further and left the window it reached in the checkpoint.
    assert resume_points == sorted(set(resume_points))
    assert len(resume_points) == len(partial)
    for run in partial:
        assert run.status is RunStatus.PARTIAL
        assert run.error is not None
        assert "[C1: overlap re-read " in run.error
        assert "resumes at ts " in run.error
    assert last.status is RunStatus.SUCCEEDED
    # Every new message and reply stored once, every edit one revision, nothing read twice.
    assert sum(run.duplicates for run in runs) == 0
    assert sorted(stored_keys(store)) == sorted(channel.week.posted | channel.week.new)
    assert sum(run.created for run in runs) == len(channel.week.new)
    assert sum(run.revised for run in runs) == len(channel.week.edited)
    assert revised_keys(store) == channel.week.edited
    # Checkpointed as a whole afterwards: the pass is over and says so.
    done = sync.repository.cursor("default", "sl", "C1")
    assert done is not None
    assert done.note is not None
    assert done.note.startswith("overlap re-read complete: ")


def test_the_next_pass_finds_an_edit_made_behind_a_long_pass(
    store: Store, channel: BusyChannel
) -> None:
    """An edit of a message the pass already read, made while later runs read on, is
    handed out by the next pass although it is older than that pass's window start."""
    sync = runner(store, channel.clock, batch_size=50)
    channel.fake.limit_budget(BUDGET)
    first = channel.sync(sync)
    assert first.status is RunStatus.PARTIAL
    early = ts(T0 + timedelta(days=1))
    walk = OverlapPass.from_token(stored_token(sync))
    assert walk is not None
    assert walk.after is not None
    assert walk.after > int(T0.timestamp() + 86_400) * 1_000_000  # the first run read it
    channel.clock.advance(timedelta(hours=1))
    channel.fake.edit_message(
        "C1", early, "edited behind the pass", edited_ts=ts(channel.clock.now())
    )
    for _ in range(20):
        channel.clock.advance(timedelta(hours=1))
        channel.fake.limit_budget(BUDGET)
        if channel.sync(sync).status is RunStatus.SUCCEEDED:
            break
    assert key(early) not in revised_keys(store)

    channel.clock.advance(timedelta(hours=1))
    channel.fake.limit_budget(None)
    assert channel.sync(sync).status is RunStatus.SUCCEEDED

    assert key(early) in revised_keys(store)


def stored_token(sync: SyncRunner) -> str | None:
    cursor = sync.repository.cursor("default", "sl", "C1")
    return None if cursor is None else cursor.token


def revised_keys(store: Store) -> set[str]:
    episodes = tables.episodes
    with store.read() as connection:
        rows = connection.execute(
            sa.select(episodes.c.idempotency_key).where(episodes.c.revision > 1)
        )
        return set(rows.scalars())


def test_a_thread_of_more_replies_than_a_run_reads_is_read_on_by_the_next_runs(
    store: Store,
) -> None:
    """A thread of the first day, busy today: each run reads on after the last page of
    replies the previous one committed; every reply is stored once."""
    with FakeSlack(token="xoxb-test") as fake:
        clock = FakeClock(FIRST_SYNC_AT)
        busy = BusyChannel(fake, clock, BusyWeek.post(fake))
        assert busy.sync(runner(store, clock)).status is RunStatus.SUCCEEDED
        clock.advance(timedelta(hours=1))
        replies = set()
        for i in range(200):
            moment = clock.now() - timedelta(minutes=50) + i * timedelta(seconds=10)
            replies.add(key(fake.post_reply("C1", busy.week.parents[0], f"{i}", ts=ts(moment)).ts))

        sync = runner(store, clock)
        runs: list[RunRecord] = []
        while not runs or runs[-1].status is not RunStatus.SUCCEEDED:
            assert len(runs) < 20, "\n".join(f"{r.status.value} {r.error}" for r in runs)
            fake.limit_budget(4)
            runs.append(busy.sync(sync))
            clock.advance(timedelta(hours=1))

    assert len(runs) >= 3
    assert sum(run.created for run in runs) == len(replies)
    assert set(stored_keys(store)) == busy.week.posted | replies


def test_a_re_read_that_cannot_get_past_its_first_window_says_so_and_what_to_set(
    store: Store, channel: BusyChannel
) -> None:
    """Two requests a run: the token check and one history page, never a whole window."""
    sync = runner(store, channel.clock)
    runs = []
    for _ in range(3):
        channel.fake.limit_budget(2)
        runs.append(channel.sync(sync))
        channel.clock.advance(timedelta(hours=1))

    assert [run.status for run in runs] == [RunStatus.FAILED] * 3
    for run, stalled in zip(runs, ("1 run", "2 runs", "3 runs"), strict=True):
        assert run.error is not None
        assert f"overlap re-read made no progress in {stalled}: the history window" in run.error
        assert "set a smaller page_size (now 20) or retry caps" in run.error


def test_a_run_cut_short_tombstones_what_was_deleted_in_the_windows_it_finished(
    store: Store, channel: BusyChannel
) -> None:
    early, late = ts(T0 + timedelta(days=1)), ts(T0 + timedelta(days=6))
    channel.fake.delete_message("C1", early)
    channel.fake.delete_message("C1", late)
    sync = runner(store, channel.clock, batch_size=50)
    channel.fake.limit_budget(BUDGET)

    first = channel.sync(sync)

    assert first.status is RunStatus.PARTIAL
    assert first.tombstoned == 1  # the early one: the late one lies past where it stopped
    runs = [first]
    while runs[-1].status is not RunStatus.SUCCEEDED:
        assert len(runs) < 20
        channel.clock.advance(timedelta(hours=1))
        channel.fake.limit_budget(BUDGET)
        runs.append(channel.sync(sync))
    assert sum(run.tombstoned for run in runs) == 2
