"""slack-sdk's WebClient (urllib) against the fake Slack server."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import RateLimitErrorRetryHandler, builtin_handlers

from memsync.connectors.fake_http import load_fixture
from memsync.connectors.slack.fake_api import FakeSlack


def client(fake: FakeSlack, *, token: str = "xoxb-test", **kwargs: Any) -> WebClient:
    """How a connector should build the client: no rate-limit retry handler."""
    return WebClient(base_url=fake.api_url, token=token, **kwargs)


def post_many(fake: FakeSlack, channel: str, count: int) -> list[str]:
    return [fake.post_message(channel, f"m{i}").ts for i in range(count)]


# -- history ---------------------------------------------------------------------------


def test_history_pages_newest_first_via_next_cursor(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    stamps = post_many(fake_slack, "C1", 23)

    pages = [
        (list(page["messages"]), page["has_more"], page["response_metadata"]["next_cursor"])
        for page in client(fake_slack).conversations_history(channel="C1", limit=5)
    ]

    seen = [m["ts"] for messages, _, _ in pages for m in messages]
    assert seen == stamps[::-1]
    assert [len(messages) for messages, _, _ in pages] == [5, 5, 5, 5, 3]
    assert [has_more for _, has_more, _ in pages] == [True] * 4 + [False]
    assert pages[-1][2] == ""
    assert fake_slack.method_count("conversations.history") == 5


def test_history_cursor_has_the_fixture_format(fake_slack: FakeSlack) -> None:
    fixture = load_fixture("slack", "conversations_history.json")
    fixture_cursor = fixture["response_metadata"]["next_cursor"]
    assert base64.b64decode(fixture_cursor).decode().startswith("next_ts:")
    fake_slack.add_channel("C1", "general")
    stamps = post_many(fake_slack, "C1", 3)

    page = client(fake_slack).conversations_history(channel="C1", limit=2)

    cursor = base64.b64decode(page["response_metadata"]["next_cursor"]).decode()
    assert cursor == "next_ts:" + stamps[0].replace(".", "")


def test_history_honours_oldest_latest_and_inclusive(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    s = post_many(fake_slack, "C1", 6)
    web = client(fake_slack)

    def texts(**params: Any) -> list[str]:
        response = web.conversations_history(channel="C1", **params)
        return [m["text"] for m in response["messages"]]

    assert texts(oldest=s[1], latest=s[4]) == ["m3", "m2"]
    assert texts(oldest=s[1], latest=s[4], inclusive=True) == ["m4", "m3", "m2", "m1"]
    assert texts(oldest=s[3]) == ["m5", "m4"]
    assert texts(latest=s[1]) == ["m0"]


def test_history_message_shapes(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    fake_slack.add_user("U2147483828", "cal")
    plain = fake_slack.post_message("C1", "Hello, world!", user="U123ABC456")
    fake_slack.edit_message("C1", plain.ts, "Hello, world! (typo)")
    join = fake_slack.add_join("C1", "U2147483828", inviter="U123456789")
    bot = fake_slack.post_message(
        "C1", "Pushing is the answer", user=None, subtype="bot_message",
        extra={"bot_id": "BB12033", "username": "github"},
    )  # fmt: skip

    messages = client(fake_slack).conversations_history(channel="C1")["messages"]
    by_ts = {m["ts"]: m for m in messages}

    edited = by_ts[plain.ts]
    assert edited["text"] == "Hello, world! (typo)"
    assert edited["edited"]["user"] == "U123ABC456"
    assert float(edited["edited"]["ts"]) > float(plain.ts)
    assert by_ts[join.ts]["subtype"] == "channel_join"
    assert by_ts[join.ts]["text"] == "<@U2147483828|cal> has joined the channel"
    assert by_ts[join.ts]["inviter"] == "U123456789"
    assert by_ts[bot.ts]["subtype"] == "bot_message"
    assert "user" not in by_ts[bot.ts]
    assert by_ts[bot.ts]["bot_id"] == "BB12033"


# -- threads ---------------------------------------------------------------------------


def test_a_reply_updates_the_parent_like_slack_does(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    parent = fake_slack.post_message("C1", "island", user="U061F7AUR")
    fake_slack.post_message("C1", "unrelated")
    fake_slack.post_reply("C1", parent.ts, "one island", user="U061F7AUR")
    last = fake_slack.post_reply("C1", parent.ts, "two island", user="U0AAAAAAA")
    web = client(fake_slack)

    history = web.conversations_history(channel="C1")["messages"]
    [top] = [m for m in history if m["ts"] == parent.ts]

    assert [m["text"] for m in history] == ["unrelated", "island"]  # replies are not top-level
    assert top["thread_ts"] == parent.ts
    assert top["reply_count"] == 2
    assert top["latest_reply"] == last.ts
    assert top["reply_users"] == ["U061F7AUR", "U0AAAAAAA"]
    assert top["reply_users_count"] == 2

    replies = web.conversations_replies(channel="C1", ts=parent.ts)["messages"]
    assert [m["text"] for m in replies] == ["island", "one island", "two island"]
    assert all(m["thread_ts"] == parent.ts for m in replies)
    assert replies[1]["parent_user_id"] == "U061F7AUR"


def test_replies_paginate_oldest_first(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    parent = fake_slack.post_message("C1", "parent")
    for i in range(7):
        fake_slack.post_reply("C1", parent.ts, f"r{i}")

    texts = [
        m["text"]
        for page in client(fake_slack).conversations_replies(channel="C1", ts=parent.ts, limit=3)
        for m in page["messages"]
    ]

    assert texts == ["parent", *[f"r{i}" for i in range(7)]]
    assert fake_slack.method_count("conversations.replies") == 3


def test_an_unknown_thread_is_thread_not_found(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    with pytest.raises(SlackApiError) as caught:
        client(fake_slack).conversations_replies(channel="C1", ts="1.000001")
    assert caught.value.response["error"] == "thread_not_found"


# -- other methods, errors -------------------------------------------------------------------


def test_auth_list_info_and_users(fake_slack: FakeSlack) -> None:
    for i in range(5):
        fake_slack.add_channel(f"C{i}", f"chan-{i}")
    fake_slack.add_user("U1", "spengler", real_name="Egon Spengler")
    web = client(fake_slack)

    assert web.auth_test()["team_id"] == fake_slack.team_id
    ids = [c["id"] for page in web.conversations_list(limit=2) for c in page["channels"]]
    assert ids == ["C0", "C1", "C2", "C3", "C4"]
    assert fake_slack.method_count("conversations.list") == 3
    assert web.conversations_info(channel="C3")["channel"]["name"] == "chan-3"
    assert web.users_info(user="U1")["user"]["real_name"] == "Egon Spengler"


@pytest.mark.parametrize(("token", "error"), [("xoxb-wrong", "invalid_auth"), ("", "not_authed")])
def test_a_bad_token_is_refused(fake_slack: FakeSlack, token: str, error: str) -> None:
    with pytest.raises(SlackApiError) as caught:
        client(fake_slack, token=token).auth_test()
    assert caught.value.response.status_code == 200
    assert caught.value.response["error"] == error


def test_an_unknown_channel_is_channel_not_found(fake_slack: FakeSlack) -> None:
    expected = load_fixture("slack", "error_channel_not_found.json")
    with pytest.raises(SlackApiError) as caught:
        client(fake_slack).conversations_history(channel="CNOPE")
    assert caught.value.response.data == expected


def test_slack_sdk_sends_a_form_encoded_post_with_a_bearer_token(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    client(fake_slack).conversations_history(channel="C1", limit=10, inclusive=True)

    [request] = fake_slack.requests
    assert request.method == "POST"
    assert request.headers["authorization"] == "Bearer xoxb-test"
    assert request.headers["content-type"] == "application/x-www-form-urlencoded"
    assert request.form == {"channel": ["C1"], "limit": ["10"], "inclusive": ["1"]}


def test_scripted_ok_false_error(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    fake_slack.script_error("conversations.history", "internal_error")
    web = client(fake_slack)
    with pytest.raises(SlackApiError) as caught:
        web.conversations_history(channel="C1")
    assert caught.value.response["error"] == "internal_error"
    assert web.conversations_history(channel="C1")["ok"] is True


# -- rate limits -----------------------------------------------------------------------------


def test_a_429_surfaces_as_slack_api_error_with_retry_after(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    rule = fake_slack.script_rate_limit("conversations.history", times=1, retry_after=17)
    web = client(fake_slack)  # default handlers: connection errors only

    with pytest.raises(SlackApiError) as caught:
        web.conversations_history(channel="C1")

    response = caught.value.response
    assert response.status_code == 429
    assert response.headers["retry-after"] == "17"
    assert response.data == {"ok": False, "error": "ratelimited"}
    assert rule.served == 1
    assert web.conversations_history(channel="C1")["ok"] is True
    assert web.auth_test()["ok"] is True  # the limit is per method


def test_a_429_mid_pagination_stops_the_iteration(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    post_many(fake_slack, "C1", 10)
    pages = iter(client(fake_slack).conversations_history(channel="C1", limit=4))
    assert len(next(pages)["messages"]) == 4
    fake_slack.script_rate_limit("conversations.history", retry_after=0)

    with pytest.raises(SlackApiError) as caught:
        next(pages)

    assert caught.value.response.status_code == 429


def test_rate_limit_retry_handler_sleeps_retry_after_plus_jitter_uncapped(
    fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Documents slack-sdk, not our code: RateLimitErrorRetryHandler calls
    time.sleep(int(retry-after) + random()) itself, with no cap and no injectable
    sleep. The library's module-level sleep is replaced so no real time passes."""
    fake_slack.add_channel("C1", "general")
    fake_slack.script_rate_limit("conversations.history", times=1, retry_after=3600)
    slept: list[float] = []
    monkeypatch.setattr(builtin_handlers.time, "sleep", slept.append)
    web = client(fake_slack, retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=1)])

    assert web.conversations_history(channel="C1")["ok"] is True

    assert len(slept) == 1
    assert 3600 <= slept[0] < 3601
    assert fake_slack.method_count("conversations.history") == 2


def test_serves_fifty_thousand_messages(fake_slack: FakeSlack) -> None:
    fake_slack.add_channel("C1", "general")
    post_many(fake_slack, "C1", 50_000)

    total = sum(
        len(page["messages"])
        for page in client(fake_slack).conversations_history(channel="C1", limit=999)
    )

    assert total == 50_000
    assert fake_slack.method_count("conversations.history") == 51
