"""The details a client written for Statewave v1 checks, one test per detail, driven
over HTTP against a live server: through the official SDK where it exposes the call,
with raw httpx where it does not."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from statewave import StatewaveAPIError, StatewaveClient
from statewave.client import NO_RETRY

from memsync.runtime.app.config import ApiKey, ApiSettings
from memsync.runtime.storage import Store, upgrade
from memsync.runtime.storage.migrate import downgrade
from tests.conftest import Database
from tests.e2e.statewave_support import API_KEY, sdk, tell_lisbon_and_tea
from tests.helpers import build_app, live_server
from tests.jobs_support import wait_until

ACME = {"X-API-Key": API_KEY, "X-Tenant-ID": "acme"}


@pytest.fixture
def base_url(store: Store) -> Iterator[str]:
    api = ApiSettings(keys=[ApiKey(name="sdk", key=API_KEY, tenants=["acme"])])
    with live_server(build_app(store, api)) as url:
        yield url


@pytest.fixture
def http(base_url: str) -> Iterator[httpx.Client]:
    """Raw HTTP as the acme tenant, for what the SDK does not expose."""
    with httpx.Client(base_url=base_url, headers=ACME) as client:
        yield client


def test_an_empty_batch_is_refused_with_422_and_creates_nothing(base_url: str) -> None:
    with sdk(base_url, "acme") as client:
        with pytest.raises(StatewaveAPIError) as refused:
            client.create_episodes_batch([])

        assert refused.value.status_code == 422
        assert refused.value.code == "validation_error"
        assert client.list_subjects().total == 0


def test_search_by_a_kind_memsync_does_not_derive_answers_no_memories(base_url: str) -> None:
    with sdk(base_url, "acme") as client:
        tell_lisbon_and_tea(client)
        client.compile_memories("ana")

        unknown = client.search_memories("ana", kind="procedure")
        known = client.search_memories("ana", kind="profile_fact")

        assert unknown.memories == []
        assert [memory.content for memory in known.memories] == ["Lives in Lisbon"]


def test_only_an_async_compile_answers_with_a_job_id(base_url: str, http: httpx.Client) -> None:
    # Statewave clients tell an accepted async compile from a finished one by job_id.
    with sdk(base_url, "acme") as client:
        tell_lisbon_and_tea(client)

    finished = http.post("/v1/memories/compile", json={"subject_id": "ana"})
    accepted = http.post("/v1/memories/compile", json={"subject_id": "ana", "async": True})

    assert finished.status_code == 200
    assert "job_id" not in finished.json()
    assert finished.json()["compile_id"]
    assert finished.json()["memories_created"] == len(finished.json()["memories"]) > 0
    assert accepted.status_code == 202
    assert accepted.json()["job_id"]


def test_a_validation_error_says_request_validation_failed_and_lists_fields_in_details(
    base_url: str,
) -> None:
    with sdk(base_url, "acme") as client, pytest.raises(StatewaveAPIError) as refused:
        client.create_episode("", "chat", "message", {"text": "hi"})

    # The SDK keeps the message only in the exception's text.
    assert str(refused.value) == "[422] validation_error: Request validation failed"
    assert [problem["field"] for problem in refused.value.details] == ["subject_id"]


def unreachable(database: Database, directory: Path) -> Store:
    """A store of the backend under test that cannot be reached: nothing listens on
    port 1, and SQLite cannot create a file in a directory that does not exist."""
    if database.backend == "sqlite":
        return Store.from_url(f"sqlite:///{directory / 'missing' / 'store.db'}")
    return Store.from_url("postgresql+psycopg://memsync@127.0.0.1:1/memsync")


def test_liveness_and_readiness_are_served_and_readiness_asks_the_store(
    http: httpx.Client, database: Database, tmp_path: Path
) -> None:
    assert http.get("/healthz").json() == {"status": "ok"}
    ready = http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"

    down = unreachable(database, tmp_path)
    try:
        with live_server(build_app(down)) as url, httpx.Client(base_url=url) as cut_off:
            alive = cut_off.get("/healthz")
            not_ready = cut_off.get("/readyz")
            legacy = cut_off.get("/v1/health")
    finally:
        down.dispose()
    assert (alive.status_code, alive.json()) == (200, {"status": "ok"})
    assert not_ready.status_code == 503
    assert not_ready.json()["error"]["code"] == "service_unavailable"
    assert legacy.status_code == 200


def test_readiness_refuses_a_store_whose_schema_is_behind(store: Store, http: httpx.Client) -> None:
    downgrade(store, "base")
    try:
        behind = http.get("/readyz")
    finally:
        upgrade(store)

    assert behind.status_code == 503
    assert "memsync db upgrade" in behind.json()["error"]["message"]
    assert http.get("/readyz").status_code == 200


def test_every_response_carries_the_callers_request_id_or_a_fresh_one_and_logs_it(
    base_url: str, http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="memsync.access"):
        echoed = http.get("/v1/subjects", headers={"X-Request-ID": "trace-42"})
        fresh = [http.get("/v1/subjects").headers["X-Request-ID"] for _ in range(2)]
        malformed = http.get("/v1/subjects", headers={"X-Request-ID": "two words"})
        with sdk(base_url, "acme") as client, pytest.raises(StatewaveAPIError) as refused:
            client.create_episode("", "chat", "message", {"text": "hi"})

    assert echoed.headers["X-Request-ID"] == "trace-42"
    assert len(set(fresh)) == 2
    assert all(fresh)
    assert malformed.headers["X-Request-ID"] not in ("two words", *fresh)
    # The SDK reads the id from the error body, as Statewave sends it.
    assert refused.value.request_id
    assert refused.value.request_id not in ("trace-42", *fresh)

    # The server thread writes a request's access line after the answer is sent: wait
    # for the lines rather than assume they are there when the client has its answer.
    def access_lines() -> list[dict[str, object]]:
        return [record.__dict__ for record in caplog.records if record.name == "memsync.access"]

    wait_until(
        lambda: (
            {line.get("request_id") for line in access_lines()}
            >= {"trace-42", refused.value.request_id}
        ),
        timeout=30,
        what="the access lines of the requests",
    )
    logged = access_lines()
    assert any(
        (line["method"], line["path"], line["status"]) == ("GET", "/v1/subjects", 200)
        for line in logged
    )
    assert any(line["request_id"] == "trace-42" for line in logged)
    assert any(line["request_id"] == refused.value.request_id for line in logged)


def test_a_store_that_is_away_answers_503_with_the_request_id(
    database: Database, tmp_path: Path
) -> None:
    down = unreachable(database, tmp_path)
    try:
        with live_server(build_app(down)) as url, httpx.Client(base_url=url) as client:
            failed = client.get("/v1/subjects", headers={"X-Request-ID": "trace-503"})
    finally:
        down.dispose()

    assert failed.status_code == 503
    assert failed.headers["X-Request-ID"] == "trace-503"
    assert failed.json()["error"]["request_id"] == "trace-503"


def test_an_unexpected_failure_still_answers_and_logs_with_the_request_id(
    store: Store, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build_app(store)

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug, not an input")

    monkeypatch.setattr(app.state.services.episodes, "subjects", broken)
    with (
        live_server(app) as url,
        httpx.Client(base_url=url) as client,
        caplog.at_level(logging.INFO, logger="memsync.api"),
    ):
        failed = client.get("/v1/subjects", headers={"X-Request-ID": "trace-500"})

    assert failed.status_code == 500
    assert failed.headers["X-Request-ID"] == "trace-500"
    assert failed.json()["error"]["request_id"] == "trace-500"
    [error_line] = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert error_line.__dict__["request_id"] == "trace-500"


BOUND_KEY = "ms_bound_to_acme"


def test_with_tenant_required_a_request_naming_no_tenant_is_400(store: Store) -> None:
    api = ApiSettings(
        require_tenant=True,
        keys=[
            ApiKey(name="sdk", key=API_KEY, tenants=["acme", "globex"]),
            ApiKey(name="acme-only", key=BOUND_KEY, tenants=["acme"]),
        ],
    )
    with live_server(build_app(store, api)) as url:
        unnamed = StatewaveClient(url, api_key=API_KEY, retry=NO_RETRY)
        with unnamed, pytest.raises(StatewaveAPIError) as refused:
            unnamed.create_episode("ana", "chat", "message", {"text": "hi"})
        # A key bound to one tenant names it; so does the header.
        with StatewaveClient(url, api_key=BOUND_KEY, retry=NO_RETRY) as bound:
            bound.create_episode("ana", "chat", "message", {"text": "hi"})
        with sdk(url, "acme") as named:
            subjects = named.list_subjects()
        probe = httpx.get(f"{url}/readyz")

    assert refused.value.status_code == 400
    assert refused.value.code == "missing_tenant"
    assert "X-Tenant-ID header is required" in str(refused.value)
    assert [subject.subject_id for subject in subjects.subjects] == ["ana"]
    assert probe.status_code == 200


def test_with_tenant_required_and_no_keys_a_request_naming_no_tenant_is_400(
    store: Store,
) -> None:
    with live_server(build_app(store, ApiSettings(require_tenant=True))) as url:
        unnamed = httpx.get(f"{url}/v1/subjects")
        named = httpx.get(f"{url}/v1/subjects", headers={"X-Tenant-ID": "acme"})

    assert unnamed.status_code == 400
    assert unnamed.json()["error"]["code"] == "missing_tenant"
    assert named.status_code == 200


def test_by_default_a_request_naming_no_tenant_acts_for_its_keys_first(store: Store) -> None:
    api = ApiSettings(keys=[ApiKey(name="sdk", key=API_KEY, tenants=["acme", "globex"])])
    with live_server(build_app(store, api)) as url:
        with StatewaveClient(url, api_key=API_KEY, retry=NO_RETRY) as unnamed:
            unnamed.create_episode("ana", "chat", "message", {"text": "hi"})
        with sdk(url, "acme") as acme:
            assert acme.list_subjects().total == 1


def test_a_plan_statement_about_the_subject_is_a_profile_fact(base_url: str) -> None:
    with sdk(base_url, "acme") as client:
        client.create_episode(
            "acme-corp",
            "support",
            "message",
            {"messages": [{"role": "user", "content": "I am on the Enterprise plan."}]},
        )
        client.compile_memories("acme-corp")

        found = client.search_memories("acme-corp", kind="profile_fact")

    assert [memory.content for memory in found.memories] == ["On the Enterprise plan"]
    assert found.memories[0].metadata["claim_key"] == "account.plan"
