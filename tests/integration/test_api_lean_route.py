"""``POST /v1/episodes`` by the short path (``LeanJsonRoute``) answers as FastAPI's own
handler does.

The same app answers both ways: a body sent as ``application/json`` takes the short
path, the same bytes sent as ``application/vnd.api+json`` (JSON to FastAPI, not to the
short path) take FastAPI's handler. Each pair of answers must agree: the same status and
body for a refusal, the same episode for an acceptance.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Request, Response
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from memsync.runtime.app.api.lean_route import LeanJsonRoute
from memsync.runtime.app.config import ApiKey, ApiSettings, hash_api_key
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK, build_app, episode

SHORT_PATH = {"content-type": "application/json"}
FASTAPI_PATH = {"content-type": "application/vnd.api+json"}
# What differs between two acceptances of one body: the stored episode's identity and
# times, and whether it was new.
_PER_EPISODE = ("id", "ingested_at", "ingest_outcome")


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(build_app(store), base_url=LOOPBACK) as client:
        yield client


def _shown(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    for volatile in _PER_EPISODE:
        body.pop(volatile, None)
    if "error" in body:
        body["error"].pop("request_id")  # one a request
    return body


def _both_ways(client: TestClient, body: bytes) -> tuple[Any, Any]:
    short = client.post("/v1/episodes", content=body, headers=SHORT_PATH)
    documented = client.post("/v1/episodes", content=body, headers=FASTAPI_PATH)
    return short, documented


def _assert_same_answer(short: Any, documented: Any) -> None:
    if short.status_code == 201:
        # A keyed body is a duplicate the second time; a keyless one is new again.
        assert documented.status_code in (200, 201), documented.text
        assert _shown(documented) == _shown(short)
        if documented.status_code == 200:
            assert documented.json()["id"] == short.json()["id"]
    else:
        assert documented.status_code == short.status_code, (short.text, documented.text)
        assert _shown(documented) == _shown(short)


_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=6)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=10,
)
# A valid body, then any field replaced by any JSON value, or removed.
_FIELDS = st.sampled_from(
    [
        "subject_id",
        "source",
        "type",
        "payload",
        "metadata",
        "provenance",
        "session_id",
        "idempotency_key",
        "occurred_at",
    ]
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    changes=st.lists(st.tuples(_FIELDS, st.none() | _JSON), max_size=3),
    removed=st.lists(_FIELDS, max_size=2),
    keyed=st.booleans(),
)
def test_any_body_is_answered_as_fastapi_answers_it(
    client: TestClient,
    changes: list[tuple[str, Any]],
    removed: list[str],
    keyed: bool,
) -> None:
    body = episode("k" if keyed else None, occurred_at="2026-05-01T10:00:00Z")
    for field, value in changes:
        body[field] = value
    for field in removed:
        body.pop(field, None)

    _assert_same_answer(*_both_ways(client, json.dumps(body).encode()))


_HEAD = b'{"subject_id": "s", "source": "chat", "type": "m", '


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{",
        b"[]",
        b"null",
        b'"text"',
        _HEAD + b'"payload": {"n": NaN}}',
        _HEAD + b'"payload": {"n": 1e400}}',
        _HEAD + b'"payload": {}} trailing',
        # Duplicate keys: the last one counts, for both parsers.
        b'{"subject_id": "a", "subject_id": "b", "source": "c", "type": "m", "payload": {}}',
        _HEAD + b'"payload": {"t": "\\ud800"}}',
        _HEAD + b'"payload": {"t": "a\\u0000b"}}',
        _HEAD + b'"payload": {"t": "\xff"}}',
        b'\xef\xbb\xbf{"subject_id": "s", "source": "chat", "type": "m", "payload": {}}',
        _HEAD + b'"payload": {"t": "\t"}}',
        _HEAD + b'"payload": {"n": 123456789012345678901234567890}}',
        _HEAD + b'"payload": {"n": -0.0}}',
        _HEAD + b'"payload": {}, "occurred_at": 0}',
        _HEAD + b'"payload": {}, "occurred_at": "2026-02-30T00:00:00Z"}',
        _HEAD + b'"payload": {}, "idempotency_key": ""}',
        _HEAD + b'"payload": {}, "metadata": {"idempotency_key": 7}}',
        _HEAD + b'"payload": {}, "unknown": [1, 2]}',
        b'{"subject_id": 5, "source": true, "type": "m", "payload": []}',
        b"[" * 5000 + b"]" * 5000,
    ],
)
def test_raw_bodies_are_answered_as_fastapi_answers_them(client: TestClient, raw: bytes) -> None:
    _assert_same_answer(*_both_ways(client, raw))


KEY = "ms_lean_secret"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"X-API-Key": "ms_wrong"}, 401),
        ({"X-API-Key": KEY, "X-Tenant-ID": "initech"}, 403),
        ({"X-API-Key": KEY, "X-Tenant-ID": "globex"}, 201),
    ],
)
def test_the_caller_is_judged_as_fastapi_judges_it(
    store: Store, headers: dict[str, str], status: int
) -> None:
    api = ApiSettings(
        keys=[ApiKey(name="ops", sha256=hash_api_key(KEY), tenants=["acme", "globex"])]
    )
    with TestClient(build_app(store, api), base_url=LOOPBACK) as client:
        # FastAPI judges a body that is not JSON before the caller, a model after it.
        for body, expected in (
            (json.dumps(episode("k")).encode(), status),
            (json.dumps(episode("k", source="")).encode(), 422 if status == 201 else status),
            (b"{", 422),
        ):
            short = client.post("/v1/episodes", content=body, headers=SHORT_PATH | headers)
            documented = client.post("/v1/episodes", content=body, headers=FASTAPI_PATH | headers)
            assert short.status_code == expected, short.text
            _assert_same_answer(short, documented)
        if status == 201:
            stored = client.get(
                "/v1/timeline", params={"subject_id": "user-1"}, headers=headers
            ).json()
            assert len(stored["episodes"]) == 1, stored


def test_content_types_the_short_path_does_not_take_go_to_fastapi(client: TestClient) -> None:
    body = json.dumps(episode("k")).encode()
    created = client.post(
        "/v1/episodes", content=body, headers={"content-type": "Application/JSON; charset=utf-8"}
    )
    assert created.status_code == 201, created.text
    for content_type in ("text/plain", None):
        headers = {} if content_type is None else {"content-type": content_type}
        refused = client.post("/v1/episodes", content=body, headers=headers)
        assert refused.status_code == 422, refused.text


class _Body(BaseModel):
    name: str


async def _needs_a_query(request: Request, limit: int = 5) -> int:
    return limit


@pytest.mark.parametrize(
    "endpoint",
    [
        pytest.param(lambda body: Response(), id="not a coroutine"),
        pytest.param(_needs_a_query, id="a query parameter"),
    ],
)
def test_an_endpoint_the_short_path_cannot_serve_exactly_is_refused_when_built(
    endpoint: Any,
) -> None:
    router = APIRouter(route_class=LeanJsonRoute)
    with pytest.raises(TypeError, match="LeanJsonRoute /x"):
        router.add_api_route("/x", endpoint, methods=["POST"])


def test_a_header_the_endpoint_reads_itself_is_refused_when_built() -> None:
    async def endpoint(body: _Body, tenant: str | None = Header(default=None)) -> Response:
        return Response()

    router = APIRouter(route_class=LeanJsonRoute)
    with pytest.raises(TypeError, match="LeanJsonRoute /x"):
        router.add_api_route("/x", endpoint, methods=["POST"])


async def _short_tenant(x_tenant: str | None = Header(default=None, max_length=3)) -> str | None:
    return x_tenant


def test_a_dependency_header_with_a_constraint_is_refused_when_built() -> None:
    # The short path passes headers through as they are: a constraint FastAPI would
    # check (here a length) cannot be honoured, so the route is refused.
    async def endpoint(
        body: _Body, tenant: Annotated[str | None, Depends(_short_tenant)]
    ) -> Response:
        return Response()

    router = APIRouter(route_class=LeanJsonRoute)
    with pytest.raises(TypeError, match="header x_tenant must be a plain optional str"):
        router.add_api_route("/x", endpoint, methods=["POST"])


async def _who(x_who: str | None = Header(default=None)) -> str:
    return f"header {x_who}"


async def _named(body: _Body, who: Annotated[str, Depends(_who)]) -> Response:
    return Response(f"{body.name} by {who}")


def test_dependency_overrides_set_after_the_app_is_built_are_honoured() -> None:
    app = FastAPI()
    router = APIRouter(route_class=LeanJsonRoute)
    router.add_api_route("/x", _named, methods=["POST"])
    app.include_router(router)
    with TestClient(app) as client:
        short = client.post("/x", json={"name": "a"}, headers={"X-Who": "h"})
        assert short.text == "a by header h"
        app.dependency_overrides[_who] = lambda: "the override"
        overridden = client.post("/x", json={"name": "a"}, headers={"X-Who": "h"})
        assert overridden.text == "a by the override"


async def _gate(x_gate: str | None = Header(default=None)) -> None:
    if x_gate != "open":
        raise HTTPException(403, "closed")


def test_an_including_routers_dependencies_run_on_the_short_path() -> None:
    app = FastAPI()
    router = APIRouter(route_class=LeanJsonRoute)
    router.add_api_route("/x", _named, methods=["POST"])
    app.include_router(router, dependencies=[Depends(_gate)])
    with TestClient(app) as client:
        closed = client.post("/x", json={"name": "a"})
        assert closed.status_code == 403, closed.text
        opened = client.post("/x", json={"name": "a"}, headers={"X-Gate": "open"})
        assert opened.text == "a by header None"


def test_a_dependency_declared_twice_is_refused() -> None:
    # FastAPI would call it once and share the value; the short path would call it twice.
    # An included route is built for its inclusion when FastAPI first serves it.
    app = FastAPI()
    router = APIRouter(route_class=LeanJsonRoute, dependencies=[Depends(_gate)])
    router.add_api_route("/x", _named, methods=["POST"])
    app.include_router(router, dependencies=[Depends(_gate)])
    with TestClient(app) as client, pytest.raises(TypeError, match="declared twice"):
        client.post("/x", json={"name": "a"}, headers={"X-Gate": "open"})
