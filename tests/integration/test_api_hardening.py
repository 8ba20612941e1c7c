"""Inputs that once answered 500 or stored half a request (issue #15), on both databases.

Every case asserts the status, that the error names what was wrong, and that the store
did not change: one validation layer decides, the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.runtime.app.config import ApiSettings
from memsync.runtime.ingest.limits import MAX_JSON_DEPTH
from memsync.runtime.storage import Store, tables
from tests.conftest import Database
from tests.helpers import (
    LOOPBACK,
    SwitchableProxy,
    build_app,
    episode,
    terminate_other_backends,
)


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(build_app(store), base_url=LOOPBACK) as client:
        yield client


def stored_episodes(store: Store) -> int:
    with store.read() as connection:
        return connection.execute(
            sa.select(sa.func.count()).select_from(tables.episodes)
        ).scalar_one()


def nested(depth: int) -> dict[str, Any]:
    """A JSON object ``depth`` levels deep (the object itself is level 1)."""
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


def assert_refused(response: Any, field: str, reason: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert any(
        problem["field"] == field and reason in problem["reason"] for problem in error["details"]
    ), error


# -- 1. depth --------------------------------------------------------------------------------


def test_a_payload_nested_past_the_limit_is_refused_and_not_stored(
    client: TestClient, store: Store
) -> None:
    for _ in range(2):  # a client retrying the keyless episode stores no copy either
        response = client.post("/v1/episodes", json=episode(None, payload=nested(300)))
        assert_refused(response, "payload", f"nested deeper than {MAX_JSON_DEPTH} levels")
    assert stored_episodes(store) == 0


def test_a_payload_at_the_depth_limit_is_stored_and_read_back(client: TestClient) -> None:
    created = client.post("/v1/episodes", json=episode(payload=nested(MAX_JSON_DEPTH)))
    assert created.status_code == 201

    shown = client.get(f"/v1/episodes/{created.json()['id']}")
    timeline = client.get("/v1/timeline", params={"subject_id": "user-1"})

    assert shown.status_code == 200
    assert shown.json()["payload"] == nested(MAX_JSON_DEPTH)
    assert timeline.status_code == 200


# -- 2. NUL, and 6. lone surrogates ----------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (episode(payload={"text": "a\u0000b"}), "payload"),
        (episode(payload={"a\u0000": 1}), "payload"),
        (episode(metadata={"note": ["\u0000"]}), "metadata"),
        (episode(subject_id="user\u0000"), "subject_id"),
        (episode(source="chat\u0000"), "source"),
        (episode(key="k\u0000"), "idempotency_key"),
        (episode(session_id="\u0000"), "session_id"),
    ],
    ids=["payload", "payload-key", "metadata", "subject", "source", "key", "session"],
)
def test_a_nul_character_is_refused_on_every_write_field(
    client: TestClient, store: Store, body: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/episodes", json=body)
    assert_refused(response, field, "NUL character")
    batch = client.post("/v1/episodes/batch", json={"episodes": [episode("ok"), body]})
    assert_refused(batch, f"episodes[1].{field}", "NUL character")
    assert stored_episodes(store) == 0


@pytest.mark.parametrize(
    ("method", "path", "params"),
    [
        ("GET", "/v1/timeline", {"subject_id": "a\u0000"}),
        ("GET", "/v1/memories/search", {"subject_id": "a\u0000"}),
        ("GET", "/v1/memories/search", {"subject_id": "a", "q": "\u0000"}),
        ("GET", "/v1/conflicts", {"subject_id": "a\u0000"}),
        ("GET", "/v1/runs", {"connector": "gh\u0000"}),
        ("GET", "/v1/jobs", {"kind": "compile\u0000"}),
        ("GET", "/v1/subjects/inspect", {"subject_id": "a\u0000"}),
        ("DELETE", "/v1/subjects", {"subject_id": "a\u0000"}),
    ],
)
def test_a_nul_character_in_a_query_is_422_not_500(
    client: TestClient, method: str, path: str, params: dict[str, str]
) -> None:
    response = client.request(method, path, params=params)
    assert response.status_code == 422, response.text
    assert any(
        "NUL character" in problem["reason"] for problem in response.json()["error"]["details"]
    )


@pytest.mark.parametrize("path", ["/v1/subjects/a%00b/inspect", "/v1/subjects/a%00b"])
def test_a_nul_character_in_a_subject_path_is_422(client: TestClient, path: str) -> None:
    method = "GET" if path.endswith("inspect") else "DELETE"
    response = client.request(method, path)
    assert response.status_code == 422
    assert any(
        "NUL character" in problem["reason"] for problem in response.json()["error"]["details"]
    )


@pytest.mark.parametrize(
    "body",
    [
        {"subject_id": "u", "task": "\u0000"},
        {"subject_id": "u\u0000", "task": "t"},
    ],
)
def test_a_nul_character_in_compile_and_context_is_422(
    client: TestClient, body: dict[str, str]
) -> None:
    assert client.post("/v1/context", json=body).status_code == 422
    compiled = client.post("/v1/memories/compile", json={"subject_id": body["subject_id"]})
    assert compiled.status_code == (422 if "\u0000" in body["subject_id"] else 200)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"subject_id": "u", "source": "s", "type": "t", "payload": {"a": "\\ud800"}}',
        b'{"subject_id": "u", "source": "s", "type": "t", "payload": {"\\udfff": 1}}',
        b'{"subject_id": "\\ud800", "source": "s", "type": "t", "payload": {}}',
    ],
    ids=["value", "key", "subject"],
)
def test_a_lone_surrogate_is_422_and_stores_nothing(
    client: TestClient, store: Store, raw: bytes
) -> None:
    response = client.post(
        "/v1/episodes", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    field = "subject_id" if b'"subject_id": "\\' in raw else "payload"
    assert [problem["field"] for problem in response.json()["error"]["details"]] == [field]
    assert stored_episodes(store) == 0


def test_a_lone_surrogate_in_a_context_task_is_422(client: TestClient) -> None:
    response = client.post(
        "/v1/context",
        content=b'{"subject_id": "u", "task": "\\ud800"}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422


_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=8)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=12,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(payload=st.dictionaries(_TEXT, _JSON, max_size=4), subject=_TEXT)
def test_any_json_is_either_stored_as_sent_or_refused_leaving_the_store_unchanged(
    client: TestClient, store: Store, payload: dict[str, Any], subject: str
) -> None:
    before = stored_episodes(store)
    body = json.dumps(episode(None, subject_id=subject or "s", payload=payload))

    # json.dumps escapes every non-ASCII character, lone surrogates included.
    response = client.post(
        "/v1/episodes", content=body.encode("ascii"), headers={"content-type": "application/json"}
    )

    if response.status_code == 201:
        shown = client.get(f"/v1/episodes/{response.json()['id']}").json()
        assert shown["payload"] == payload
        assert shown["subject_id"] == (subject or "s")
        assert stored_episodes(store) == before + 1
    else:
        assert response.status_code == 422, response.text
        assert stored_episodes(store) == before


# -- 4. all or nothing -----------------------------------------------------------------------


def _poison(store: Store, subject: str) -> None:
    """A store that fails on one subject's insert, as a full disk or a lost connection
    fails a statement part-way through a request."""
    with store.write() as connection:
        if store.is_postgresql:
            # A constraint, not a trigger: Citus refuses triggers on distributed tables
            # and propagates constraints to every shard.
            connection.exec_driver_sql(
                "ALTER TABLE episodes ADD CONSTRAINT memsync_test_poison "
                f"CHECK (subject_id <> '{subject}') NOT VALID"
            )
        else:
            connection.exec_driver_sql(
                "CREATE TRIGGER memsync_test_poison BEFORE INSERT ON episodes "
                f"WHEN NEW.subject_id = '{subject}' "
                "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            )


@pytest.fixture
def poisoned(store: Store) -> Iterator[Store]:
    _poison(store, "poison")
    yield store
    with store.write() as connection:
        if store.is_postgresql:
            connection.exec_driver_sql(
                "ALTER TABLE episodes DROP CONSTRAINT IF EXISTS memsync_test_poison"
            )
        else:
            connection.exec_driver_sql("DROP TRIGGER IF EXISTS memsync_test_poison")


def test_a_batch_that_fails_part_way_stores_none_of_it(poisoned: Store) -> None:
    app = build_app(poisoned, ApiSettings(max_batch_size=3000))
    episodes = [episode(f"k{i}", payload={"n": i}) for i in range(1500)]
    episodes[1200] = episode("k1200", subject_id="poison")
    with TestClient(app, base_url=LOOPBACK, raise_server_exceptions=False) as client:
        response = client.post("/v1/episodes/batch", json={"episodes": episodes})

    assert response.status_code == 500
    assert stored_episodes(poisoned) == 0


@pytest.mark.slow
def test_memsync_ingest_that_fails_part_way_stores_none_of_it(
    poisoned: Store, store_url: str, tmp_path: Path
) -> None:
    episodes = [episode(f"k{i}", payload={"n": i}) for i in range(1500)]
    episodes[1200] = episode("k1200", subject_id="poison")
    path = tmp_path / "episodes.jsonl"
    path.write_text("\n".join(json.dumps(item) for item in episodes))
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}

    result = subprocess.run(
        [sys.executable, "-m", "memsync", "ingest", str(path)],
        env={**environment, "MEMSYNC_STORE": store_url},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )

    assert result.returncode != 0
    assert stored_episodes(poisoned) == 0


# -- 5. offsets ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/subjects", {}),
        ("/v1/runs", {}),
        ("/v1/jobs", {}),
        ("/v1/timeline", {"subject_id": "u"}),
    ],
)
def test_an_offset_past_the_limit_is_422(
    client: TestClient, path: str, params: dict[str, str]
) -> None:
    response = client.get(path, params={**params, "offset": str(2**63)})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "query.offset"
    largest = client.get(path, params={**params, "offset": str(2**31 - 1)})
    assert largest.status_code == 200


# -- 7. dates --------------------------------------------------------------------------------


@pytest.mark.parametrize("moment", ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00"])
def test_a_time_outside_years_1_to_9999_in_utc_is_422(
    client: TestClient, store: Store, moment: str
) -> None:
    assert_refused(
        client.post("/v1/episodes", json=episode(occurred_at=moment)),
        "occurred_at",
        "outside the years 1 to 9999",
    )
    assert_refused(
        client.post("/v1/context", json={"subject_id": "u", "task": "t", "as_of": moment}),
        "as_of",
        "outside the years 1 to 9999",
    )
    assert stored_episodes(store) == 0


@pytest.mark.parametrize("moment", ["9999-12-31T23:59:59.999999Z", "0001-01-01T00:00:00Z"])
def test_the_first_and_last_moments_are_stored_and_read_back(
    client: TestClient, moment: str
) -> None:
    created = client.post("/v1/episodes", json=episode(occurred_at=moment))
    assert created.status_code == 201
    timeline = client.get("/v1/timeline", params={"subject_id": "user-1"}).json()
    bundle = client.post("/v1/context", json={"subject_id": "user-1", "task": "t", "as_of": moment})
    assert [item["occurred_at"] for item in timeline["episodes"]] == [moment]
    assert bundle.status_code == 200


# -- 8. subjects with a slash ----------------------------------------------------------------


@pytest.mark.parametrize(
    "subject", ["repo:acme/api-server", "a/b/c/", "x/inspect", "100% sure?#", "ünï/cødé"]
)
def test_a_subject_of_any_form_can_be_inspected_and_deleted(
    client: TestClient, subject: str
) -> None:
    from urllib.parse import quote

    client.post("/v1/episodes", json=episode("a", subject_id=subject))
    client.post("/v1/episodes", json=episode("b", subject_id=subject))
    path = quote(subject, safe="/:")

    by_path = client.get(f"/v1/subjects/{path}/inspect")
    by_query = client.get("/v1/subjects/inspect", params={"subject_id": subject})
    deleted = client.delete(f"/v1/subjects/{path}")

    assert by_path.status_code == 200
    assert by_path.json()["subject_id"] == subject
    assert by_query.json() == by_path.json()
    assert deleted.json() == {"subject_id": subject, "episodes_deleted": 2, "memories_deleted": 0}


def test_a_subject_whose_path_would_be_normalised_is_deleted_by_query(
    client: TestClient,
) -> None:
    client.post("/v1/episodes", json=episode("a", subject_id="../x"))
    deleted = client.delete("/v1/subjects", params={"subject_id": "../x"})
    assert deleted.json()["episodes_deleted"] == 1


# -- 14. contract details --------------------------------------------------------------------


def test_a_body_that_is_not_utf8_is_422(client: TestClient, store: Store) -> None:
    response = client.post(
        "/v1/episodes",
        content=b'{"subject_id": "\xff", "source": "s", "type": "t", "payload": {}}',
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"
    assert stored_episodes(store) == 0


@pytest.mark.parametrize("moment", [0, 1_700_000_000_000, 1.5, True])
def test_a_number_is_not_a_time(client: TestClient, moment: object) -> None:
    assert_refused(
        client.post("/v1/episodes", json=episode(occurred_at=moment)),
        "occurred_at",
        "ISO 8601",
    )


@pytest.mark.parametrize("flag", [0, 1, "true", "yes"])
def test_async_must_be_a_boolean(client: TestClient, flag: object) -> None:
    response = client.post("/v1/memories/compile", json={"subject_id": "u", "async": flag})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "async"


@pytest.mark.parametrize("method", ["TRACE", "PUT", "PATCH"])
def test_a_method_a_route_does_not_have_is_405_with_allow(client: TestClient, method: str) -> None:
    response = client.request(method, "/v1/episodes")
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.json()["error"]["code"] == "method_not_allowed"


# -- 11. Host in no-key mode -----------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    ["rebind.attacker.example", "rebind.attacker.example:8100", "10.0.0.1", "[::2]:8100", ""],
)
def test_without_keys_a_host_that_is_not_loopback_is_refused(
    client: TestClient, store: Store, host: str
) -> None:
    for method, path, body in [
        ("GET", "/v1/subjects", None),
        ("POST", "/v1/episodes", episode()),
        ("GET", "/v1/health", None),
    ]:
        response = client.request(method, path, json=body, headers={"host": host})
        assert response.status_code == 400, (path, response.text)
        assert "not a loopback name" in response.json()["error"]["message"]
    assert stored_episodes(store) == 0


@pytest.mark.parametrize(
    "host", ["localhost", "localhost:8100", "127.0.0.1:8100", "127.8.9.10", "[::1]:8100", "[::1]"]
)
def test_without_keys_loopback_hosts_are_answered(client: TestClient, host: str) -> None:
    assert client.get("/v1/subjects", headers={"host": host}).status_code == 200


def test_with_keys_any_host_is_answered(store: Store) -> None:
    api = ApiSettings(keys=[{"name": "ops", "key": "k-ops", "tenants": ["*"]}])  # type: ignore[list-item]
    with TestClient(build_app(store, api), base_url="http://memsync.example.com") as client:
        response = client.get("/v1/subjects", headers={"x-api-key": "k-ops"})
    assert response.status_code == 200


# -- 10. the store going away and coming back ------------------------------------------------


@pytest.fixture
def switchable_store(
    database: Database, tmp_path: Path
) -> Iterator[tuple[Store, Callable[[bool], None]]]:
    """A store the test can take away and give back: behind a TCP proxy on PostgreSQL,
    a file whose directory appears only when switched on for SQLite."""
    if database.is_postgresql:
        url = sa.make_url(database.new_url(tmp_path))
        proxy = SwitchableProxy((url.host or "127.0.0.1", url.port or 5432))
        store = Store.from_url(url.set(host="127.0.0.1", port=proxy.port).render_as_string(False))
        try:
            yield store, lambda up: proxy.on() if up else proxy.off()
        finally:
            store.dispose()
            proxy.close()
        return
    template = database.new_url(tmp_path).removeprefix("sqlite:///")
    target = tmp_path / "later" / "store.db"

    def switch(up: bool) -> None:
        if up:
            target.parent.mkdir(exist_ok=True)
            shutil.copyfile(template, target)

    store = Store.from_url(f"sqlite:///{target}")
    yield store, switch
    store.dispose()


def test_data_routes_answer_503_while_the_store_is_down_and_recover(
    switchable_store: tuple[Store, Callable[[bool], None]],
) -> None:
    store, switch = switchable_store
    with TestClient(build_app(store), base_url=LOOPBACK) as client:
        if store.is_postgresql:  # with pooled connections (both pools) that then go away
            assert client.get("/v1/subjects").status_code == 200
            assert client.post("/v1/episodes", json=episode("before")).status_code == 201
        switch(False)
        down = [
            client.get("/v1/subjects"),
            client.post("/v1/episodes", json=episode()),
            client.get("/v1/timeline", params={"subject_id": "user-1"}),
        ]
        health = client.get("/v1/health")
        switch(True)
        back = client.post("/v1/episodes", json=episode())

    assert [response.status_code for response in down] == [503, 503, 503]
    assert {response.json()["error"]["code"] for response in down} == {"store_unavailable"}
    assert health.status_code == 200  # liveness stays cheap: it does not ask the store
    assert back.status_code == 201


@pytest.mark.postgresql_only
def test_a_single_ingest_after_the_server_closed_its_pooled_connection_is_stored(
    store: Store, store_url: str
) -> None:
    with TestClient(build_app(store), base_url=LOOPBACK) as client:
        assert client.post("/v1/episodes", json=episode("before")).status_code == 201
        terminate_other_backends(store_url)  # a restart of the server, as the pool sees it
        after = client.post("/v1/episodes", json=episode("after"))
        listed = client.get("/v1/subjects").json()

    assert after.status_code == 201
    assert listed["subjects"][0]["episode_count"] == 2
