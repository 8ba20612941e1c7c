"""A scriptable fake of the Slack Web API (the methods the Slack connector calls).

Methods are served at ``{base_url}/api/<method>``, by POST (form-encoded or JSON body,
as slack-sdk sends them) or GET (query string); the token is read from
``Authorization: Bearer ...`` or a ``token`` parameter (a wrong one gets
``invalid_auth``, none ``not_authed``; an unknown method ``unknown_method``). Every
response is HTTP 200 with ``{"ok": ...}`` except a scripted rate limit (429 with
``Retry-After``). The server itself is a
:class:`~memsync.connectors.fake_http.FakeHTTPServer`::

    with FakeSlack(token="xoxb-test") as fake:
        fake.add_channel("C1", "general")
        fake.add_user("U1", "cal", real_name="Cal")
        m = fake.post_message("C1", "island", user="U1")  # ts auto: +1 s each
        fake.post_reply("C1", m.ts, "one island", user="U2")  # updates the parent
        fake.edit_message("C1", m.ts, "island!")  # sets edited {user, ts}
        fake.add_join("C1", "U3")  # subtype channel_join
        web = WebClient(base_url=fake.api_url, token="xoxb-test")  # base_url + "/api/"

Message shapes come from ``memsync/connectors/fixtures/slack``; ts values are Slack's
``"<seconds>.<6 digits>"`` strings; cursors are encoded the way the fixtures show
(base64 of ``next_ts:<ts digits>`` for history/replies, ``team:<channel id>`` for
conversations.list).

Scripting:

- ``add_channel(channel_id, name, *, created=None, is_private=False,
  is_archived=False) -> FakeChannel``;
- ``add_user(user_id, name, *, real_name=None, is_bot=False) -> dict`` (users.info
  shape);
- ``post_message(channel, text, *, user="U061F7AUR", ts=None, subtype=None,
  extra=None) -> FakeMessage``: top-level; ``user=None`` + ``subtype="bot_message"``
  + ``extra={"bot_id": ...}`` for bots;
- ``post_reply(channel, thread_ts, text, *, user="U061F7AUR", ts=None) ->
  FakeMessage``: the parent gets ``thread_ts``, ``reply_count``, ``latest_reply``,
  ``reply_users``, ``reply_users_count``; replies have ``parent_user_id`` and are not
  in the history;
- ``edit_message(channel, ts, text, *, edited_ts=None, edited_by=None)``: top-level or
  reply, ts unchanged; ``add_join(channel, user, *, ts=None, inviter=None)``:
  ``"<@U|name> has joined the channel"``;
- ``delete_message(channel, ts)``: as Slack does it, a top-level message without
  replies and a reply disappear (the parent's reply fields follow); a parent with
  replies stays in the history as a ``tombstone`` ("This message was deleted.");
- ``script_rate_limit(method, *, times=1, retry_after=1)``: 429 with the fixture
  headers and ``retry-after``, body ``{"ok": false, "error": "ratelimited"}``;
  ``script_error(method, error, *, times=1)``: HTTP 200 ``{"ok": false, "error":
  error}``; both return a :class:`SlackScriptedRule`;
- ``limit_budget(calls, *, retry_after=3600)``: after ``calls`` more calls, every call
  gets that 429 until the budget is set again (``None``: no budget);
- inspection: ``message(channel, ts)``, ``method_count(method)``.

Served: ``auth.test``; ``conversations.list`` (``types``, ``exclude_archived``,
``limit`` <= 1000); ``conversations.info``; ``conversations.history`` (newest first;
``oldest``, ``latest``, exclusive unless ``inclusive``; ``limit`` default 100, max
999; ``has_more``; the last page has ``next_cursor: ""`` as in
``conversations_list_last_page.json``); ``conversations.replies`` (``ts`` = the
parent; the parent first, then replies oldest first; ``limit`` default and max 1000;
the same cursor and window rules); ``users.info``. Errors: ``channel_not_found``,
``thread_not_found``, ``user_not_found``, ``invalid_cursor``. Choices not verified
against live Slack: the parent is returned only on the first replies page (and only
if inside ``oldest`` / ``latest``); ``reply_users`` is not truncated.

Not done: ``conversations.members``, ``chat.*``, ``message_deleted`` items (post one
with ``subtype`` and ``extra={"deleted_ts": ...}`` to serve it), ``thread_broadcast``,
``include_all_metadata``; ``conversations.list`` types other than public and private
channels; per-method rate tiers except by scripting.

What slack-sdk 3.48 does by itself, read from its sources
(``slack_sdk/web/base_client.py``, ``slack_sdk/http_retry/``,
``slack_sdk/web/slack_response.py``), and why the connector configures it as it does:

- Every method is sent as POST, body ``application/x-www-form-urlencoded``, even when
  declared ``http_verb="GET"``; the token goes in ``Authorization: Bearer <token>``;
  booleans become ``"1"`` / ``"0"``.
- ``retry_handlers=None`` means ``[ConnectionErrorRetryHandler()]`` only (one retry
  on connection errors, sleeping with ``time.sleep``). There is no rate-limit retry
  by default: a 429 becomes ``SlackApiError`` with ``response.status_code == 429``
  and ``response.headers["retry-after"]``.
- ``RateLimitErrorRetryHandler(max_retry_count=1)`` retries 429s by calling
  ``time.sleep(int(retry-after) + random.random())`` itself: no cap, jitter, not
  injectable (a test pins this with a patched ``time.sleep``).
- ``ok: false`` bodies with HTTP 200 raise ``SlackApiError`` from
  ``SlackResponse.validate``. Iterating a ``SlackResponse`` follows
  ``response_metadata.next_cursor`` and mutates and re-yields the same object: copy
  ``page["messages"]`` before the next iteration.

So the connector builds ``WebClient(base_url=..., token=..., retry_handlers=[])``,
catches ``SlackApiError`` and, on a 429, waits ``retry-after`` (capped) through the
injected sleep and resumes from the last cursor. A custom ``RetryHandler`` could do
the same, but it must sleep itself inside the library's loop; keeping the wait in
the connector is simpler to test.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import copy
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from memsync.connectors.fake_http import (
    FakeHTTPServer,
    FakeResponse,
    RecordedRequest,
    compact_json,
    load_fixture,
)

__all__ = ["FakeChannel", "FakeMessage", "FakeSlack", "SlackScriptedRule"]

DEFAULT_START_TS = 1_700_000_000  # 2023-11-14T22:13:20Z

Json = Any


def ts_to_micros(ts: str) -> int:
    """``"1512085950.000216"`` -> 1512085950000216 (exact; no float rounding)."""
    seconds, _, fraction = ts.partition(".")
    return int(seconds) * 1_000_000 + int((fraction or "0").ljust(6, "0")[:6])


_DELETED = "This message was deleted."


def micros_to_ts(micros: int) -> str:
    return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"


@dataclass
class FakeMessage:
    """A message as the fake holds it. Read it; script through the fake."""

    channel: str
    ts: str
    text: str
    user: str | None
    subtype: str | None = None
    thread_ts: str | None = None
    reply_count: int = 0
    latest_reply: str | None = None
    reply_users: list[str] = field(default_factory=list)
    edited: dict[str, str] | None = None
    extra: dict[str, Json] = field(default_factory=dict)
    _cache: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def is_reply(self) -> bool:
        return self.thread_ts is not None and self.thread_ts != self.ts


@dataclass
class FakeChannel:
    id: str
    name: str
    created: int
    is_private: bool = False
    is_archived: bool = False
    creator: str = "U012A3CDE"
    keys: list[int] = field(default_factory=list)  # top-level message ts (micros), ascending
    messages: dict[int, FakeMessage] = field(default_factory=dict)
    threads: dict[int, list[int]] = field(default_factory=dict)  # parent -> reply micros
    replies: dict[int, FakeMessage] = field(default_factory=dict)


@dataclass
class SlackScriptedRule:
    """A scripted response for one method; ``served`` counts how often it was sent."""

    method: str
    response: FakeResponse
    times: int
    served: int = 0

    @property
    def spent(self) -> bool:
        return self.served >= self.times


class _SlackError(Exception):
    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


class FakeSlack(FakeHTTPServer):
    """Fake Slack Web API on 127.0.0.1. Use as a context manager; point
    ``WebClient(base_url=fake.api_url)`` (``base_url + "/api/"``) at it.

    ``token``: when set, a request must carry it (``Authorization: Bearer`` or a
    ``token`` param), else ``not_authed`` (none given) / ``invalid_auth`` (wrong one).
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        team_id: str = "T12345678",
        team: str = "Subarachnoid Workspace",
        team_domain: str = "subarachnoid",
        bot_user: str = "grace",
        bot_user_id: str = "W12345678",
        start_ts: int = DEFAULT_START_TS,
    ) -> None:
        super().__init__()
        self.token = token
        self.team_id = team_id
        self.team = team
        self.team_domain = team_domain
        self.bot_user = bot_user
        self.bot_user_id = bot_user_id
        self._lock = threading.RLock()
        self._channels: dict[str, FakeChannel] = {}
        self._users: dict[str, Json] = {}
        self._rules: list[SlackScriptedRule] = []
        self._budget: int | None = None
        self._budget_retry_after = 3600
        self._last_micros = start_ts * 1_000_000
        self._req_ids = 0
        variant = load_fixture("slack", "conversations_history.variant.json")["messages"]
        replies = load_fixture("slack", "conversations_replies.json")["messages"]
        self._fixtures: dict[str, Json] = {
            "plain": variant[0],
            "parent": variant[2],
            "join": variant[3],
            "bot": variant[4],
            "edited": variant[5],
            "reply": replies[1],
            "channel": load_fixture("slack", "conversations_list.json")["channels"][0],
            "user": load_fixture("slack", "users_info.json")["user"],
            "auth_test": load_fixture("slack", "auth_test.json"),
            "ratelimited": load_fixture("slack", "error_ratelimited.response.json"),
        }

    @property
    def api_url(self) -> str:
        """``base_url + "/api/"``: what ``WebClient(base_url=...)`` wants."""
        return f"{self.base_url}/api/"

    # == scripting ===================================================================

    def add_channel(
        self,
        channel_id: str,
        name: str,
        *,
        created: int | None = None,
        is_private: bool = False,
        is_archived: bool = False,
    ) -> FakeChannel:
        with self._lock:
            if channel_id in self._channels:
                raise ValueError(f"channel {channel_id} exists")
            channel = FakeChannel(
                id=channel_id,
                name=name,
                created=created if created is not None else self._last_micros // 1_000_000,
                is_private=is_private,
                is_archived=is_archived,
            )
            self._channels[channel_id] = channel
            return channel

    def add_user(
        self, user_id: str, name: str, *, real_name: str | None = None, is_bot: bool = False
    ) -> Json:
        with self._lock:
            user = copy.deepcopy(self._fixtures["user"])
            user.update(
                id=user_id,
                name=name,
                real_name=real_name or name,
                team_id=self.team_id,
                is_admin=False,
                is_bot=is_bot,
            )
            user["profile"].update(
                display_name=name,
                display_name_normalized=name,
                real_name=real_name or name,
                real_name_normalized=real_name or name,
                email=f"{name}@example.com",
                team=self.team_id,
            )
            self._users[user_id] = user
            return user

    def post_message(
        self,
        channel: str,
        text: str,
        *,
        user: str | None = "U061F7AUR",
        ts: str | None = None,
        subtype: str | None = None,
        extra: Mapping[str, Json] | None = None,
    ) -> FakeMessage:
        """Post a top-level message. ``ts`` defaults to one second after the newest ts
        the fake has seen. ``extra`` adds fields (e.g. ``bot_id``, ``username``)."""
        with self._lock:
            ch = self._channel(channel)
            micros = self._new_ts(ts)
            if micros in ch.messages:
                raise ValueError(f"{channel} already has a message at {micros_to_ts(micros)}")
            message = FakeMessage(
                channel=channel,
                ts=micros_to_ts(micros),
                text=text,
                user=user,
                subtype=subtype,
                extra=dict(extra or {}),
            )
            ch.messages[micros] = message
            if not ch.keys or micros > ch.keys[-1]:
                ch.keys.append(micros)
            else:
                bisect.insort(ch.keys, micros)
            return message

    def post_reply(
        self,
        channel: str,
        thread_ts: str,
        text: str,
        *,
        user: str | None = "U061F7AUR",
        ts: str | None = None,
    ) -> FakeMessage:
        """Reply in a thread. Like Slack, the parent gets ``thread_ts`` (its own ts),
        ``reply_count`` + 1, ``latest_reply``, ``reply_users`` and
        ``reply_users_count``. Replies are not in ``conversations.history``."""
        with self._lock:
            ch = self._channel(channel)
            parent_key = ts_to_micros(thread_ts)
            parent = ch.messages.get(parent_key)
            if parent is None:
                raise KeyError(f"{channel} has no top-level message {thread_ts}")
            micros = self._new_ts(ts)
            reply = FakeMessage(
                channel=channel,
                ts=micros_to_ts(micros),
                text=text,
                user=user,
                thread_ts=parent.ts,
                extra={"parent_user_id": parent.user} if parent.user else {},
            )
            ch.replies[micros] = reply
            bisect.insort(ch.threads.setdefault(parent_key, []), micros)
            parent.thread_ts = parent.ts
            parent.reply_count += 1
            newest = ch.threads[parent_key][-1]
            parent.latest_reply = micros_to_ts(newest)
            if user is not None and user not in parent.reply_users:
                parent.reply_users.append(user)
            parent._cache = None
            return reply

    def edit_message(
        self,
        channel: str,
        ts: str,
        text: str,
        *,
        edited_ts: str | None = None,
        edited_by: str | None = None,
    ) -> FakeMessage:
        """Change a message's (or reply's) text and set ``edited: {user, ts}``; the
        message keeps its ``ts``. ``edited_ts`` defaults to the fake's next ts."""
        with self._lock:
            message = self.message(channel, ts)
            message.text = text
            message.edited = {
                "user": edited_by or message.user or "",
                "ts": micros_to_ts(self._new_ts(edited_ts)),
            }
            message._cache = None
            return message

    def delete_message(self, channel: str, ts: str) -> None:
        """Delete a message or reply the way Slack shows it afterwards (see the module
        docstring)."""
        with self._lock:
            ch = self._channel(channel)
            key = ts_to_micros(ts)
            reply = ch.replies.pop(key, None)
            if reply is not None:
                parent_key = ts_to_micros(reply.thread_ts or ts)
                remaining = ch.threads[parent_key]
                remaining.remove(key)
                parent = ch.messages[parent_key]
                parent.reply_count = len(remaining)
                parent.latest_reply = micros_to_ts(remaining[-1]) if remaining else None
                parent._cache = None
                return
            message = ch.messages.get(key)
            if message is None:
                raise KeyError(f"{channel} has no message {ts}")
            if ch.threads.get(key):
                message.subtype, message.text, message.edited = "tombstone", _DELETED, None
                message.extra = {**message.extra, "hidden": True}
                message._cache = None
                return
            del ch.messages[key]
            ch.keys.remove(key)

    def add_join(
        self, channel: str, user: str, *, ts: str | None = None, inviter: str | None = None
    ) -> FakeMessage:
        """A ``channel_join`` message, as Slack posts when ``user`` joins."""
        name = self._users.get(user, {}).get("name", user.lower())
        extra = {"inviter": inviter} if inviter else {}
        return self.post_message(
            channel,
            f"<@{user}|{name}> has joined the channel",
            user=user,
            ts=ts,
            subtype="channel_join",
            extra=extra,
        )

    def script_rate_limit(
        self, method: str, *, times: int = 1, retry_after: int = 1
    ) -> SlackScriptedRule:
        """Answer the next ``times`` calls of ``method`` with the fixture's 429:
        ``Retry-After: retry_after`` and ``{"ok": false, "error": "ratelimited"}``."""
        return self._add_rule(method, self._rate_limited(retry_after), times)

    def _rate_limited(self, retry_after: int) -> FakeResponse:
        fixture = self._fixtures["ratelimited"]
        headers = dict(fixture["headers"])
        headers["retry-after"] = str(retry_after)
        pairs = [(k, v) for k, v in headers.items()]
        return FakeResponse(int(fixture["status"]), compact_json(fixture["body"]), pairs)

    def limit_budget(self, calls: int | None, *, retry_after: int = 3600) -> None:
        """Allow ``calls`` more calls (of any method), then answer every call with the
        fixture's 429 (``Retry-After: retry_after``) until the budget is set again;
        ``None`` lifts it. A budget smaller than the workspace, as a tier's limit is."""
        with self._lock:
            self._budget = calls
            self._budget_retry_after = retry_after

    def script_error(self, method: str, error: str, *, times: int = 1) -> SlackScriptedRule:
        """Answer the next ``times`` calls of ``method`` with HTTP 200
        ``{"ok": false, "error": error}`` (e.g. ``invalid_auth``, ``internal_error``)."""
        body = compact_json({"ok": False, "error": error})
        return self._add_rule(method, FakeResponse(200, body, self._headers()), times)

    def event_body(
        self,
        channel: str,
        ts: str,
        subtype: Literal["posted", "message_changed", "message_deleted"] = "posted",
    ) -> bytes:
        """The Events API delivery of message ``ts`` of ``channel`` as the fake holds it
        now: the ``event_callback`` envelope (https://api.slack.com/apis/events-api#
        callback-field) around a ``message`` event (https://api.slack.com/events/message),
        a ``message_changed`` one with the message under ``message``
        (https://api.slack.com/events/message/message_changed), or a
        ``message_deleted`` one naming ``deleted_ts``
        (https://api.slack.com/events/message/message_deleted). Unsigned: a test signs
        it as Slack would, with the app's signing secret."""
        with self._lock:
            self._req_ids += 1
            event_ts = micros_to_ts(self._new_ts(None))
            event: dict[str, Json]
            if subtype == "message_deleted":
                event = {"subtype": subtype, "hidden": True, "deleted_ts": ts}
            elif subtype == "message_changed":
                message = self._message_json(self.message(channel, ts))
                event = {"subtype": subtype, "hidden": True, "message": message}
            else:
                event = dict(self._message_json(self.message(channel, ts)))
            event.update(type="message", channel=channel, channel_type="channel")
            event.setdefault("event_ts", event_ts)
            if subtype != "posted":
                event["ts"] = event_ts
            envelope = {
                "token": "XXYYZZ",
                "team_id": self.team_id,
                "api_app_id": "AXXXXXXXXX",
                "event": event,
                "type": "event_callback",
                "event_id": f"Ev{self._req_ids:08d}",
                "event_time": int(float(event_ts)),
            }
            return compact_json(envelope)

    def message(self, channel: str, ts: str) -> FakeMessage:
        with self._lock:
            ch = self._channel(channel)
            key = ts_to_micros(ts)
            found = ch.messages.get(key) or ch.replies.get(key)
            if found is None:
                raise KeyError(f"{channel} has no message {ts}")
            return found

    def method_count(self, method: str) -> int:
        """How many calls ``method`` received (scripted errors included)."""
        return self.request_count(f"/api/{method}")

    # == helpers =====================================================================

    def _add_rule(self, method: str, response: FakeResponse, times: int) -> SlackScriptedRule:
        rule = SlackScriptedRule(method=method, response=response, times=times)
        with self._lock:
            self._rules.append(rule)
        return rule

    def _new_ts(self, ts: str | None) -> int:
        micros = ts_to_micros(ts) if ts is not None else self._last_micros + 1_000_000
        self._last_micros = max(self._last_micros, micros)
        return micros

    def _channel(self, channel_id: str) -> FakeChannel:
        ch = self._channels.get(channel_id)
        if ch is None:
            raise KeyError(f"no channel {channel_id}; add_channel first")
        return ch

    def _headers(self) -> list[tuple[str, str]]:
        self._req_ids += 1
        return [
            ("content-type", "application/json; charset=utf-8"),
            ("x-slack-req-id", f"fake-{self._req_ids:08d}"),
            ("access-control-expose-headers", "x-slack-req-id, retry-after"),
        ]

    # == rendering ===================================================================

    def _message_json(self, m: FakeMessage) -> Json:
        if m.is_reply:
            data = dict(self._fixtures["reply"])
        elif m.subtype == "channel_join":
            data = dict(self._fixtures["join"])
            data.pop("inviter", None)
        elif m.subtype == "bot_message":
            data = dict(self._fixtures["bot"])
        else:
            data = dict(self._fixtures["plain"])
        data.update(type="message", text=m.text, ts=m.ts)
        if m.user is not None:
            data["user"] = m.user
        else:
            data.pop("user", None)
        if m.subtype is not None:
            data["subtype"] = m.subtype
        if m.thread_ts is not None:
            data["thread_ts"] = m.thread_ts
        if not m.is_reply and m.reply_count:
            data.update(
                reply_count=m.reply_count,
                reply_users_count=len(m.reply_users),
                latest_reply=m.latest_reply,
                reply_users=list(m.reply_users),
                is_locked=False,
                subscribed=False,
            )
        if m.edited is not None:
            data["edited"] = dict(m.edited)
        data.update(m.extra)
        return data

    def _message_bytes(self, m: FakeMessage) -> bytes:
        if m._cache is None:
            m._cache = compact_json(self._message_json(m))
        return m._cache

    def _channel_json(self, ch: FakeChannel) -> Json:
        data = copy.deepcopy(self._fixtures["channel"])
        data.update(
            id=ch.id,
            name=ch.name,
            name_normalized=ch.name,
            created=ch.created,
            creator=ch.creator,
            is_private=ch.is_private,
            is_archived=ch.is_archived,
            is_general=False,
            is_member=True,
            num_members=len(self._users) or 1,
        )
        data["purpose"].update(value="", creator="", last_set=0)
        data["topic"].update(value="", creator="", last_set=0)
        return data

    # == request handling ============================================================

    def handle(self, request: RecordedRequest) -> FakeResponse:
        method = request.path.removeprefix("/api/")
        with self._lock:
            for rule in self._rules:
                if not rule.spent and rule.method == method:
                    rule.served += 1
                    return rule.response
            if self._budget is not None:
                if self._budget <= 0:
                    return self._rate_limited(self._budget_retry_after)
                self._budget -= 1
            params = self._params(request)
            try:
                self._authorize(request, params)
                handler = _METHODS.get(method)
                if handler is None or not request.path.startswith("/api/"):
                    raise _SlackError("unknown_method")
                data = handler(self, params)
            except _SlackError as exc:
                data = {"ok": False, "error": exc.error}
            body = data if isinstance(data, bytes) else compact_json(data)
            return FakeResponse(200, body, self._headers())

    @staticmethod
    def _params(request: RecordedRequest) -> dict[str, str]:
        params = {k: v[0] for k, v in request.query.items() if v}
        params.update({k: v[0] for k, v in request.form.items() if v})
        if request.headers.get("content-type", "").startswith("application/json") and request.body:
            decoded = json.loads(request.body)
            if isinstance(decoded, dict):
                params.update({k: str(v) for k, v in decoded.items()})
        auth = request.headers.get("authorization", "")
        if auth.startswith("Bearer "):
            params.setdefault("token", auth.removeprefix("Bearer "))
        return params

    def _authorize(self, request: RecordedRequest, params: dict[str, str]) -> None:
        if self.token is None:
            return
        given = params.get("token")
        if not given:
            raise _SlackError("not_authed")
        if given != self.token:
            raise _SlackError("invalid_auth")

    def _auth_test(self, params: dict[str, str]) -> Json:
        data = dict(self._fixtures["auth_test"])
        data.update(
            team=self.team,
            team_id=self.team_id,
            url=f"https://{self.team_domain}.slack.com/",
            user=self.bot_user,
            user_id=self.bot_user_id,
        )
        return data

    def _conversations_list(self, params: dict[str, str]) -> Json:
        limit = _limit(params, default=100, maximum=1000)
        types = set((params.get("types") or "public_channel").split(","))
        exclude_archived = _flag(params.get("exclude_archived"))
        channels = [
            ch
            for ch in self._channels.values()
            if ("private_channel" if ch.is_private else "public_channel") in types
            and not (exclude_archived and ch.is_archived)
        ]
        start = 0
        cursor = params.get("cursor")
        if cursor:
            wanted = _decode_cursor(cursor, "team:")
            ids = [ch.id for ch in channels]
            if wanted not in ids:
                raise _SlackError("invalid_cursor")
            start = ids.index(wanted)
        page = channels[start : start + limit]
        following = channels[start + limit] if start + limit < len(channels) else None
        next_cursor = _encode_cursor("team:", following.id) if following else ""
        return {
            "ok": True,
            "channels": [self._channel_json(ch) for ch in page],
            "response_metadata": {"next_cursor": next_cursor},
        }

    def _conversations_info(self, params: dict[str, str]) -> Json:
        ch = self._channels.get(params.get("channel", ""))
        if ch is None:
            raise _SlackError("channel_not_found")
        return {"ok": True, "channel": self._channel_json(ch)}

    def _users_info(self, params: dict[str, str]) -> Json:
        user = self._users.get(params.get("user", ""))
        if user is None:
            raise _SlackError("user_not_found")
        return {"ok": True, "user": user}

    def _conversations_history(self, params: dict[str, str]) -> bytes:
        ch = self._channels.get(params.get("channel", ""))
        if ch is None:
            raise _SlackError("channel_not_found")
        limit = _limit(params, default=100, maximum=999)
        lo, hi = _window(ch.keys, params)
        cursor = params.get("cursor")
        if cursor:
            # newest-first: the cursor names the newest message of the next page
            hi = min(hi, bisect.bisect_right(ch.keys, _ts_cursor(cursor)))
        start = max(lo, hi - limit)
        page_keys = ch.keys[start:hi][::-1]
        has_more = start > lo
        next_cursor = _encode_cursor("next_ts:", str(ch.keys[start - 1])) if has_more else ""
        parts = [self._message_bytes(ch.messages[k]) for k in page_keys]
        return _envelope(parts, has_more=has_more, next_cursor=next_cursor, pin_count=True)

    def _conversations_replies(self, params: dict[str, str]) -> bytes:
        ch = self._channels.get(params.get("channel", ""))
        if ch is None:
            raise _SlackError("channel_not_found")
        ts = params.get("ts")
        if not ts:
            raise _SlackError("invalid_arguments")
        parent_key = ts_to_micros(ts)
        parent = ch.messages.get(parent_key)
        if parent is None:
            raise _SlackError("thread_not_found")
        limit = _limit(params, default=1000, maximum=1000)
        # the thread, oldest first: the parent, then its replies
        keys = [parent_key, *ch.threads.get(parent_key, [])]
        lo, hi = _window(keys, params)
        cursor = params.get("cursor")
        if cursor:
            lo = max(lo, bisect.bisect_left(keys, _ts_cursor(cursor)))
        end = min(hi, lo + limit)
        has_more = end < hi
        next_cursor = _encode_cursor("next_ts:", str(keys[end])) if has_more else ""
        parts = [
            self._message_bytes(parent if k == parent_key else ch.replies[k]) for k in keys[lo:end]
        ]
        return _envelope(parts, has_more=has_more, next_cursor=next_cursor, pin_count=False)


_METHODS: dict[str, Any] = {
    "auth.test": FakeSlack._auth_test,
    "conversations.list": FakeSlack._conversations_list,
    "conversations.info": FakeSlack._conversations_info,
    "conversations.history": FakeSlack._conversations_history,
    "conversations.replies": FakeSlack._conversations_replies,
    "users.info": FakeSlack._users_info,
}


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true")


def _limit(params: dict[str, str], *, default: int, maximum: int) -> int:
    raw = params.get("limit")
    try:
        value = int(raw) if raw else default
    except ValueError:
        return default
    return default if value < 1 else min(value, maximum)


def _window(keys: list[int], params: dict[str, str]) -> tuple[int, int]:
    """Index range of ``keys`` (ascending) inside oldest/latest, honouring inclusive.

    Slack: ``oldest`` defaults to 0, ``latest`` to now; both bounds are exclusive
    unless ``inclusive`` is true."""
    inclusive = _flag(params.get("inclusive"))
    lo, hi = 0, len(keys)
    if params.get("oldest"):
        oldest = ts_to_micros(params["oldest"])
        lo = (bisect.bisect_left if inclusive else bisect.bisect_right)(keys, oldest)
    if params.get("latest"):
        latest = ts_to_micros(params["latest"])
        hi = (bisect.bisect_right if inclusive else bisect.bisect_left)(keys, latest)
    return lo, max(lo, hi)


def _encode_cursor(prefix: str, value: str) -> str:
    return base64.b64encode(f"{prefix}{value}".encode()).decode()


def _decode_cursor(cursor: str, prefix: str) -> str:
    try:
        decoded = base64.b64decode(cursor.encode(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise _SlackError("invalid_cursor") from None
    if not decoded.startswith(prefix):
        raise _SlackError("invalid_cursor")
    return decoded.removeprefix(prefix)


def _ts_cursor(cursor: str) -> int:
    value = _decode_cursor(cursor, "next_ts:")
    if not value.isdigit():
        raise _SlackError("invalid_cursor")
    return int(value)


def _envelope(parts: list[bytes], *, has_more: bool, next_cursor: str, pin_count: bool) -> bytes:
    head: dict[str, Json] = {"ok": True}
    tail: dict[str, Json] = {"has_more": has_more}
    if pin_count:
        tail["pin_count"] = 0
    tail["response_metadata"] = {"next_cursor": next_cursor}
    return (
        compact_json(head)[:-1]
        + b',"messages":['
        + b",".join(parts)
        + b"],"
        + compact_json(tail)[1:]
    )
