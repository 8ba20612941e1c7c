"""The Slack connector through slack-sdk against FakeSlack: history and threads, keys,
edits, skipped subtypes, pagination, rate limits and errors. Time is a FakeClock;
sleeping is recorded, never done."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.connectors.base import Window
from memsync.connectors.errors import RateLimitExhausted, SkipRecord, StopRun
from memsync.connectors.slack import SlackConfig, SlackConnector, SlackMessage
from memsync.connectors.slack.connector import slack_ts_to_datetime
from memsync.connectors.slack.fake_api import FakeSlack
from memsync.connectors.testing import (
    ConnectorConformanceSuite,
    DeletionScenario,
    SimulatedIngest,
)
from memsync.episode import Tombstone
from memsync.stopping import FakeSleeper
from tests.unit.connectors.sync_helpers import sync

START_TS = 1_700_000_000
T0 = datetime.fromtimestamp(START_TS, UTC)
END = T0 + timedelta(days=30)
TEAM = "T12345678"


@pytest.fixture
def fake() -> Iterator[FakeSlack]:
    with FakeSlack(token="xoxb-test", start_ts=START_TS) as server:
        server.add_channel("C1", "general")
        yield server


@pytest.fixture
def sleeper() -> FakeSleeper:
    return FakeSleeper(FakeClock(datetime(2026, 1, 1, tzinfo=UTC)))


def connector(
    fake: FakeSlack, sleeper: FakeSleeper | None = None, **overrides: Any
) -> SlackConnector:
    config = SlackConfig(
        name="sl",
        token=overrides.pop("token", "xoxb-test"),
        channels=overrides.pop("channels", ["C1"]),
        base_url=f"{fake.base_url}/api",
        subject=overrides.pop("subject", "slack:{channel}"),
        **overrides,
    )
    sleeper = sleeper or FakeSleeper()
    return SlackConnector(config, sleeper=sleeper, clock=sleeper.clock)


def at(seconds: float) -> datetime:
    """The fake's clock: message n (1-based, one per second) is posted at at(n)."""
    return T0 + timedelta(seconds=seconds)


def messages(conn: SlackConnector, window: Window) -> list[SlackMessage]:
    """The records of one fetch, without the deletions it reports."""
    return [item for item in conn.fetch(window, None) if isinstance(item, SlackMessage)]


def fetch(conn: SlackConnector, start: datetime | None, end: datetime = END) -> list[str]:
    return [conn.idempotency_key(r) for r in messages(conn, Window(start, end))]


# -- what is read, and the keys --------------------------------------------------------------


def test_messages_and_replies_are_keyed_by_team_channel_and_ts(fake: FakeSlack) -> None:
    parent = fake.post_message("C1", "deploy at 5?")
    reply = fake.post_reply("C1", parent.ts, "yes")
    later = fake.post_message("C1", "deployed")
    conn = connector(fake)

    records = messages(conn, Window(None, END))

    assert [conn.idempotency_key(r) for r in records] == [
        f"slack:{TEAM}:C1:{parent.ts}",
        f"slack:{TEAM}:C1:{reply.ts}",
        f"slack:{TEAM}:C1:{later.ts}",
    ]
    assert [conn.to_episode(r).type for r in records] == [
        "slack.message",
        "slack.reply",
        "slack.message",
    ]


def test_each_channel_is_an_ordered_stream_named_as_configured(fake: FakeSlack) -> None:
    fake.add_channel("C2", "random")
    conn = connector(fake, channels=["C1", "#random"])

    assert [(s.name, s.ordered) for s in conn.streams()] == [("C1", True), ("random", True)]


def test_records_before_an_unread_thread_go_out_before_a_rate_limit_stops_the_read(
    fake: FakeSlack,
) -> None:
    first = fake.post_message("C1", "first thread")
    fake.post_reply("C1", first.ts, "first reply")
    between = fake.post_message("C1", "no thread")
    second = fake.post_message("C1", "second thread")
    fake.post_reply("C1", second.ts, "second reply")
    fake.post_message("C1", "last")
    conn = connector(fake, retry={"max_attempts": 1})
    [stream] = conn.streams()
    read = conn.fetch_stream(stream, Window(None, END), None)
    handed_out: list[str] = []

    def read_until_stopped() -> None:
        for item in read:
            if isinstance(item, SlackMessage):
                handed_out.append(item.ts)
                if item.ts == between.ts:
                    fake.script_rate_limit("conversations.replies", times=5)

    with pytest.raises(RateLimitExhausted):
        read_until_stopped()

    # Everything up to the second thread's parent went out, oldest first; the rest of
    # the channel waits for that thread, so a checkpoint there skips nothing.
    assert handed_out == [
        first.ts,
        fake.message("C1", first.ts).latest_reply,
        between.ts,
        second.ts,
    ]


def test_channel_names_are_resolved_through_conversations_list(fake: FakeSlack) -> None:
    fake.add_channel("C2", "random")
    message = fake.post_message("C2", "hello")
    conn = connector(fake, channels=["#random"], subject="slack:{channel_name}")

    (record,) = messages(conn, Window(None, END))

    assert conn.idempotency_key(record) == f"slack:{TEAM}:C2:{message.ts}"
    assert conn.to_episode(record).subject_id == "slack:random"
    assert fake.method_count("conversations.list") == 1


def test_an_unknown_channel_name_stops_the_run(fake: FakeSlack) -> None:
    with pytest.raises(StopRun, match="no channel named nope"):
        fetch(connector(fake, channels=["nope"]), None)


def test_contentless_subtypes_are_skipped_with_a_reason(fake: FakeSlack) -> None:
    fake.add_join("C1", "U3")
    fake.post_message("C1", "hi")
    conn = connector(fake)
    store = SimulatedIngest()

    join = messages(conn, Window(None, END))[0]
    with pytest.raises(SkipRecord, match="channel_join"):
        conn.to_episode(join)
    assert sync(conn, store, None, END) == {"skipped": 1, "created": 1}


# -- repeats, edits and threads --------------------------------------------------------------


def test_two_overlapping_windows_store_every_message_and_reply_once(fake: FakeSlack) -> None:
    first = [fake.post_message("C1", f"m{i}") for i in range(5)]
    fake.post_reply("C1", first[0].ts, "r1")
    store = SimulatedIngest()
    assert sync(connector(fake), store, None, at(10)) == {"created": 6}
    for i in range(3):
        fake.post_message("C1", f"n{i}", ts=f"{START_TS + 20 + i}.000000")

    second = sync(connector(fake), store, at(4), at(30))

    # m3, m4 (posted at 4 s and 5 s) and r1 (6 s, a reply to m0, found through the
    # lookback) fall in the overlap and are duplicates; m0-m2 are read but not handed out.
    assert second == {"created": 3, "duplicate": 3}
    assert len(store.stored) == 9


def test_a_reply_to_an_old_thread_is_found_by_the_next_sync(fake: FakeSlack) -> None:
    parent = fake.post_message("C1", "old question", ts=f"{START_TS}.000000")
    store = SimulatedIngest()
    assert sync(connector(fake), store, None, at(60)) == {"created": 1}
    reply = fake.post_reply("C1", parent.ts, "late answer", ts=f"{START_TS + 3 * 86400}.000000")

    window_start = at(2 * 86400)  # two days after the parent
    conn = connector(fake)
    records = messages(conn, Window(window_start, at(4 * 86400)))

    assert [conn.idempotency_key(r) for r in records] == [f"slack:{TEAM}:C1:{reply.ts}"]
    assert sync(conn, store, window_start, at(4 * 86400)) == {"created": 1}


def test_a_thread_older_than_the_lookback_is_not_read(fake: FakeSlack) -> None:
    parent = fake.post_message("C1", "ancient", ts=f"{START_TS}.000000")
    fake.post_reply("C1", parent.ts, "late", ts=f"{START_TS + 10 * 86400}.000000")
    conn = connector(fake, lookback="7d")

    assert fetch(conn, at(9 * 86400)) == []
    assert fake.method_count("conversations.replies") == 0


def test_an_edited_message_is_a_revision(fake: FakeSlack) -> None:
    message = fake.post_message("C1", "deploy at 5", ts=f"{START_TS}.000000")
    store = SimulatedIngest()
    sync(connector(fake), store, None, at(60))
    fake.edit_message("C1", message.ts, "deploy at 6", edited_ts=f"{START_TS + 3600}.000000")

    outcome = sync(connector(fake), store, at(1800), at(7200))

    assert outcome == {"revised": 1}
    assert len(store.stored) == 1


def test_a_new_reply_does_not_revise_its_parent(fake: FakeSlack) -> None:
    parent = fake.post_message("C1", "question", ts=f"{START_TS}.000000")
    store = SimulatedIngest()
    sync(connector(fake), store, None, at(60))
    fake.post_reply("C1", parent.ts, "first answer", ts=f"{START_TS + 30}.000000")

    assert sync(connector(fake), store, None, at(60)) == {"duplicate": 1, "created": 1}


# -- pagination ------------------------------------------------------------------------------


def history_windows(fake: FakeSlack) -> list[tuple[str | None, str | None, str | None]]:
    return [
        (r.param("oldest"), r.param("latest"), r.param("cursor"))
        for r in fake.requests
        if r.path.endswith("/conversations.history")
    ]


def test_history_is_read_in_windows_oldest_first_and_replies_follow_next_cursor(
    fake: FakeSlack,
) -> None:
    messages = [fake.post_message("C1", f"m{i}") for i in range(450)]
    for i in range(250):
        fake.post_reply("C1", messages[0].ts, f"r{i}")
    conn = connector(fake, page_size=100)

    keys = fetch(conn, None)

    assert len(keys) == 700
    assert len(set(keys)) == 700
    windows = history_windows(fake)
    assert all(cursor is None for _, _, cursor in windows)  # windows by time, never paged back
    assert windows[0] == ("0.000000", f"{int(END.timestamp())}.000000", None)
    # From the epoch, finding where 450 messages start costs a few windows more than the
    # 5 pages of 100 they fill.
    assert 5 <= len(windows) <= 10
    assert fake.method_count("conversations.replies") == 3  # 251 thread messages, 100 a page
    assert fake.method_count("auth.test") == 1


def test_a_range_that_fits_one_page_costs_one_request(fake: FakeSlack) -> None:
    for i in range(30):
        fake.post_message("C1", f"m{i}")

    keys = fetch(connector(fake, page_size=100), T0)

    assert len(keys) == 30
    assert fake.method_count("conversations.history") == 1


def test_a_page_that_does_not_fit_its_window_is_kept_never_asked_again(fake: FakeSlack) -> None:
    for i in range(40):
        fake.post_message("C1", f"m{i}", ts=f"{START_TS + i * 60}.000000")
    conn = connector(fake, page_size=10, lookback="1s")

    records = [r for r in conn.fetch(Window(T0, T0 + timedelta(hours=1)), None)]

    messages = [r for r in records if isinstance(r, SlackMessage)]
    assert [m.data["text"] for m in messages] == [f"m{i}" for i in range(40)]  # oldest first
    posted = [START_TS + i * 60 for i in range(40)]
    sent = 0
    for oldest, latest, _ in history_windows(fake):
        # What the fake (as Slack) answers: the page of up to 10 closest to ``latest``.
        inside = [t for t in posted if float(oldest or 0) <= t <= float(latest or 0)]
        sent += min(10, len(inside))
    assert sent == 40  # every message came in exactly one answer: no page asked twice
    assert len(history_windows(fake)) == 5  # the whole range, then a window per page


# -- rate limits and errors ------------------------------------------------------------------


def test_a_429_is_waited_out_per_method_and_the_page_asked_again(
    fake: FakeSlack, sleeper: FakeSleeper
) -> None:
    parent = fake.post_message("C1", "q")
    fake.post_reply("C1", parent.ts, "a")
    fake.script_rate_limit("conversations.history", retry_after=3)
    fake.script_rate_limit("conversations.replies", retry_after=7, times=2)

    keys = fetch(connector(fake, sleeper), None)

    assert len(keys) == 2
    assert sleeper.waits == [3.0, 7.0, 7.0]
    assert fake.method_count("conversations.history") == 2
    assert fake.method_count("conversations.replies") == 3


def test_a_429_past_the_cap_is_rate_limit_exhausted(fake: FakeSlack, sleeper: FakeSleeper) -> None:
    fake.post_message("C1", "q")
    fake.script_rate_limit("conversations.history", retry_after=40, times=5)
    conn = connector(fake, sleeper, retry={"max_attempts": 5, "max_wait": "1m"})

    with pytest.raises(RateLimitExhausted, match=r"conversations\.history") as caught:
        fetch(conn, None)

    assert sleeper.waits == [40.0]
    assert caught.value.retry_after == 40.0


@pytest.mark.parametrize(
    ("token", "error"), [("xoxb-wrong", "invalid_auth"), ("xoxb-test", "account_inactive")]
)
def test_token_errors_stop_the_run(fake: FakeSlack, token: str, error: str) -> None:
    if error == "account_inactive":
        fake.script_error("auth.test", error)
    with pytest.raises(StopRun, match=error) as caught:
        fetch(connector(fake, token=token), None)
    assert token not in str(caught.value)


def test_a_transient_slack_error_is_retried(fake: FakeSlack, sleeper: FakeSleeper) -> None:
    fake.post_message("C1", "q")
    fake.script_error("conversations.history", "internal_error")
    assert len(fetch(connector(fake, sleeper), None)) == 1
    assert sleeper.waits == [1.0]


def test_an_unknown_channel_id_stops_the_run(fake: FakeSlack) -> None:
    with pytest.raises(StopRun, match="channel_not_found"):
        fetch(connector(fake, channels=["C999"]), None)


def test_slack_timestamps_convert_exactly() -> None:
    assert slack_ts_to_datetime("1512085950.000216") == datetime(
        2017, 11, 30, 23, 52, 30, 216, tzinfo=UTC
    )


# -- conformance -----------------------------------------------------------------------------


def _recorded(edit: bool) -> list[SlackMessage]:
    with FakeSlack(start_ts=START_TS) as server:
        server.add_channel("C1", "general")
        parent = server.post_message("C1", "question")
        reply = server.post_reply("C1", parent.ts, "answer")
        server.post_message(
            "C1", "bot says", user=None, subtype="bot_message", extra={"bot_id": "B1"}
        )
        if edit:
            server.edit_message("C1", parent.ts, "question, edited")
            server.edit_message("C1", reply.ts, "answer, edited")
        records = messages(connector(server), Window(None, END))
    if edit:
        return [r for r in records if r.ts in (parent.ts, reply.ts)]
    return records


class TestSlackConformance(ConnectorConformanceSuite[SlackMessage]):
    def make_connector(self) -> SlackConnector:
        config = SlackConfig(name="sl", token="xoxb-x", channels=["C1"], subject="slack:{team}")
        return SlackConnector(config)

    def recorded_records(self) -> Sequence[SlackMessage]:
        return _recorded(edit=False)

    def edited_records(self) -> Sequence[SlackMessage]:
        return _recorded(edit=True)

    def test_deletions_are_reported_and_nothing_else(self, fake: FakeSlack) -> None:
        self.source = fake
        super().test_deletions_are_reported_and_nothing_else()

    def deletion_scenario(self) -> DeletionScenario:
        fake = self.source
        kept = fake.post_message("C1", "we ship on friday", ts=f"{START_TS + 10}.000000")
        doomed = fake.post_message("C1", "wrong channel, sorry", ts=f"{START_TS + 20}.000000")
        fake.post_reply("C1", kept.ts, "ok", ts=f"{START_TS + 30}.000000")

        def remove() -> str:
            fake.delete_message("C1", doomed.ts)
            return f"slack:{TEAM}:C1:{doomed.ts}"

        return DeletionScenario(
            read=lambda: connector(fake), remove=remove, window=Window(at(5), at(3600))
        )


# -- deletions --------------------------------------------------------------------------------


def test_a_message_gone_from_a_completely_read_history_is_tombstoned(fake: FakeSlack) -> None:
    messages_ = [fake.post_message("C1", f"m{i}", ts=f"{START_TS + i}.000000") for i in range(4)]
    store = SimulatedIngest()
    sync(connector(fake), store, None, at(60))
    assert "tombstoned" not in sync(connector(fake), store, at(30), at(90))

    fake.delete_message("C1", messages_[1].ts)
    outcome = sync(connector(fake), store, at(60), at(120))  # the lookback reaches it

    assert outcome == {"tombstoned": 1}
    assert store.deleted == {f"slack:{TEAM}:C1:{messages_[1].ts}"}


def test_a_deleted_message_older_than_the_lookback_is_not_seen(fake: FakeSlack) -> None:
    old = fake.post_message("C1", "old", ts=f"{START_TS}.000000")
    store = SimulatedIngest()
    sync(connector(fake), store, None, at(60))
    fake.delete_message("C1", old.ts)

    assert sync(connector(fake, lookback="1d"), store, at(3 * 86400), at(4 * 86400)) == {}
    assert store.deleted == set()


def test_a_deleted_parent_with_replies_is_a_tombstone_and_its_replies_stay(
    fake: FakeSlack,
) -> None:
    parent = fake.post_message("C1", "question", ts=f"{START_TS}.000000")
    reply = fake.post_reply("C1", parent.ts, "answer", ts=f"{START_TS + 5}.000000")
    store = SimulatedIngest()
    sync(connector(fake), store, None, at(60))
    fake.delete_message("C1", parent.ts)

    items = list(connector(fake).fetch(Window(None, at(120)), None))

    assert Tombstone(f"slack:{TEAM}:C1:{parent.ts}") in items
    assert store.sync(connector(fake), items) == {"tombstoned": 1, "duplicate": 1}
    assert store.deleted == {f"slack:{TEAM}:C1:{parent.ts}"}
    assert not store.stored[f"slack:{TEAM}:C1:{reply.ts}"].deleted


def test_a_message_deleted_item_is_a_tombstone_for_the_message_it_names(fake: FakeSlack) -> None:
    fake.post_message(
        "C1",
        "",
        ts=f"{START_TS + 9}.000000",
        subtype="message_deleted",
        extra={"deleted_ts": "1600000000.000100", "hidden": True},
    )

    items = list(connector(fake).fetch(Window(None, at(60)), None))

    assert Tombstone(f"slack:{TEAM}:C1:1600000000.000100") in items
    assert not any(isinstance(item, SlackMessage) for item in items)


def test_config_parses_through_the_registry_and_checks_subject_fields() -> None:
    from memsync.connectors import ConnectorConfigError, load_registry

    (config,) = load_registry().parse_configs(
        [
            {
                "name": "s",
                "type": "slack",
                "token": "xoxb-1",
                "channels": ["general"],
                "subject": "slack:{team}:{channel}",
                "lookback": "3d",
            }
        ]
    )
    assert isinstance(config, SlackConfig)
    assert config.lookback == timedelta(days=3)
    with pytest.raises(ConnectorConfigError, match="ticket_id"):
        load_registry().parse_configs(
            [
                {
                    "name": "s",
                    "type": "slack",
                    "token": "xoxb-1",
                    "channels": ["C1"],
                    "subject": "t:{ticket_id}",
                }
            ]
        )


def test_public_surface_is_what_we_meant() -> None:
    import memsync.connectors.slack as package

    assert sorted(package.__all__) == [
        "CONTENTLESS_SUBTYPES",
        "SLACK",
        "SlackConfig",
        "SlackConnector",
        "SlackMessage",
        "slack_ts_to_datetime",
    ]
    assert all(hasattr(package, name) for name in package.__all__)


# -- the walk, oldest first ------------------------------------------------------------------


@pytest.fixture(scope="module")
def walk_server() -> Iterator[FakeSlack]:
    with FakeSlack(token="xoxb-test", start_ts=START_TS) as server:
        yield server


_channels_made = itertools.count()


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    gaps=st.lists(
        st.one_of(st.integers(1, 5), st.integers(1, 10**6), st.integers(1, 10**11)), max_size=40
    ),
    page_size=st.integers(1, 9),
    from_the_start=st.booleans(),
)
def test_the_walk_hands_out_every_message_once_in_position_order_and_ends(
    walk_server: FakeSlack, gaps: list[int], page_size: int, from_the_start: bool
) -> None:
    """Whatever the spacing (a microsecond apart, or years) and the page size, every
    message of the range comes out once, oldest first, and the walk ends."""
    channel = f"C{next(_channels_made)}"
    walk_server.add_channel(channel, channel.lower(), created=START_TS)
    micros = START_TS * 1_000_000
    posted: list[str] = []
    for gap in gaps:
        micros += gap
        posted.append(f"{micros // 1_000_000}.{micros % 1_000_000:06d}")
        walk_server.post_message(channel, "m", ts=posted[-1])
    end = datetime.fromtimestamp(micros // 1_000_000 + 1, UTC)
    conn = connector(walk_server, channels=[channel], page_size=page_size, lookback="0s")
    window = Window(None if from_the_start else T0, end)

    read = messages(conn, window)

    assert [m.ts for m in read] == posted
    positions = [m.position for m in read]
    assert positions == sorted(positions)


def test_a_reply_is_handed_out_right_after_its_parent_at_the_parents_position(
    fake: FakeSlack,
) -> None:
    parent = fake.post_message("C1", "question")
    between = fake.post_message("C1", "unrelated")
    reply = fake.post_reply("C1", parent.ts, "answer")  # posted after ``between``
    fake.edit_message("C1", parent.ts, "question, edited")  # edited after everything

    read = messages(connector(fake), Window(None, END))

    assert [m.ts for m in read] == [parent.ts, reply.ts, between.ts]
    assert [m.position for m in read] == [slack_ts_to_datetime(t) for t in (parent.ts,) * 2] + [
        slack_ts_to_datetime(between.ts)
    ]
    assert read[0].changed_at > read[2].position  # the edit does not move it


def test_a_read_cut_short_resumes_from_its_last_position_and_finds_the_rest(
    fake: FakeSlack,
) -> None:
    """What the runner does with an ordered stream: checkpoint at the last position
    handed out, then read again from there; an old message edited later and a reply
    posted later are not skipped by that checkpoint."""
    posted = [fake.post_message("C1", f"m{i}", ts=f"{START_TS + i * 60}.000000") for i in range(30)]
    fake.post_reply("C1", posted[2].ts, "late reply", ts=f"{START_TS + 29 * 60 + 1}.000000")
    fake.edit_message(
        "C1", posted[3].ts, "m3, edited", edited_ts=f"{START_TS + 29 * 60 + 2}.000000"
    )
    end = T0 + timedelta(hours=1)
    conn = connector(fake, page_size=4, lookback="0s", retry={"max_attempts": 1})
    handed_out: list[SlackMessage] = []

    def read_until_stopped() -> None:
        for item in conn.fetch(Window(T0, end), None):
            if isinstance(item, SlackMessage):
                handed_out.append(item)
                if len(handed_out) == 6:
                    fake.script_rate_limit("conversations.history", times=5)

    with pytest.raises(RateLimitExhausted):
        read_until_stopped()
    assert len(handed_out) < 31  # cut short
    checkpoint = handed_out[-1].position

    rest = messages(connector(fake, page_size=4, lookback="0s"), Window(checkpoint, end))

    stored = {m.ts: m.data["text"] for m in [*handed_out, *rest]}
    assert sorted(stored) == sorted([*(m.ts for m in posted), f"{START_TS + 29 * 60 + 1}.000000"])
    assert stored[posted[3].ts] == "m3, edited"
