"""The declarative HTTP base (memsync.connectors.http): each pagination, auth, incremental
form, deletion form and error mapping, declared in a few lines and read over respx.

The sources here are sketches of real APIs, each response shaped as its vendor
documents it: Jira's ``nextPageToken`` search
(https://developer.atlassian.com/cloud/jira/platform/rest/v3/api-group-issue-search/),
Linear's GraphQL connections and ``RATELIMITED`` error
(https://developers.linear.app/docs/graphql/working-with-the-graphql-api/pagination,
https://developers.linear.app/docs/graphql/working-with-the-graphql-api/rate-limiting),
GitHub's rate-limit headers
(https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import httpx
import pytest
import respx
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.connectors import (
    ConnectorDeclaration,
    KeyPolicy,
    KeyScope,
    Listing,
    RateLimitExhausted,
    RetryableError,
    StopRun,
    Tombstone,
    Window,
)
from memsync.connectors.http import (
    ApiKeyHeader,
    BasicAuth,
    BearerAuth,
    BodyCursor,
    DeletedWhen,
    GraphQLPageInfo,
    HttpConnector,
    HttpRecord,
    HttpSource,
    HttpStream,
    Incremental,
    NotFound,
    OffsetLimit,
    PageNumber,
    Pagination,
    RestartAtLatest,
    TokenConfig,
)
from memsync.stopping import FakeSleeper

BASE = "https://api.source.test"
NOW = datetime(2026, 3, 1, tzinfo=UTC)
START = datetime(2026, 2, 1, 12, 30, tzinfo=UTC)


class SourceConfig(TokenConfig):
    org: str = "acme"
    email: str = "bot@acme.test"
    comments: bool = True


DECLARED = ConnectorDeclaration(
    type="src",
    key_policy=KeyPolicy.IDENTITY,
    key_rationale="Items have ids the source never reuses.",
    config_model=SourceConfig,
    example_key="src:acme:item:1",
    implementation="tests.unit.connectors.test_http_base:SourceConnector",
    subject_fields=frozenset({"org", "item_id"}),
)

ITEMS = HttpStream(
    name="items",
    path="/items",
    key="{config.org}:item:{id}",
    incremental=Incremental(field="updated", param="since"),
    subject_fields={"item_id": "id"},
)


class SourceConnector(HttpConnector[SourceConfig, HttpRecord], declaration=DECLARED):
    source: ClassVar[HttpSource] = HttpSource(BASE, (ITEMS,), BearerAuth())


def connector_for(
    source: HttpSource, *, start: datetime | None = None, **fields: object
) -> SourceConnector:
    """A connector of ``source``; waits advance a fake clock (never really waited)."""
    cls = type("Declared", (SourceConnector,), {"source": source})
    config = SourceConfig.model_validate(
        {
            "name": "s",
            "type": "src",
            "subject": "org:{item_id}",
            "token": "tok-secret",
            "start": start,
            "retry": {"max_attempts": 3, "max_wait": "10m"},
            **fields,
        }
    )
    clock = FakeClock(NOW)
    return cls(config, sleeper=FakeSleeper(clock), clock=clock)


def read(source: HttpSource, window: Window | None = None, **fields: object) -> list[Any]:
    connector = connector_for(source, **fields)
    return list(connector.fetch(window or Window(start=START, end=NOW), None))


def stream(**changes: Any) -> HttpSource:
    return HttpSource(BASE, (replace(ITEMS, **changes),), BearerAuth())


def item(n: int, **fields: object) -> dict[str, object]:
    return {"id": n, "updated": (START + timedelta(minutes=n)).isoformat(), **fields}


def keys(items: list[Any]) -> list[str]:
    return [i.key() for i in items if isinstance(i, HttpRecord)]


@pytest.fixture
def api() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE, assert_all_called=False) as mock:
        yield mock


# --- pagination ---------------------------------------------------------------------------


def serve_pages(
    api: respx.MockRouter, total: int, page_of: Any, path: str = "/items"
) -> respx.Route:
    """Answer each request with the page ``page_of(request, items)`` picks."""
    items = [item(n) for n in range(1, total + 1)]
    return api.route(path=path).mock(side_effect=lambda request: page_of(request, items))


def by_offset(request: httpx.Request, items: list[dict[str, object]]) -> httpx.Response:
    offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
    return httpx.Response(200, json={"items": items[offset : offset + limit]})


def by_page_number(request: httpx.Request, items: list[dict[str, object]]) -> httpx.Response:
    page, size = int(request.url.params["page"]), int(request.url.params["per_page"])
    return httpx.Response(200, json={"items": items[(page - 1) * size : page * size]})


def by_token(request: httpx.Request, items: list[dict[str, object]]) -> httpx.Response:
    """Jira's search: ``nextPageToken`` in the body, absent on the last page."""
    offset = int(request.url.params.get("nextPageToken", "0"))
    page: dict[str, object] = {"items": items[offset : offset + 3]}
    if offset + 3 < len(items):
        page["nextPageToken"] = str(offset + 3)
    return httpx.Response(200, json=page)


PAGINATIONS: list[tuple[Pagination, Any]] = [
    (OffsetLimit(limit=3), by_offset),
    (PageNumber(size=3), by_page_number),
    (BodyCursor("nextPageToken", "nextPageToken"), by_token),
]


@settings(max_examples=30, deadline=None)
@given(total=st.integers(min_value=0, max_value=11), which=st.integers(0, len(PAGINATIONS) - 1))
def test_every_pagination_reads_every_record_once(total: int, which: int) -> None:
    pagination, page_of = PAGINATIONS[which]
    with respx.mock(base_url=BASE) as api:
        route = serve_pages(api, total, page_of)
        items = read(stream(pagination=pagination))
    assert keys(items) == [f"src:acme:item:{n}" for n in range(1, total + 1)]
    # Every request carries the declared start, whatever page it asks for.
    assert {call.request.url.params["since"] for call in route.calls} == {START.isoformat()}


class ShiftingList:
    """A list sorted by update time whose ``since`` is inclusive (as GitHub's), where a
    record is updated between two requests: it moves to the end, the rest move up."""

    def __init__(self, total: int, updates: list[int]) -> None:
        self.updated = {n: START + timedelta(minutes=n) for n in range(1, total + 1)}
        self.updates = list(updates)
        self.clock = START + timedelta(days=1)

    def page(self, request: httpx.Request) -> httpx.Response:
        since = datetime.fromisoformat(request.url.params["since"])
        size = int(request.url.params["per_page"])
        ordered = sorted((t, n) for n, t in self.updated.items() if t >= since)
        body = {"items": [{"id": n, "updated": t.isoformat()} for t, n in ordered[:size]]}
        if self.updates:  # after answering, someone edits a record
            self.clock += timedelta(seconds=1)
            self.updated[self.updates.pop(0)] = self.clock
        return httpx.Response(200, json=body)


@settings(max_examples=40, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=12),
    updates=st.lists(st.integers(min_value=1, max_value=12), max_size=6),
)
def test_restarting_at_the_latest_update_misses_nothing_a_shift_would(
    total: int, updates: list[int]
) -> None:
    source = ShiftingList(total, [n for n in updates if n <= total])
    with respx.mock(base_url=BASE) as api:
        api.get("/items").mock(side_effect=source.page)
        items = read(
            stream(pagination=RestartAtLatest(size=3)), Window(START, NOW + timedelta(days=2))
        )
    read_ids = [i.data["id"] for i in items if isinstance(i, HttpRecord)]
    assert set(read_ids) == set(range(1, total + 1))
    # Each record is read once per version at most: a repeat is a newer version.
    versions = [(i.data["id"], i.data["updated"]) for i in items if isinstance(i, HttpRecord)]
    assert len(versions) == len(set(versions))


def test_a_whole_page_of_one_update_time_asks_for_a_larger_page(api: respx.MockRouter) -> None:
    same = START.isoformat()
    api.get("/items").respond(json={"items": [{"id": n, "updated": same} for n in (1, 2)]})
    with pytest.raises(StopRun, match=r"whole page of 2 records .* raise the page size \(2\)"):
        read(stream(pagination=RestartAtLatest(size=2)))


def test_a_body_cursor_that_says_more_without_a_token_is_malformed(api: respx.MockRouter) -> None:
    api.get("/items").respond(json={"items": [], "done": False})
    with pytest.raises(StopRun, match="unexpected response shape: not done but no new next"):
        read(stream(pagination=BodyCursor("next", "cursor", done="done")))


def test_a_page_handed_out_again_stops_the_run_instead_of_looping(api: respx.MockRouter) -> None:
    api.get("/items").respond(json={"items": [item(1)], "next": "same"})
    with pytest.raises(StopRun, match="pagination repeats"):
        read(stream(pagination=BodyCursor("next", "cursor")))


# --- GraphQL ------------------------------------------------------------------------------

ISSUES_QUERY = (
    "query($first: Int, $after: String, $since: DateTimeOrDuration) { issues(first: $first, "
    "after: $after, includeArchived: true, filter: {updatedAt: {gte: $since}}) "
    "{ nodes { id updatedAt archivedAt } pageInfo { hasNextPage endCursor } } }"
)
LINEAR_LIKE = HttpSource(
    BASE,
    (
        HttpStream(
            name="issues",
            path="/graphql",
            graphql=ISSUES_QUERY,
            records="data.issues.nodes",
            key="{config.org}:{id}:issue",
            incremental=Incremental(field="updatedAt", variable="since"),
            pagination=GraphQLPageInfo("data.issues.pageInfo", size=2),
            deleted_when=DeletedWhen("archivedAt"),
        ),
    ),
    ApiKeyHeader("Authorization"),
)


def linear_page(nodes: list[dict[str, object]], after: str | None) -> dict[str, object]:
    info = {"hasNextPage": after is not None, "endCursor": after}
    return {"data": {"issues": {"nodes": nodes, "pageInfo": info}}}


def node(n: int, archived: str | None = None) -> dict[str, object]:
    updated = (START + timedelta(minutes=n)).isoformat()
    return {"id": f"i{n}", "updatedAt": updated, "archivedAt": archived}


def test_graphql_pages_by_page_info_with_the_start_in_a_variable(api: respx.MockRouter) -> None:
    route = api.post("/graphql")
    route.side_effect = [
        httpx.Response(200, json=linear_page([node(1), node(2)], after="c2")),
        httpx.Response(200, json=linear_page([node(3, archived=NOW.isoformat())], after=None)),
    ]

    items = read(LINEAR_LIKE)

    assert keys(items) == ["src:acme:i1:issue", "src:acme:i2:issue"]
    assert items[-1] == Tombstone("src:acme:i3:issue", with_children=True)
    bodies = [json.loads(call.request.content) for call in route.calls]
    assert [b["variables"] for b in bodies] == [
        {"first": 2, "after": None, "since": START.isoformat()},
        {"first": 2, "after": "c2", "since": START.isoformat()},
    ]
    assert bodies[0]["query"] == ISSUES_QUERY
    assert route.calls[0].request.headers["authorization"] == "tok-secret"


def test_a_graphql_rate_limit_sent_as_http_400_is_waited_out(api: respx.MockRouter) -> None:
    limited = {
        "errors": [{"message": "Rate limit exceeded", "extensions": {"code": "RATELIMITED"}}]
    }
    api.post("/graphql").side_effect = [
        httpx.Response(400, json=limited, headers={"Retry-After": "30"}),
        httpx.Response(200, json=linear_page([node(1)], after=None)),
    ]
    connector = connector_for(LINEAR_LIKE)
    assert keys(list(connector.fetch(Window(START, NOW), None))) == ["src:acme:i1:issue"]
    assert connector.retrier.waits == [30]


def test_any_other_graphql_error_stops_the_run(api: respx.MockRouter) -> None:
    api.post("/graphql").respond(200, json={"errors": [{"message": "Unknown field"}]})
    with pytest.raises(StopRun, match=r"GraphQL errors: .*Unknown field"):
        read(LINEAR_LIKE)


# --- incremental --------------------------------------------------------------------------


def test_a_filter_template_carries_the_start_and_the_config(api: respx.MockRouter) -> None:
    route = api.get("/search").respond(json={"issues": []})
    jql = 'project = {config.org} AND updated >= "{since:%Y-%m-%d %H:%M}" ORDER BY updated ASC'
    read(
        stream(
            path="/search", records="issues", incremental=Incremental("updated", "jql", value=jql)
        )
    )
    assert route.calls[0].request.url.params["jql"] == (
        'project = acme AND updated >= "2026-02-01 12:30" ORDER BY updated ASC'
    )


def test_without_a_window_start_the_configured_start_is_used_else_1970(
    api: respx.MockRouter,
) -> None:
    route = api.get("/items").respond(json={"items": []})
    epoch = Incremental("updated", "since", value="{since_epoch}")
    read(stream(incremental=epoch), Window(None, NOW), start="2026-01-01")
    read(stream(incremental=epoch), Window(None, NOW))
    sent = [call.request.url.params["since"] for call in route.calls]
    assert sent == [str(int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())), "0"]


def test_records_map_to_episodes_as_declared(api: respx.MockRouter) -> None:
    api.get("/items").respond(json={"items": [item(7, title="t", etag="x")]})
    source = stream(exclude=frozenset({"etag"}), episode_type="src.item")
    connector = connector_for(source)
    [record] = list(connector.fetch(Window(START, NOW), None))
    draft = connector.to_episode(record)
    assert draft.idempotency_key == "src:acme:item:7"
    assert draft.subject_id == "org:7"
    assert draft.type == "src.item"
    assert draft.payload == {"id": 7, "updated": item(7)["updated"], "title": "t"}
    assert draft.occurred_at == START + timedelta(minutes=7)


def test_a_key_template_naming_a_missing_field_is_a_clear_error(api: respx.MockRouter) -> None:
    api.get("/items").respond(json={"items": [{"updated": START.isoformat()}]})
    with pytest.raises(StopRun, match=r"template '\{config.org\}:item:\{id\}' names a field"):
        read(stream())


# --- children and deletions ---------------------------------------------------------------

COMMENTS = HttpStream(
    name="comments",
    path="/items/{parent[id]}/comments",
    key="{config.org}:item:{parent[id]}:comment:{id}",
    occurred_at="created",
    subject_fields={"item_id": "parent.id"},
)


@pytest.mark.parametrize("status", [404, 410])
def test_a_child_read_that_finds_its_parent_gone_tombstones_the_parent(
    api: respx.MockRouter, status: int
) -> None:
    api.get("/items").respond(json={"items": [item(1), item(2)]})
    api.get("/items/1/comments").respond(status, json={"error": "gone"})
    api.get("/items/2/comments").respond(
        json={"comments": [{"id": 9, "created": START.isoformat()}]}
    )
    child = replace(COMMENTS, on_not_found=NotFound.PARENT_GONE)

    items = read(stream(children=(child,)))

    assert items[:2] == [items[0], Tombstone("src:acme:item:1", with_children=True)]
    assert keys(items) == ["src:acme:item:1", "src:acme:item:2", "src:acme:item:2:comment:9"]
    assert items[-1].subject_values() == {
        "stream": "comments",
        "id": 9,
        "parent_id": 2,
        "item_id": 2,
    }
    assert items[-1].position == START + timedelta(minutes=2)


def test_a_record_showing_a_deleted_status_is_a_tombstone_and_its_children_unread(
    api: respx.MockRouter,
) -> None:
    api.get("/items").respond(json={"items": [item(1, status="deleted")]})
    comments = api.get("/items/1/comments")
    source = stream(children=(COMMENTS,), deleted_when=DeletedWhen("status", ("deleted",)))
    assert read(source) == [Tombstone("src:acme:item:1", with_children=True)]
    assert not comments.called


def test_only_a_full_read_lists_what_exists(api: respx.MockRouter) -> None:
    api.get("/items").respond(json={"items": [item(1)]})
    source = stream(absent_from_full_read="{config.org}:item:")
    assert read(source, Window(None, NOW))[-1] == Listing(
        KeyScope("src:acme:item:"), frozenset({"src:acme:item:1"})
    )
    assert keys(read(source)) == ["src:acme:item:1"]
    assert not any(isinstance(i, Listing) for i in read(source))
    assert not any(isinstance(i, Listing) for i in read(source, Window(None, NOW), start=START))


def test_a_full_read_that_left_something_unread_lists_nothing(api: respx.MockRouter) -> None:
    later = (NOW + timedelta(minutes=1)).isoformat()
    api.get("/items").respond(json={"items": [item(1), {"id": 2, "updated": later}]})
    api.get(url__regex=r"/items/\d+/comments").respond(json={"comments": []})
    listed = stream(absent_from_full_read="{config.org}:item:")
    # Item 2 exists (updated after the window): not absent, so no listing at all.
    assert not any(isinstance(i, Listing) for i in read(listed, Window(None, NOW)))

    api.get("/items").respond(json={"items": [item(1)]})
    with_comments = replace(listed.streams[0], children=(replace(COMMENTS, enabled_by="comments"),))
    source = replace(listed, streams=(with_comments,))
    assert isinstance(read(source, Window(None, NOW))[-1], Listing)
    # Comments switched off: stored comments are not absent, only unread.
    assert not any(isinstance(i, Listing) for i in read(source, Window(None, NOW), comments=False))


# --- auth and secrets ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("auth", "header", "expected"),
    [
        (BearerAuth(), "authorization", "Bearer tok-secret"),
        (BearerAuth(scheme="token"), "authorization", "token tok-secret"),
        (ApiKeyHeader(), "x-api-key", "tok-secret"),
        (
            BasicAuth("{config.email}/token"),
            "authorization",
            "Basic " + base64.b64encode(b"bot@acme.test/token:tok-secret").decode(),
        ),
    ],
)
def test_each_auth_sends_its_header(
    api: respx.MockRouter, auth: Any, header: str, expected: str
) -> None:
    route = api.get("/items").respond(json={"items": []})
    read(HttpSource(BASE, (ITEMS,), auth))
    assert route.calls[0].request.headers[header] == expected


def test_basic_auth_pair_is_a_secret_to_scrub() -> None:
    connector = connector_for(HttpSource(BASE, (ITEMS,), BasicAuth("{config.email}")))
    assert connector.secret_values() == ["tok-secret", "bot@acme.test:tok-secret"]


def test_a_template_cannot_reveal_a_secret() -> None:
    connector = connector_for(HttpSource("https://{config.token}.test", (ITEMS,)))
    assert "tok-secret" not in connector.base_url


# --- errors and rate limits ---------------------------------------------------------------


def test_github_style_403_with_no_requests_left_waits_for_the_reset(api: respx.MockRouter) -> None:
    reset = int((NOW + timedelta(seconds=90)).timestamp())
    api.get("/items").side_effect = [
        httpx.Response(
            403,
            json={"message": "API rate limit exceeded"},
            headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)},
        ),
        httpx.Response(200, json={"items": [item(1)]}),
    ]
    connector = connector_for(stream())
    assert keys(list(connector.fetch(Window(START, NOW), None))) == ["src:acme:item:1"]
    assert connector.retrier.waits == [90]


def test_a_page_that_spends_the_last_request_makes_the_next_wait_for_the_reset(
    api: respx.MockRouter,
) -> None:
    reset = int((NOW + timedelta(seconds=120)).timestamp())
    spent = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)}
    route = api.get("/items")
    route.side_effect = [
        httpx.Response(200, json={"items": [item(1)], "next": "2"}, headers=spent),
        httpx.Response(200, json={"items": [item(2)]}),
    ]
    connector = connector_for(stream(pagination=BodyCursor("next", "cursor")))
    items = list(connector.fetch(Window(START, NOW), None))
    assert keys(items) == ["src:acme:item:1", "src:acme:item:2"]
    assert connector.retrier.waits == [120]
    assert route.call_count == 2  # the wait replaced a request that would be refused


def test_a_reset_beyond_the_cap_ends_the_read_before_a_refused_request(
    api: respx.MockRouter,
) -> None:
    reset = int((NOW + timedelta(hours=1)).timestamp())
    spent = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)}
    route = api.get("/items").respond(json={"items": [item(1)], "next": "2"}, headers=spent)
    connector = connector_for(stream(pagination=BodyCursor("next", "cursor")))
    items = connector.fetch(Window(START, NOW), None)
    assert keys([next(items)]) == ["src:acme:item:1"]
    with pytest.raises(RateLimitExhausted, match="X-RateLimit-Remaining was 0"):
        next(items)
    assert route.call_count == 1


def test_a_429_storm_ends_in_rate_limit_exhausted(api: respx.MockRouter) -> None:
    api.get("/items").respond(429, headers={"Retry-After": "5"}, text="slow down")
    with pytest.raises(RateLimitExhausted) as caught:
        read(stream())
    assert caught.value.attempts == 3


def test_server_errors_are_retried_then_stay_retryable(api: respx.MockRouter) -> None:
    route = api.get("/items").respond(503, text="unavailable")
    with pytest.raises(RetryableError, match="gave up after 3 attempt"):
        read(stream())
    assert route.call_count == 3


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (401, "HTTP 401: check the credentials"),
        (404, "HTTP 404: not found. check base_url https://api.source.test"),
        (422, "HTTP 422 'bad filter'"),
    ],
)
def test_client_errors_stop_the_run(api: respx.MockRouter, status: int, message: str) -> None:
    route = api.get("/items").respond(status, text="bad filter")
    with pytest.raises(StopRun) as caught:
        read(stream())
    assert message in str(caught.value)
    assert "tok-secret" not in str(caught.value)
    assert route.call_count == 1


def test_a_body_that_is_not_json_names_the_vendor(api: respx.MockRouter) -> None:
    api.get("/items").respond(200, text="<html/>", content_type="text/html")
    with pytest.raises(StopRun, match="Is base_url pointing at a src API"):
        read(stream())
