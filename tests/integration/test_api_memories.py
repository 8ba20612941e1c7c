"""Memory endpoints: compile, search, context bundles, conflicts, inspect, timeline."""

from __future__ import annotations

from datetime import datetime, timedelta

from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from memsync.clock import FakeClock
from memsync.runtime.app.api.memories import CompileResponse
from memsync.runtime.app.config import ApiKey, ApiSettings
from memsync.runtime.storage import Store
from tests.helpers import API_NOW as NOW
from tests.helpers import LOOPBACK, build_app, compile_subject, say


def test_compile_then_compile_again_creates_nothing(client: TestClient) -> None:
    say(client, "m1", "I live in Lisbon and I work at Acme.", 1)
    first = compile_subject(client)
    second = compile_subject(client)

    assert first["memories_created"] == len(first["memories"]) > 0
    assert first["episodes_compiled"] == 1
    assert {m["content"] for m in first["memories"]} >= {"Lives in Lisbon", "Works at Acme"}
    assert second["memories_created"] == 0
    assert second["memories"] == []


def test_the_compile_answer_is_what_its_model_writes(client: TestClient) -> None:
    say(client, "m1", "I live in Lisbon and I work at Acme.", 1)
    say(client, "m2", "I'm in Berlin this week.", 2)
    say(client, "m3", "I'm in Madrid this week.", 5)
    response = client.post("/v1/memories/compile", json={"subject_id": "ana"})

    answer = TypeAdapter(CompileResponse)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert answer.dump_json(answer.validate_json(response.content)) == response.content
    assert response.json()["memories_superseded"] == 1


def test_search_finds_active_memories_by_words_and_kind(client: TestClient) -> None:
    say(client, "m1", "I live in Lisbon. I prefer green tea.", 1)
    compile_subject(client)

    found = client.get(
        "/v1/memories/search", params={"subject_id": "ana", "q": "lisbon", "kind": "profile_fact"}
    ).json()
    everything = client.get("/v1/memories/search", params={"subject_id": "ana", "q": "lisbon"})
    preferences = client.get(
        "/v1/memories/search", params={"subject_id": "ana", "kind": "preference"}
    ).json()
    assert [m["content"] for m in found["memories"]] == ["Lives in Lisbon"]
    assert all("lisbon" in m["content"].lower() for m in everything.json()["memories"])
    assert all(m["kind"] == "preference" for m in preferences["memories"])
    assert preferences["memories"]


def test_superseded_memories_never_reach_the_bundle(client: TestClient) -> None:
    say(client, "m1", "I'm in Berlin this week.", 1)
    say(client, "m2", "I'm in Madrid this week.", 5)
    compile_subject(client)

    bundle = client.post(
        "/v1/context", json={"subject_id": "ana", "task": "book a hotel", "max_tokens": 500}
    ).json()
    contents = [fact["content"] for fact in bundle["facts"]]
    assert "Currently in Madrid" in contents
    assert "Currently in Berlin" not in contents
    assert "Currently in Berlin" not in bundle["assembled_context"]


def test_bundles_are_byte_identical_for_the_same_state_and_as_of(
    client: TestClient, clock: FakeClock
) -> None:
    say(client, "m1", "I live in Lisbon and I work at Acme.", 1)
    say(client, "m2", "I'm in Berlin this week.", 2)
    compile_subject(client)
    request = {
        "subject_id": "ana",
        "task": "plan a trip",
        "max_tokens": 400,
        "as_of": (NOW + timedelta(minutes=5)).isoformat(),
    }
    first = client.post("/v1/context", json=request)
    clock.advance(timedelta(days=3))  # the wall clock must not matter when as_of is given
    second = client.post("/v1/context", json=request)

    assert first.status_code == 200
    assert first.content == second.content
    assert "Lives in Lisbon" in first.json()["assembled_context"]


def test_as_of_shows_the_store_as_it_stood(client: TestClient, clock: FakeClock) -> None:
    say(client, "m1", "I'm in Berlin this week.", 1)
    compile_subject(client)
    before_change = clock.now()
    clock.advance(timedelta(hours=1))
    say(client, "m2", "I'm in Madrid this week.", 5)
    compile_subject(client)

    def current(as_of: datetime) -> list[str]:
        bundle = client.post(
            "/v1/context", json={"subject_id": "ana", "task": "trip", "as_of": as_of.isoformat()}
        ).json()
        return [f["content"] for f in bundle["facts"] if f["kind"] == "current_state"]

    assert current(before_change) == ["Currently in Berlin"]
    assert current(clock.now()) == ["Currently in Madrid"]


def test_flagged_conflicts_make_the_bundle_abstain_until_resolved(client: TestClient) -> None:
    say(client, "r1", "Stripe charges 3.5% + 35¢ per card payment.", 1)
    say(client, "r2", "Stripe charges 2.9% + 30¢ per card payment.", 5)
    assert compile_subject(client)["conflicts_opened"] == 1

    [conflict] = client.get("/v1/conflicts", params={"subject_id": "ana"}).json()["conflicts"]
    bundle = client.post("/v1/context", json={"subject_id": "ana", "task": "pricing"}).json()
    assert "3.5%" not in " ".join(f["content"] for f in bundle["facts"])
    assert "onflict" in bundle["assembled_context"]

    keep = conflict["memory_ids"][1]
    resolved = client.post(f"/v1/conflicts/{conflict['id']}/resolve", json={"keep_memory_id": keep})
    assert resolved.status_code == 200
    assert resolved.json()["superseded_memory_id"] == conflict["memory_ids"][0]
    assert client.get("/v1/conflicts", params={"subject_id": "ana"}).json()["conflicts"] == []
    again = client.post(f"/v1/conflicts/{conflict['id']}/resolve", json={"keep_memory_id": keep})
    assert again.status_code == 404

    report = client.get("/v1/subjects/ana/inspect").json()
    assert [s["rule"] for s in report["supersessions"]] == ["manual"]
    assert len(report["memories"]["superseded"]) == 1


def test_resolving_with_a_memory_outside_the_conflict_is_422(client: TestClient) -> None:
    say(client, "r1", "Stripe charges 3.5% + 35¢ per card payment.", 1)
    say(client, "r2", "Stripe charges 2.9% + 30¢ per card payment.", 5)
    compile_subject(client)
    [conflict] = client.get("/v1/conflicts").json()["conflicts"]
    response = client.post(
        f"/v1/conflicts/{conflict['id']}/resolve",
        json={"keep_memory_id": "00000000-0000-0000-0000-000000000001"},
    )
    assert response.status_code == 422


def test_timeline_subjects_and_delete_count_memories(client: TestClient) -> None:
    say(client, "m1", "I live in Lisbon.", 1)
    compiled = compile_subject(client)

    timeline = client.get("/v1/timeline", params={"subject_id": "ana"}).json()
    subjects = client.get("/v1/subjects").json()["subjects"]
    deleted = client.delete("/v1/subjects/ana").json()

    assert {m["id"] for m in timeline["memories"]} == {m["id"] for m in compiled["memories"]}
    assert timeline["memories_has_more"] is False
    assert subjects == [{"subject_id": "ana", "episode_count": 1, "memory_count": 2}]
    assert deleted == {"subject_id": "ana", "episodes_deleted": 1, "memories_deleted": 2}
    assert client.get("/v1/subjects/ana/inspect").json()["memories"]["active"] == []


def test_memory_endpoints_are_tenant_scoped(store: Store) -> None:
    api = ApiSettings(keys=[ApiKey(name="any", key="k", tenants=["*"])])
    with TestClient(build_app(store, api), base_url=LOOPBACK) as client:
        acme = {"X-API-Key": "k", "X-Tenant-ID": "acme"}
        globex = {"X-API-Key": "k", "X-Tenant-ID": "globex"}
        client.post(
            "/v1/episodes",
            headers=acme,
            json={
                "subject_id": "ana",
                "source": "chat",
                "type": "m",
                "payload": {"text": "I live in Lisbon."},
                "idempotency_key": "1",
            },
        )
        assert (
            client.post("/v1/memories/compile", headers=globex, json={"subject_id": "ana"}).json()[
                "memories_created"
            ]
            == 0
        )
        assert (
            client.post("/v1/memories/compile", headers=acme, json={"subject_id": "ana"}).json()[
                "memories_created"
            ]
            > 0
        )
        search = client.get("/v1/memories/search", headers=globex, params={"subject_id": "ana"})
        assert search.json()["memories"] == []
        bundle = client.post("/v1/context", headers=globex, json={"subject_id": "ana", "task": "x"})
        assert bundle.json()["facts"] == []
        inspect = client.get("/v1/subjects/ana/inspect", headers=globex).json()
        assert inspect["memories"]["active"] == []
        assert inspect["episodes"] == []
