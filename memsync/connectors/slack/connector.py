"""The Slack connector: messages and thread replies of configured channels.

What is read, per run (through slack-sdk's ``WebClient``, one request at a time):

- ``auth.test`` once: the team id every key starts with (and a token check);
- ``conversations.list`` (cursor pagination) only if a channel is given by name;
- per channel, ``conversations.history`` over ``[min(window.start, window.end -
  lookback), window.end]`` (from the epoch on a first read without ``start``): the
  window, and the history of the last ``lookback`` before it; walked oldest first in
  windows of about a page (``oldest``, ``latest``, ``inclusive``; see
  :meth:`SlackConnector._history_oldest_first`), and ``conversations.info`` once when
  such a first read does not fit a page (where the channel's history starts);
- ``conversations.replies`` for every thread parent in that range whose
  ``latest_reply`` lies in the window, right after the parent: a reply posted today
  to a parent up to ``lookback`` old is found although the parent is older than the
  window. ``lookback`` counts back from the run's end (now), not from the window start:
  a run catching up far behind (after runs cut short) reads no history before its
  window that is older than ``lookback`` anyway.

A top-level message or reply becomes a record when it was posted in the window or
edited in it (``edited.ts``); older, unchanged messages of the lookback range are read
but not handed out. An edit keeps the key and changes the payload: a revision.

Deletions: a ``message_deleted`` item (its ``deleted_ts``) and a ``tombstone`` (a
deleted parent whose replies remain) are tombstones for that message. And the history
of each channel is read completely over that range, so
after it the fetch lists every top-level message of that range: one stored there and
absent now was deleted (a read cut short lists nothing).

Streams and order: each configured channel is a stream of its own, ordered, read from
its own checkpoint, which the runner moves after every committed batch to the highest
position committed. A record's position is where a read finds it: a message's post
time, a reply's parent's (replies are read through their parent), never an edit's
time, so an edited old message does not carry the checkpoint past messages not read
yet. ``conversations.history`` answers newest first, so the history is walked in
windows from the oldest (each window one request, a page that does not fit its window
kept for later rather than paged back through), and records go out as each window is
read, in position order: a run cut short (a rate limit, a budget) keeps what went out,
the next resumes at the last committed position, and successive runs get through a
channel of any size. Memory is a window's messages and the few pages kept.

The overlap re-read: the history before the window (the lookback) hands few records out
(only what changed), so the position alone cannot say how far a run got in it. A walk
is therefore a pass (:class:`OverlapPass`) that yields a
:class:`~memsync.connectors.base.Progress` after every window read with its threads;
the runner stores its token with the checkpoint, and the next read continues the pass
there instead of starting the lookback again, so a lookback holding more than a run's
budget is re-read by successive runs. When a pass reaches a run's end, the cursor
advances as before and the next run begins a new pass, handing out what changed since
this one began (an edit made behind a long pass is found by the next).

slack-sdk is configured with ``retry_handlers=[]``: its rate-limit handler would sleep
``Retry-After`` plus jitter itself, uncapped; here each call goes through the shared
:class:`~memsync.connectors.retry.Retrier` (injected sleeper and clock, capped), per
method, resuming from the page's cursor.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from memsync.clock import Clock
from memsync.connectors._parsing import optional_int, optional_str
from memsync.connectors.base import (
    Cursor,
    Deletion,
    Listing,
    Progress,
    RecordConnector,
    Stream,
    Window,
    fetch_every_stream,
)
from memsync.connectors.config import SubjectTemplateField
from memsync.connectors.errors import RateLimited, RetryableError, SkipRecord, StopRun
from memsync.connectors.retry import Retrier, retry_after_from_headers
from memsync.connectors.slack.declaration import SLACK, SlackConfig
from memsync.connectors.webhooks import WebhookReceiver
from memsync.episode import JSONObject, KeyScope, Tombstone
from memsync.stopping import Sleeper

if TYPE_CHECKING:
    from slack_sdk import WebClient
    from slack_sdk.errors import SlackApiError

_SOURCE = "slack"
# Slack channel names are lower case, so an upper-case C/G/D… value is an id.
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]+$")

#: Message subtypes that announce something rather than say something; they become
#: :class:`SkipRecord` with the subtype as the reason.
CONTENTLESS_SUBTYPES: frozenset[str] = frozenset(
    {
        "channel_join",
        "channel_leave",
        "group_join",
        "group_leave",
        "channel_archive",
        "channel_unarchive",
        "group_archive",
        "group_unarchive",
        "pinned_item",
        "unpinned_item",
        "ekm_access_denied",
    }
)

# Errors after which retrying cannot help: a person has to fix the token, the scopes,
# the channel list or the bot's membership.
_FATAL_ERRORS = {
    "invalid_auth": "Slack refused the token",
    "not_authed": "no token was sent",
    "account_inactive": "the token's user or bot was deactivated",
    "token_revoked": "the token was revoked",
    "token_expired": "the token expired",
    "missing_scope": "the token lacks a scope (channels:history, groups:history, "
    "channels:read, groups:read)",
    "not_in_channel": "the bot is not a member of the channel; invite it",
    "channel_not_found": "the channel does not exist or the token cannot see it",
}
_TRANSIENT_ERRORS = {"internal_error", "fatal_error", "service_unavailable", "request_timeout"}

#: History items that stand for a deleted message rather than being one.
_DELETED_SUBTYPES = frozenset({"message_deleted", "tombstone"})


@dataclass(frozen=True, slots=True)
class SlackMessage:
    """A top-level message or a thread reply, as the API returned it."""

    team: str
    channel: str
    channel_name: str | None
    ts: str
    thread_ts: str | None
    edited_ts: str | None
    subtype: str | None
    user: str | None
    data: JSONObject

    @property
    def is_reply(self) -> bool:
        return self.thread_ts is not None and self.thread_ts != self.ts

    def key(self) -> str:
        """``slack:{team}:{channel}:{ts}``. Repeats: a message or reply re-read (overlap,
        lookback, backfill) gets the same key. Conflicts: Slack never gives two messages
        of one channel the same ts."""
        return _key(self.team, self.channel, self.ts)

    @property
    def position(self) -> datetime:
        """Where a read of the channel finds the record: a message at its post, a reply
        at its parent's (replies are read through their parent). ``fetch`` yields
        records in this order, and a read from a position finds every record at or
        after it again, edited or not (see :meth:`SlackConnector.fetch_stream`)."""
        return slack_ts_to_datetime(self.thread_ts if self.is_reply and self.thread_ts else self.ts)

    @property
    def changed_at(self) -> datetime:
        """When the message last changed: its edit, else its post."""
        posted = slack_ts_to_datetime(self.ts)
        if self.edited_ts is None:
            return posted
        return max(posted, slack_ts_to_datetime(self.edited_ts))

    @property
    def occurred_at(self) -> datetime:
        return slack_ts_to_datetime(self.ts)

    top_level_type: ClassVar[str] = "slack.message"

    @property
    def episode_type(self) -> str:
        return "slack.reply" if self.is_reply else self.top_level_type

    def subject_values(self) -> Mapping[str, SubjectTemplateField]:
        return {
            "team": self.team,
            "channel": self.channel,
            "channel_name": self.channel_name,
            "user": self.user,
            "thread_ts": self.thread_ts,
        }

    def payload(self) -> JSONObject:
        """The message's content. Raises :class:`SkipRecord` for contentless subtypes."""
        if self.subtype in CONTENTLESS_SUBTYPES:
            raise SkipRecord(f"{self.key()}: subtype '{self.subtype}' carries no content")
        return dict(self.data)


def _key(team: str, channel: str, ts: str) -> str:
    return f"{_SOURCE}:{team}:{channel}:{ts}"


def slack_ts_to_datetime(ts: str) -> datetime:
    """``"1512085950.000216"`` as an aware UTC datetime, exact to the microsecond."""
    seconds, _, fraction = ts.partition(".")
    if not seconds.isdigit() or not (fraction == "" or fraction.isdigit()):
        raise StopRun(f"{_SOURCE}: {ts!r} is not a Slack timestamp")
    micros = int(fraction.ljust(6, "0")[:6]) if fraction else 0
    return datetime.fromtimestamp(int(seconds), UTC) + timedelta(microseconds=micros)


def _datetime_to_slack_ts(moment: datetime) -> str:
    return _micros_to_ts(_to_micros(moment))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _to_micros(moment: datetime) -> int:
    return max(0, (moment.astimezone(UTC) - _EPOCH) // timedelta(microseconds=1))


def _micros_to_ts(micros: int) -> str:
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


def _micros_to_datetime(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _ts_to_micros(ts: str) -> int:
    return _to_micros(slack_ts_to_datetime(ts))


def _checked_ts(value: object) -> str | None:
    """A Slack ts read back from a token (``None`` stays ``None``)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"not a Slack ts: {value!r}")
    slack_ts_to_datetime(value)
    return value


def _to_micros_delta(duration: timedelta) -> int:
    return duration // timedelta(microseconds=1)


def _iso(micros: int) -> str:
    return _micros_to_datetime(micros).isoformat(timespec="seconds").replace("+00:00", "Z")


def _ts_micros(raw: Mapping[str, Any]) -> int:
    return _to_micros(slack_ts_to_datetime(optional_str(raw.get("ts")) or ""))


def _has_more(data: Mapping[str, Any]) -> bool:
    """Whether a history page says the window holds more than it: ``has_more``, or a
    ``next_cursor`` without it."""
    metadata = data.get("response_metadata")
    cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else None
    return data.get("has_more") is True or (isinstance(cursor, str) and bool(cursor))


def _history_items(data: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    items = data.get("messages")
    if not isinstance(items, list):
        raise StopRun(f"slack '{name}': conversations.history returned no 'messages' list")
    return [item for item in items if isinstance(item, dict)]


@dataclass(frozen=True, slots=True)
class OverlapPass:
    """One walk of a channel's history over the lookback and the window after it: the
    *overlap re-read*, which a read resumes from the stream's checkpoint token instead
    of starting again, so that a lookback holding more than a run's budget can read is
    re-read by successive runs, each getting further, and then the cursor advances as
    usual. Times are microseconds since the epoch.

    ``began``: the end of the run that began the pass (edits are looked for from
    ``since``); ``oldest``: where the walk began (``None``: the channel's creation);
    ``after``: the end of the last history window read with its threads (``None``:
    none yet); ``read``: top-level messages read so far, over ``runs`` runs;
    ``stalled``: runs in a row that got nowhere; ``floor``: the stream's checkpoint when
    the pass began (a checkpoint past it was moved by this pass: every record before it
    was handed out, its thread read, so the walk goes on from there even inside a
    window it did not finish). ``current`` is false once the
    walk reached a run's end: then the token only says when that pass began, so the
    next pass hands out what changed since then (minus the overlap): an edit made while
    a long pass read past its message is found by the next pass.
    """

    began: int
    oldest: int | None
    since: int | None
    after: int | None = None
    read: int = 0
    runs: int = 0
    stalled: int = 0
    current: bool = True
    page_size: int = 0
    floor: int | None = None
    thread: str | None = None
    thread_after: str | None = None

    @classmethod
    def begin(
        cls,
        *,
        began: datetime,
        oldest: datetime | None,
        since: datetime | None,
        previous: OverlapPass | None,
        overlap: timedelta,
        page_size: int,
        checkpoint: Cursor | None,
    ) -> OverlapPass:
        """A new pass over ``[oldest, …]`` handing out what changed since ``since``, or
        since the previous pass began (minus ``overlap``) when that is earlier."""
        from_micros = None if since is None else _to_micros(since)
        if from_micros is not None and previous is not None:
            from_micros = min(from_micros, previous.began - _to_micros_delta(overlap))
        return cls(
            began=_to_micros(began),
            oldest=None if oldest is None else _to_micros(oldest),
            since=from_micros,
            page_size=page_size,
            floor=None if checkpoint is None else _to_micros(checkpoint.position),
        )

    @classmethod
    def from_token(cls, token: str | None) -> OverlapPass | None:
        """The pass a checkpoint token holds; ``None`` for none (or one not written by
        this connector: a fresh pass is always correct, only slower)."""
        if not token:
            return None
        try:
            data = json.loads(token)["overlap_pass"]
            return cls(
                began=_ts_to_micros(data["began"]),
                oldest=_ts_to_micros(data["oldest"]) if data["oldest"] else None,
                since=_ts_to_micros(data["since"]) if data["since"] else None,
                after=_ts_to_micros(data["after"]) if data["after"] else None,
                read=int(data["read"]),
                runs=int(data["runs"]),
                stalled=int(data["stalled"]),
                current=bool(data["current"]),
                page_size=int(data["page_size"]),
                floor=_ts_to_micros(data["floor"]) if data["floor"] else None,
                thread=_checked_ts(data["thread"]),
                thread_after=_checked_ts(data["thread_after"]),
            )
        except (ValueError, KeyError, TypeError, StopRun):
            return None

    def token(self) -> str:
        def ts(micros: int | None) -> str | None:
            return None if micros is None else _micros_to_ts(micros)

        data = {
            "began": ts(self.began),
            "oldest": ts(self.oldest),
            "since": ts(self.since),
            "after": ts(self.after),
            "read": self.read,
            "runs": self.runs,
            "stalled": self.stalled,
            "current": self.current,
            "page_size": self.page_size,
            "floor": ts(self.floor),
            "thread": self.thread,
            "thread_after": self.thread_after,
        }
        return json.dumps({"overlap_pass": data}, separators=(",", ":"))

    @property
    def since_datetime(self) -> datetime | None:
        return None if self.since is None else _micros_to_datetime(self.since)

    @property
    def resume_micros(self) -> int:
        """Where the walk goes on: right after the last window read."""
        return self.after + 1 if self.after is not None else (self.oldest or 0)

    @property
    def from_creation(self) -> bool:
        return self.after is None and self.oldest is None

    def next_run(self, checkpoint: Cursor | None) -> OverlapPass:
        """The pass as a new run takes it up, at ``checkpoint`` if this pass moved it past
        the last window it finished."""
        resumed = replace(self, runs=self.runs + 1)
        if checkpoint is None:
            return resumed
        position = _to_micros(checkpoint.position)
        moved = self.floor is None or position > self.floor
        if moved and position > resumed.resume_micros:
            return replace(resumed, after=position - 1)
        return resumed

    def window_read(self, through: int, messages: int) -> OverlapPass:
        return replace(
            self,
            after=through,
            read=self.read + messages,
            stalled=0,
            thread=None,
            thread_after=None,
        )

    def thread_read(self, parent: str, reply: str) -> OverlapPass:
        """Inside a window: everything before the thread of ``parent`` was read, and the
        thread up to ``reply``; the next run goes on there (a thread of any length)."""
        before_parent = _ts_to_micros(parent) - 1
        after = before_parent if self.after is None else max(self.after, before_parent)
        return replace(self, after=after, stalled=0, thread=parent, thread_after=reply)

    def made_no_progress(self) -> OverlapPass:
        return replace(self, stalled=self.stalled + 1)

    def finished(self) -> OverlapPass:
        return replace(self, current=False)

    def progress(self, end: datetime) -> Progress:
        return Progress(self.token(), self.note(_to_micros(end)), advanced=not self.stalled)

    def note(self, end: int) -> str:
        """Where the pass stands, for people (``state show``, the run record)."""
        runs = f"{self.runs} run{'s' if self.runs != 1 else ''}"
        if not self.current:
            done = f"overlap re-read complete: {self.read:,} messages in {runs}"
            if self.runs > 1:
                done += (
                    f"; edits and replies before the checkpoint are found up to {self.runs} "
                    "runs late (a shorter lookback shortens the re-read)"
                )
            return done
        where = self.resume_micros
        resumes = f"resumes at ts {_micros_to_ts(where)} ({_iso(where)})"
        if self.stalled:
            window = (
                "the first history window"
                if self.from_creation
                else (f"the history window from ts {_micros_to_ts(where)}")
            )
            return (
                f"overlap re-read made no progress in {self.stalled} run"
                f"{'s' if self.stalled != 1 else ''}: {window} costs more requests than one "
                f"run may make (a page of its history or of a thread); set a smaller page_size "
                f"(now {self.page_size}) or retry caps that wait the rate limit out"
            )
        total = ""
        if (
            self.read
            and self.oldest is not None
            and self.after is not None
            and self.after > self.oldest
        ):
            estimate = self.read * (end - self.oldest) // (self.after - self.oldest)
            total = f"/≈{max(estimate, self.read):,}"
        return f"overlap re-read {self.read:,}{total} messages in {runs}, {resumes}"


@dataclass(frozen=True, slots=True)
class _Channel:
    id: str
    name: str | None


class SlackConnector(RecordConnector[SlackConfig, SlackMessage], declaration=SLACK):
    """Messages and thread replies of Slack channels.

    Repeats: the overlap and the lookback re-read messages; keys make that free. An
    edited message (``edited.ts``) is a revision of the same episode. Contentless
    subtypes (joins, leaves, pins…) are yielded and then refused by the mapping with
    :class:`SkipRecord`, so the runner counts them. Rate limits: a 429 waits
    ``Retry-After`` per call within the ``retry`` caps, then
    :class:`RateLimitExhausted`; token and channel errors raise :class:`StopRun`.
    """

    def __init__(
        self,
        config: SlackConfig,
        *,
        sleeper: Sleeper | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(config, sleeper=sleeper)
        self.retrier = Retrier(config.retry.policy(), sleeper=self.sleeper, clock=clock)
        self._client: WebClient | None = None
        self._team_id: str | None = None
        self._resolved: dict[str, _Channel] | None = None
        self._answered = 0  # calls the source answered, to tell a stall from a spent budget

    def source_updated_at(self, record: SlackMessage) -> datetime | None:
        """Its edit (``edited.ts``), else its post: Slack marks every edit there."""
        return record.changed_at

    def webhook_receiver(self) -> WebhookReceiver[SlackMessage] | None:
        """Events API ``message`` deliveries, when ``webhook:`` is configured."""
        if self.config.webhook is None:
            return None
        # Imported here: the receiver module builds on this one's parser.
        from memsync.connectors.slack.webhook import SlackWebhookReceiver

        return SlackWebhookReceiver(
            self.config.webhook.secret.get_secret_value(),
            self._channels,
            self.config.include_threads,
        )

    @property
    def client(self) -> WebClient:
        # Created on first use, so listing or validating connectors never imports
        # slack-sdk.
        if self._client is None:
            from slack_sdk import WebClient

            self._client = WebClient(
                base_url=self.config.api_base,
                token=self.config.token.get_secret_value(),
                timeout=max(1, int(self.config.timeout.total_seconds())),
                # No library retries: rate limits are waited out by the Retrier.
                retry_handlers=[],
            )
        return self._client

    # --- reading --------------------------------------------------------------------------

    def streams(self) -> tuple[Stream, ...]:
        """One ordered stream per configured channel, named as configured (an id, or a
        name without ``#``), in the configured order."""
        return tuple(Stream(name, ordered=True) for name in self.config.stream_names())

    def fetch(
        self, window: Window, cursor: Cursor | None
    ) -> Iterator[SlackMessage | Deletion | Progress]:
        """Every channel in turn (see :meth:`fetch_stream`)."""
        return fetch_every_stream(self, window, cursor)

    def fetch_stream(
        self, stream: Stream, window: Window, cursor: Cursor | None
    ) -> Iterator[SlackMessage | Deletion | Progress]:
        """Yield the channel's messages and replies posted or edited in the window, in
        position order (a message at its post, its replies right after it), and the
        deletions seen: tombstones as they are read, the listing of the range read at
        the end. After each window of the history walk (its threads included), a
        :class:`Progress`: a read given a cursor carrying it continues the pass there,
        so a lookback larger than a run's budget is re-read by successive runs instead
        of from its start by each (see :class:`OverlapPass`). A read from the last
        position handed out finds every record not handed out yet again, so a run cut
        short resumes there (see the module docstring)."""
        if stream.name not in self.config.stream_names():
            raise ValueError(f"slack '{self.name}' reads no channel {stream.name!r}")
        team = self._team()
        channel = self._channels()[stream.name]
        start = window.start or self.config.start
        stored = OverlapPass.from_token(cursor.token if cursor is not None else None)
        if stored is not None and stored.current:
            walk = stored
        else:
            # ``lookback`` before the run's end, or from the window start when that is
            # earlier: a run catching up (a window far behind, after runs cut short)
            # does not read a lookback's worth of history again before every window.
            oldest = None if start is None else min(start, window.end - self.config.lookback)
            walk = OverlapPass.begin(
                began=window.end,
                oldest=oldest,
                since=start,
                previous=stored,
                overlap=self.config.overlap,
                page_size=self.config.page_size,
                checkpoint=cursor,
            )
        return self._channel_records(team, channel, walk.next_run(cursor), window.end)

    def _channel_records(
        self, team: str, channel: _Channel, walk: OverlapPass, end: datetime
    ) -> Iterator[SlackMessage | Deletion | Progress]:
        since = walk.since_datetime
        present: set[str] = set()
        first = walk.resume_micros
        read_to: int | None = None  # the end of the last window read, threads included
        got_further = False
        answered = self._answered
        history = self._history_oldest_first(
            channel, first, _to_micros(end), from_creation=walk.from_creation
        )
        try:
            for through, messages in history:
                for raw in messages:
                    message = _message(team, channel, raw)
                    if message.subtype in _DELETED_SUBTYPES:
                        gone = optional_str(raw.get("deleted_ts")) or message.ts
                        yield Tombstone(_key(team, channel.id, gone))
                    else:
                        present.add(message.key())
                        if _changed_since(message, since):
                            got_further = True
                            yield message
                    latest_reply = optional_str(raw.get("latest_reply"))
                    if (
                        self.config.include_threads
                        and raw.get("reply_count")
                        and latest_reply is not None
                        and (since is None or slack_ts_to_datetime(latest_reply) >= since)
                    ):
                        # Right after their parent: their position is the parent's. A
                        # thread a run stopped in goes on after its last reply read.
                        resumed = walk.thread_after if walk.thread == message.ts else None
                        replies = self._replies(
                            team, channel, message.ts, since, end, after=resumed
                        )
                        for reply in replies:
                            if isinstance(reply, _ThreadRead):
                                walk = walk.thread_read(message.ts, reply.ts)
                                got_further = True  # a thread page: no stall
                                yield walk.progress(end)
                            else:
                                yield reply
                read_to = through
                walk = walk.window_read(through, len(messages))
                yield walk.progress(end)
        except Exception:
            # What was read completely is listed; a pass that got nowhere says why.
            if read_to is not None:
                yield self._listing(team, channel, first, read_to, present)
            elif not got_further and self._answered > answered:
                # It read and still got through no window (a budget spent before this
                # channel is no stall).
                yield walk.made_no_progress().progress(end)
            raise
        # Every window of the range was read: what it no longer holds was deleted.
        yield walk.finished().progress(end)
        yield self._listing(team, channel, first, _to_micros(end), present)

    @staticmethod
    def _listing(team: str, channel: _Channel, first: int, last: int, present: set[str]) -> Listing:
        """The top-level messages of ``[first, last]`` (microseconds), read completely."""
        scope = KeyScope(
            _key(team, channel.id, ""),
            occurred_from=_micros_to_datetime(first) if first > 0 else None,
            occurred_to=_micros_to_datetime(last),
            episode_types=frozenset({SlackMessage.top_level_type}),
        )
        return Listing(scope, frozenset(present))

    def _history_oldest_first(
        self, channel: _Channel, first: int, last: int, *, from_creation: bool = False
    ) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """The channel's history over ``[first, last]`` (microseconds), as the messages
        of consecutive windows, oldest first, each window complete, with the window's
        end (the walk has read everything up to it). ``from_creation``:
        the range starts at the epoch, and is quiet until the channel was created.

        ``conversations.history`` answers a window newest first and, when it holds more
        than a page, with the page closest to ``latest`` (and ``has_more``). So each
        window is one request (``oldest``, ``latest``, ``inclusive``), and a window that
        does not fit is not paged back through: its page, complete from its oldest
        message to the window's end, is kept for later, and a shorter window is asked
        for, ending before the kept page and lasting as long as the kept page's
        messages span (how long a page lasts there; after an empty window, half the
        stretch up to the kept page if that is longer). A window that fits goes out; the
        next starts right after it, twice as long when this one was less than half
        full (sixteen times when it was empty), never past a kept page. The first
        window is the whole range, so a range that fits a page costs one request, and
        a kept page is never asked for again. The walk ends: every page that does not
        fit moves the window's end back before it, and one microsecond holds at most
        one message (a channel's ts are unique).
        """
        page_size = self.config.page_size
        kept: list[tuple[int, int, list[dict[str, Any]]]] = []  # (from, to, messages)
        quiet_until: int | None = None
        quiet = False  # whether the last window that fitted was empty
        position, width = first, last - first
        while position <= last:
            if kept and kept[0][0] <= position:
                _, through, messages = kept.pop(0)
                yield through, messages
                position = through + 1
                continue
            window_end = min(position + width, kept[0][0] - 1 if kept else last)
            params = {
                "channel": channel.id,
                "oldest": _micros_to_ts(position),
                "latest": _micros_to_ts(window_end),
                "inclusive": True,
                "limit": page_size,
            }
            data = self._call("conversations.history", params)
            messages = sorted(_history_items(data, self.name), key=_ts_micros)
            if _has_more(data) and window_end > position:
                if not messages:
                    raise StopRun(
                        f"slack '{self.name}': conversations.history says has_more with no messages"
                    )
                oldest_on_page = _ts_micros(messages[0])
                kept.insert(0, (oldest_on_page, window_end, messages))
                if from_creation and quiet_until is None:
                    quiet_until = self._created_micros(channel)
                gap = oldest_on_page - position - 1  # has_more: something lies before it
                span = _ts_micros(messages[-1]) - oldest_on_page
                if span <= 0:
                    step = gap // 2
                elif quiet:
                    # After an empty window the page's density says little about the
                    # quiet stretch before it: halve it too (a bisection to where the
                    # messages start).
                    step = max(span, gap // 2)
                else:
                    step = span
                skip = max(0, (quiet_until or 0) - position)
                width = max(0, min(gap, skip + step))
                continue
            yield window_end, messages
            position = window_end + 1
            quiet = not messages
            if quiet:
                width = max(1, width * 16)
            elif len(messages) < page_size // 2:
                width = max(1, width * 2)

    def _created_micros(self, channel: _Channel) -> int:
        """When the channel was created (``conversations.info``), in microseconds; 0 if
        the answer does not say."""
        data = self._call("conversations.info", {"channel": channel.id})
        info = data.get("channel")
        created = optional_int(info.get("created")) if isinstance(info, dict) else None
        return 0 if created is None else max(0, created) * 1_000_000

    def _replies(
        self,
        team: str,
        channel: _Channel,
        parent_ts: str,
        start: datetime | None,
        end: datetime,
        *,
        after: str | None = None,
    ) -> Iterator[SlackMessage | _ThreadRead]:
        """The thread's replies posted or edited since ``start`` (from the one at
        ``after`` on, when given: a thread a run stopped in), and after each page but the
        last a :class:`_ThreadRead`: the thread is read up to the page's last reply."""
        params: dict[str, Any] = {
            "channel": channel.id,
            "ts": parent_ts,
            "latest": _datetime_to_slack_ts(end),
            "inclusive": True,
            "limit": self.config.page_size,
        }
        if after is not None:
            params["oldest"] = after
        try:
            for items, more in self._page_lists("conversations.replies", params, "messages"):
                last: str | None = None
                for raw in items:
                    reply = _message(team, channel, raw)
                    # The parent comes first in every thread; history already handled it.
                    if reply.is_reply:
                        last = reply.ts
                        if _changed_since(reply, start):
                            yield reply
                if more and last is not None:
                    yield _ThreadRead(last)
        except _ThreadGone:
            return  # the parent was deleted while we read: no replies to keep

    def _team(self) -> str:
        if self._team_id is None:
            data = self._call("auth.test", {})
            team = optional_str(data.get("team_id"))
            if team is None:
                raise StopRun(f"slack '{self.name}': auth.test returned no team_id")
            self._team_id = team
        return self._team_id

    def _channels(self) -> dict[str, _Channel]:
        """Every configured channel by its stream name; names are resolved once per
        instance (one run)."""
        if self._resolved is not None:
            return self._resolved
        wanted = self.config.stream_names()
        names = [name for name in wanted if not _CHANNEL_ID.match(name)]
        by_name: dict[str, str] = {}
        if names:
            params = {"types": "public_channel,private_channel", "limit": 1000}
            for raw in self._pages("conversations.list", params, "channels"):
                name, ident = optional_str(raw.get("name")), optional_str(raw.get("id"))
                if name is not None and ident is not None:
                    by_name[name] = ident
        unknown = [name for name in names if name not in by_name]
        if unknown:
            raise StopRun(
                f"slack '{self.name}': no channel named {', '.join(unknown)} is visible to "
                "the token (conversations.list); check the name or use the channel id"
            )
        self._resolved = {
            item: _Channel(id=by_name[item], name=item) if item in by_name else _Channel(item, None)
            for item in wanted
        }
        return self._resolved

    def _pages(
        self, method: str, params: Mapping[str, Any], items_key: str
    ) -> Iterator[dict[str, Any]]:
        """Items of every page of a cursor-paginated method; each page retried alone."""
        for items, _ in self._page_lists(method, params, items_key):
            yield from items

    def _page_lists(
        self, method: str, params: Mapping[str, Any], items_key: str
    ) -> Iterator[tuple[list[dict[str, Any]], bool]]:
        """Each page's items, and whether another page follows."""
        page_params = dict(params)
        seen: set[str] = set()
        while True:
            data = self._call(method, page_params)
            items = data.get(items_key)
            if not isinstance(items, list):
                raise StopRun(f"slack '{self.name}': {method} returned no '{items_key}' list")
            metadata = data.get("response_metadata")
            next_cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else None
            more = isinstance(next_cursor, str) and bool(next_cursor)
            yield [item for item in items if isinstance(item, dict)], more
            if not isinstance(next_cursor, str) or not next_cursor:
                return
            if next_cursor in seen:
                raise StopRun(f"slack '{self.name}': {method} repeats cursor {next_cursor!r}")
            seen.add(next_cursor)
            page_params["cursor"] = next_cursor

    # --- HTTP errors ----------------------------------------------------------------------

    def _call(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        what = f"slack '{self.name}': {method}"
        from slack_sdk.errors import SlackApiError

        def attempt() -> dict[str, Any]:
            try:
                response = self.client.api_call(method, params=dict(params))
            except SlackApiError as error:
                raise self._classify(error, what) from error
            except OSError as error:  # URLError, timeouts, resets: urllib's errors
                raise RetryableError(f"{what} failed: {type(error).__name__}: {error}") from error
            data = response.data
            if not isinstance(data, dict):
                raise StopRun(f"{what}: the response is not a JSON object; is base_url Slack's?")
            self._answered += 1
            return data

        return self.retrier.call(attempt, what=what)

    def _classify(self, error: SlackApiError, what: str) -> Exception:
        response = error.response
        status = response.status_code
        code = str(response.get("error") or "") if isinstance(response.data, dict) else ""
        headers = {str(k): str(v) for k, v in (response.headers or {}).items()}
        wait = retry_after_from_headers(headers, self.retrier.clock.now())
        if status == 429 or code == "ratelimited":
            return RateLimited(f"{what}: rate limited (HTTP {status})", retry_after=wait)
        if code == "thread_not_found":
            return _ThreadGone(f"{what}: thread_not_found")
        if code in _FATAL_ERRORS:
            return StopRun(f"{what}: {code}: {_FATAL_ERRORS[code]}")
        if status >= 500 or code in _TRANSIENT_ERRORS:
            return RetryableError(f"{what}: {code or f'HTTP {status}'}", retry_after=wait)
        return StopRun(f"{what}: {code or f'HTTP {status}'}")


@dataclass(frozen=True, slots=True)
class _ThreadRead:
    """A thread is read up to its reply ``ts``; more pages follow."""

    ts: str


class _ThreadGone(StopRun):
    """``thread_not_found``: fatal for nothing but that thread (deleted meanwhile)."""


def _changed_since(message: SlackMessage, start: datetime | None) -> bool:
    return start is None or message.changed_at >= start


def _message(team: str, channel: _Channel, raw: Mapping[str, Any]) -> SlackMessage:
    ts = optional_str(raw.get("ts"))
    if ts is None:
        raise StopRun(f"{_SOURCE}: a message in {channel.id} has no ts: {dict(raw)!r}")
    slack_ts_to_datetime(ts)  # refuse a malformed ts here, not when mapping
    edited = raw.get("edited")
    edited_ts = optional_str(edited.get("ts")) if isinstance(edited, dict) else None
    thread_ts = optional_str(raw.get("thread_ts"))
    user = optional_str(raw.get("user"))
    # reply_count, latest_reply, reply_users and reactions are left out: they change
    # when others reply or react, which must not revise this message.
    data: JSONObject = {
        "ts": ts,
        "text": raw.get("text"),
        "user": user,
        "subtype": optional_str(raw.get("subtype")),
        # Only a reply's thread_ts says something; a parent gets its own ts as
        # thread_ts when the first reply arrives, which is not an edit of the parent.
        "thread_ts": thread_ts if thread_ts != ts else None,
        "bot_id": optional_str(raw.get("bot_id")),
        "username": optional_str(raw.get("username")),
        "files": [
            {k: f.get(k) for k in ("id", "name", "title", "mimetype")}
            for f in raw.get("files") or []
            if isinstance(f, dict)
        ],
    }
    return SlackMessage(
        team=team,
        channel=channel.id,
        channel_name=channel.name,
        ts=ts,
        thread_ts=thread_ts,
        edited_ts=edited_ts,
        subtype=optional_str(raw.get("subtype")),
        user=user,
        data=data,
    )
