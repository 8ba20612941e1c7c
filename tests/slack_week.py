"""A week of a busy Slack channel on the fake Slack (:class:`FakeSlack`), for the tests of
the overlap re-read: every half hour a message, some with a reply, stored by a first
sync with no budget; then a few changes of the kind the re-read is there to find."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from memsync.connectors.slack import SlackConfig
from memsync.connectors.slack.fake_api import FakeSlack

T0 = datetime(2023, 11, 14, tzinfo=UTC)
FIRST_SYNC_AT = T0 + timedelta(days=7, minutes=10)
TEAM = "T12345678"
HALF_HOUR = timedelta(minutes=30)


def ts(moment: datetime) -> str:
    return f"{int(moment.timestamp())}.000000"


def key(message_ts: str) -> str:
    return f"slack:{TEAM}:C1:{message_ts}"


def week_config(base_url: str) -> SlackConfig:
    """Channel C1 from ``T0``, 20 messages a page, the default week of lookback."""
    return SlackConfig(
        name="sl",
        token="xoxb-test",
        channels=["C1"],
        base_url=base_url + "/api",
        subject="slack:{channel}",
        page_size=20,
        overlap="1m",
        start=T0,
    )


@dataclass
class BusyWeek:
    """The keys the week holds (``posted``), and those its changes add (``new``) and
    revise (``edited``)."""

    posted: set[str] = field(default_factory=set)
    parents: list[str] = field(default_factory=list)
    new: set[str] = field(default_factory=set)
    edited: set[str] = field(default_factory=set)

    @classmethod
    def post(cls, fake: FakeSlack, start: datetime = T0) -> BusyWeek:
        """336 messages over the week from ``start`` (by default the week before
        ``FIRST_SYNC_AT``), 14 with a reply."""
        week = cls()
        fake.add_channel("C1", "general", created=int(start.timestamp()))
        for i in range(7 * 48):
            message = fake.post_message("C1", f"m{i}", ts=ts(start + i * HALF_HOUR))
            week.posted.add(key(message.ts))
            if i % 24 == 5:
                week.parents.append(message.ts)
                at = start + i * HALF_HOUR + timedelta(minutes=1)
                week.posted.add(key(fake.post_reply("C1", message.ts, f"re {i}", ts=ts(at)).ts))
        return week

    def change(self, fake: FakeSlack, now: datetime) -> None:
        """Within the hour before ``now``: five new messages, four edits of messages up
        to a week old, and a reply to a thread of the second day."""
        for i in range(5):
            message = fake.post_message("C1", f"new {i}", ts=ts(now - timedelta(minutes=40 - i)))
            self.new.add(key(message.ts))
        for i in (40, 100, 200, 300):
            old = ts(T0 + i * HALF_HOUR)
            fake.edit_message("C1", old, f"m{i}, edited", edited_ts=ts(now - HALF_HOUR))
            self.edited.add(key(old))
        reply = fake.post_reply("C1", self.parents[2], "late", ts=ts(now - timedelta(minutes=20)))
        self.new.add(key(reply.ts))
