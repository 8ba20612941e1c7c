"""The episode endpoints of the Statewave v1 contract, and how they refuse bad input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memsync.runtime.app.config import ApiSettings
from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK, build_app, episode


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(
        build_app(store, ApiSettings(max_body_bytes=64 * 1024)), base_url=LOOPBACK
    ) as client:
        yield client


def test_create_returns_201_then_200_with_the_same_id(client: TestClient) -> None:
    first = client.post("/v1/episodes", json=episode())
    second = client.post("/v1/episodes", json=episode())

    assert first.status_code == 201
    assert first.json()["ingest_outcome"] == "created"
    assert second.status_code == 200
    assert second.json()["ingest_outcome"] == "duplicate"
    assert second.json()["id"] == first.json()["id"]


def test_metadata_idempotency_key_is_honoured_without_a_top_level_key(
    client: TestClient,
) -> None:
    body = episode(key=None, metadata={"idempotency_key": "from-metadata"})
    first = client.post("/v1/episodes", json=body)
    second = client.post("/v1/episodes", json=body)
    assert first.json()["idempotency_key"] == "from-metadata"
    assert second.json()["id"] == first.json()["id"]


def test_an_edited_payload_answers_revised_and_keeps_history(client: TestClient) -> None:
    created = client.post("/v1/episodes", json=episode()).json()
    revised = client.post("/v1/episodes", json=episode(payload={"text": "I live in Porto"}))

    assert revised.status_code == 200
    assert revised.json()["ingest_outcome"] == "revised"
    assert revised.json()["revision"] == 2
    shown = client.get(f"/v1/episodes/{created['id']}").json()
    assert shown["payload"] == {"text": "I live in Porto"}
    assert [revision["payload"] for revision in shown["revisions"]] == [
        {"text": "I live in Lisbon"}
    ]


def test_a_key_sent_under_another_subject_moves_the_episode(client: TestClient) -> None:
    created = client.post("/v1/episodes", json=episode()).json()
    moved = client.post("/v1/episodes", json=episode(subject_id="user-2"))

    assert moved.status_code == 200
    assert moved.json()["ingest_outcome"] == "revised"
    assert (moved.json()["id"], moved.json()["subject_id"]) == (created["id"], "user-2")
    shown = client.get(f"/v1/episodes/{created['id']}").json()
    assert [revision["subject_id"] for revision in shown["revisions"]] == ["user-1"]
    assert client.get("/v1/timeline", params={"subject_id": "user-1"}).json()["episodes"] == []


def test_batch_counts_only_new_episodes_as_created(client: TestClient) -> None:
    client.post("/v1/episodes", json=episode("a"))
    response = client.post(
        "/v1/episodes/batch",
        json={
            "episodes": [
                episode("a"),
                episode("b"),
                episode("c", payload={"n": 1}),
                episode(None),
            ]
        },
    )
    body = response.json()
    assert response.status_code == 201
    assert (body["episodes_created"], body["duplicates"], body["revised"]) == (3, 1, 0)
    assert [item["ingest_outcome"] for item in body["episodes"]] == [
        "duplicate",
        "created",
        "created",
        "created",
    ]


def _without_outcome(body: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in body.items() if name != "ingest_outcome"}


def test_what_a_create_answers_is_what_the_store_shows(client: TestClient) -> None:
    # A new episode is answered from what its insert returned, a known one from a
    # read: both must be what a read just after shows, numbers normalised as stored
    # (the canonical form writes 100.0 as 100) and times as the store keeps them.
    payload = {"text": "I live in Lisbon", "score": 100.0, "nested": {"b": [1.5, None], "a": 1}}
    edited = {**payload, "text": "I live in Porto"}
    answered_and_shown: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def create(*bodies: dict[str, Any]) -> None:
        answers = (
            [client.post("/v1/episodes", json=bodies[0]).json()]
            if len(bodies) == 1
            else client.post("/v1/episodes/batch", json={"episodes": bodies}).json()["episodes"]
        )
        answered_and_shown.extend(
            (answer, client.get(f"/v1/episodes/{answer['id']}").json()) for answer in answers
        )

    create(episode(payload=payload))
    create(episode(key=None, payload=payload))
    create(episode(payload=payload))
    create(episode(payload=edited))
    create(
        episode("b", payload=payload),
        episode(None, payload=payload),
        episode(payload=edited),
        episode("c", payload=payload, subject_id="user-2"),
    )
    create(episode("c", payload=payload))

    assert [answer["ingest_outcome"] for answer, _ in answered_and_shown] == [
        "created",
        "created",
        "duplicate",
        "revised",
        "created",
        "created",
        "duplicate",
        "created",
        "revised",
    ]
    for answer, shown in answered_and_shown:
        assert _without_outcome(answer) == {name: shown[name] for name in _without_outcome(answer)}
    assert answered_and_shown[0][0]["payload"]["score"] == 100


def test_batch_over_the_configured_size_is_refused(store: Store) -> None:
    app = build_app(store, ApiSettings(max_batch_size=2))
    with TestClient(app, base_url=LOOPBACK) as client:
        response = client.post(
            "/v1/episodes/batch", json={"episodes": [episode(str(i)) for i in range(3)]}
        )
    assert response.status_code == 422
    [problem] = response.json()["error"]["details"]
    assert problem["field"] == "episodes"
    assert "at most 2 episodes" in problem["reason"]


def test_timeline_pages_from_either_end_in_ascending_order(client: TestClient) -> None:
    for day in range(1, 6):
        client.post(
            "/v1/episodes",
            json=episode(f"d{day}", occurred_at=f"2026-01-0{day}T00:00:00Z", payload={"d": day}),
        )

    oldest = client.get("/v1/timeline", params={"subject_id": "user-1", "limit": 2}).json()
    newest = client.get(
        "/v1/timeline", params={"subject_id": "user-1", "limit": 2, "newest_first": "true"}
    ).json()
    last = client.get(
        "/v1/timeline", params={"subject_id": "user-1", "limit": 2, "offset": 4}
    ).json()

    assert [item["payload"]["d"] for item in oldest["episodes"]] == [1, 2]
    assert oldest["episodes_has_more"] is True
    assert [item["payload"]["d"] for item in newest["episodes"]] == [4, 5]
    assert [item["payload"]["d"] for item in last["episodes"]] == [5]
    assert last["episodes_has_more"] is False
    assert oldest["memories"] == []


def test_subjects_are_listed_with_counts_and_deleted_with_counts(client: TestClient) -> None:
    client.post("/v1/episodes", json=episode("a"))
    client.post("/v1/episodes", json=episode("b"))
    client.post("/v1/episodes", json=episode("c", subject_id="user-2"))

    listed = client.get("/v1/subjects").json()
    assert listed["total"] == 2
    assert [(s["subject_id"], s["episode_count"]) for s in listed["subjects"]] == [
        ("user-1", 2),
        ("user-2", 1),
    ]
    deleted = client.delete("/v1/subjects/user-1").json()
    assert deleted == {"subject_id": "user-1", "episodes_deleted": 2, "memories_deleted": 0}
    assert client.get("/v1/subjects").json()["total"] == 1


def test_unknown_fields_are_ignored(client: TestClient) -> None:
    response = client.post("/v1/episodes", json=episode(colour="blue"))
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (episode(payload="not an object"), "payload"),
        (episode(subject_id=""), "subject_id"),
        (episode(subject_id=7), "subject_id"),
        (episode(occurred_at="yesterday"), "occurred_at"),
        (episode(metadata={"idempotency_key": 5}, idempotency_key=None), "body"),
        ({"source": "chat", "type": "m", "payload": {}}, "subject_id"),
    ],
)
def test_wrong_types_are_422_naming_the_field(
    client: TestClient, body: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/episodes", json=body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert any(problem["field"] == field for problem in error["details"])


def test_batch_validation_names_the_episode_index(client: TestClient) -> None:
    response = client.post(
        "/v1/episodes/batch", json={"episodes": [episode("a"), episode("b", payload=[1])]}
    )
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["field"] == "episodes[1].payload"


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b'{"subject_id": "s", "source": "x", "type": "t", "payload": {"n": NaN}}',
        b"[" * 5000 + b"]" * 5000,
        b"\xff\xfe",
        b"",
    ],
    ids=["broken", "nan", "deep", "binary", "empty"],
)
def test_malformed_bodies_are_4xx_never_500(client: TestClient, raw: bytes) -> None:
    response = client.post(
        "/v1/episodes", content=raw, headers={"content-type": "application/json"}
    )
    assert 400 <= response.status_code < 500
    assert response.json()["error"]["message"]


def test_a_body_over_the_limit_is_413(client: TestClient) -> None:
    response = client.post("/v1/episodes", json=episode(payload={"text": "x" * 70_000}))
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


def test_a_chunked_body_over_the_limit_is_413(client: TestClient) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"subject_id": "s", "source": "x", "type": "t", "payload": {"text": "'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}}'

    response = client.post(
        "/v1/episodes", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413


def test_health_answers_without_a_key(client: TestClient) -> None:
    assert client.get("/v1/health").json()["status"] == "ok"


def test_unknown_episode_is_404(client: TestClient) -> None:
    response = client.get("/v1/episodes/00000000-0000-0000-0000-000000000000")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
