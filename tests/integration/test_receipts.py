"""Receipts: POST /v1/context with emit_receipt records what was served, and
GET /v1/receipts/{id}, GET /v1/receipts and POST /v1/receipts/{id}/replay read it back
and replay it — exactly (the same bytes, or an honest ``reproduced: false``) or against
today's store."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.episode import canonical_json
from memsync.runtime.app.config import ApiKey, ApiSettings
from memsync.runtime.storage import Store
from tests.helpers import API_NOW, LOOPBACK, build_app, compile_subject, say

TASK = {"subject_id": "ana", "task": "plan a trip", "max_tokens": 400}


def served(client: TestClient, **request: Any) -> Any:
    response = client.post("/v1/context", json={**TASK, "emit_receipt": True, **request})
    assert response.status_code == 200, response.text
    return response


def receipt(client: TestClient, receipt_id: str) -> dict[str, Any]:
    response = client.get(f"/v1/receipts/{receipt_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def replay(client: TestClient, receipt_id: str, mode: str | None = None) -> dict[str, Any]:
    body = {"mode": mode} if mode is not None else None
    response = client.post(f"/v1/receipts/{receipt_id}/replay", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def lisbon_then_berlin(client: TestClient, clock: FakeClock) -> None:
    say(client, "m1", "I live in Lisbon and I work at Acme.", 1)
    say(client, "m2", "I'm in Berlin this week.", 2)
    compile_subject(client)
    clock.advance(timedelta(minutes=1))


def test_a_receipt_records_the_request_the_as_of_what_went_in_and_the_hash_of_the_bytes(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_berlin(client, clock)

    response = served(client, query_id="q-1", task_id="t-1")
    bundle = response.json()
    stored = receipt(client, bundle["receipt_id"])

    assert bundle["receipt_emitted"] is True
    assert stored["context_hash"] == hashlib.sha256(response.content).hexdigest()
    assert stored["output"] == {
        "context_hash": stored["context_hash"],
        "token_estimate": bundle["token_estimate"],
    }
    assert stored["as_of"] == bundle["provenance"]["as_of"]
    assert stored["created_at"] == clock.now().isoformat()
    assert (stored["tenant_id"], stored["subject_id"], stored["task"]) == (
        "default",
        "ana",
        "plan a trip",
    )
    assert stored["request"] == {
        "subject_id": "ana",
        "task": "plan a trip",
        "max_tokens": 400,
        "as_of": None,
        "layout": "memsync",
    }
    assert (stored["mode"], stored["query_id"], stored["task_id"]) == ("retrieval", "q-1", "t-1")
    scores = bundle["provenance"]["memories"]
    memories = [entry for entry in stored["selected_entries"] if "memory_id" in entry]
    assert [entry["memory_id"] for entry in memories] == [
        memory["id"] for memory in (*bundle["facts"], *bundle["procedures"])
    ]
    assert {entry["memory_id"]: entry["score"] for entry in memories} == {
        memory_id: entry["score"] for memory_id, entry in scores.items()
    }
    assert [
        entry["episode_id"] for entry in stored["selected_entries"] if "episode_id" in entry
    ] == (bundle["provenance"]["episode_ids"])


def test_without_emit_receipt_the_bundle_is_what_it_was_and_nothing_is_recorded(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_berlin(client, clock)

    plain = client.post("/v1/context", json=TASK)
    explicit = client.post("/v1/context", json={**TASK, "emit_receipt": False})

    assert plain.content == explicit.content
    assert "receipt_id" not in plain.json()
    assert client.get("/v1/receipts", params={"subject_id": "ana"}).json()["receipts"] == []


def test_an_exact_replay_gives_the_same_bytes_after_later_ingests_and_compiles(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_berlin(client, clock)
    original = served(client)
    receipt_id = original.json()["receipt_id"]

    clock.advance(timedelta(hours=1))
    say(client, "m3", "I'm in Madrid this week.", 20)  # supersedes Berlin
    say(client, "m4", "I moved to Porto.", 21)  # supersedes Lisbon
    compile_subject(client)
    clock.advance(timedelta(hours=1))
    current = served(client).json()
    answer = replay(client, receipt_id, "exact")

    assert "Madrid" in current["assembled_context"]  # the store did change
    assert answer["reproduced"] is True
    assert answer["diff"]["context_hash"] == {
        "original": receipt(client, receipt_id)["context_hash"],
        "replay": receipt(client, receipt_id)["context_hash"],
        "changed": False,
    }
    assert canonical_json(answer["bundle"]).encode() == original.content
    assert answer["replay_receipt_id"] is None  # nothing new was served


def test_an_exact_replay_of_a_bundle_asked_as_of_a_past_moment(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_berlin(client, clock)
    then = clock.now()
    clock.advance(timedelta(hours=1))
    say(client, "m3", "I'm in Madrid this week.", 20)
    compile_subject(client)
    original = served(client, as_of=then.isoformat())

    answer = replay(client, original.json()["receipt_id"], "exact")

    assert receipt(client, original.json()["receipt_id"])["request"]["as_of"] == then.isoformat()
    assert "Berlin" in original.json()["assembled_context"]
    assert answer["reproduced"] is True
    assert canonical_json(answer["bundle"]).encode() == original.content


def test_an_exact_replay_says_so_when_the_store_no_longer_holds_what_it_showed(
    client: TestClient, clock: FakeClock
) -> None:
    # Forgetting a connector deletes the memories resting only on its episodes: what
    # was served cannot be built again, and the replay must not pretend otherwise.
    client.post(
        "/v1/episodes",
        json={
            "subject_id": "ana",
            "source": "chat",
            "type": "message",
            "payload": {"messages": [{"role": "user", "content": "I live in Lisbon."}]},
            "idempotency_key": "f1",
            "provenance": {"connector": "chat-a"},
            "occurred_at": (API_NOW - timedelta(days=3)).isoformat(),
        },
    )
    compile_subject(client)
    clock.advance(timedelta(minutes=1))
    original = served(client)
    clock.advance(timedelta(minutes=1))
    assert client.delete("/v1/connectors/chat-a/data").status_code == 200

    answer = replay(client, original.json()["receipt_id"], "exact")

    assert answer["reproduced"] is False
    assert answer["diff"]["context_hash"]["changed"] is True
    assert canonical_json(answer["bundle"]).encode() != original.content
    assert "Lisbon" not in answer["bundle"]["assembled_context"]
    assert answer["diff"]["selected_entries"]["removed"]  # what went missing is named


def test_an_exact_replay_survives_a_later_backfill_of_older_records(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_berlin(client, clock)
    original = served(client)
    clock.advance(timedelta(hours=1))
    # A backfill reads older history: Ana had said where she lived before, too.
    say(client, "m0", "I live in Lisbon.", 0)
    compile_subject(client)
    clock.advance(timedelta(hours=1))

    answer = replay(client, original.json()["receipt_id"], "exact")

    assert answer["reproduced"] is True
    assert canonical_json(answer["bundle"]).encode() == original.content


def test_a_current_replay_is_todays_bundle_with_what_came_and_went_and_a_receipt_of_its_own(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_berlin(client, clock)
    original = served(client).json()
    before = receipt(client, original["receipt_id"])
    clock.advance(timedelta(hours=1))
    say(client, "m3", "I'm in Madrid this week.", 20)
    compile_subject(client)
    clock.advance(timedelta(hours=1))
    today = client.post("/v1/context", json=TASK).json()

    answer = replay(client, original["receipt_id"])  # current is the default
    new = receipt(client, answer["replay_receipt_id"])

    assert answer["mode"] == "current"
    assert answer["reproduced"] is False
    assert {k: v for k, v in answer["bundle"].items() if not k.startswith("receipt_")} == today
    assert answer["bundle"]["receipt_id"] == answer["replay_receipt_id"]
    gone = {entry.get("memory_id") for entry in answer["diff"]["selected_entries"]["removed"]}
    came = {entry.get("memory_id") for entry in answer["diff"]["selected_entries"]["added"]}
    berlin = [f["id"] for f in original["facts"] if f["content"] == "Currently in Berlin"]
    madrid = [f["id"] for f in today["facts"] if f["content"] == "Currently in Madrid"]
    assert len(berlin) == len(madrid) == 1
    assert set(berlin) <= gone
    assert set(madrid) <= came
    assert (new["mode"], new["parent_receipt_id"]) == ("as_of_replay", original["receipt_id"])
    assert new["context_hash"] == answer["diff"]["context_hash"]["replay"]
    assert (
        new["context_hash"] == hashlib.sha256(canonical_json(answer["bundle"]).encode()).hexdigest()
    )
    assert receipt(client, original["receipt_id"]) == before  # the original never changes


def test_a_current_replay_of_an_unchanged_store_lists_everything_as_common(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_berlin(client, clock)
    original = served(client).json()

    answer = replay(client, original["receipt_id"], "current")

    entries = answer["diff"]["selected_entries"]
    assert entries["added"] == entries["removed"] == []
    assert entries["common"] == len(receipt(client, original["receipt_id"])["selected_entries"])


def test_unknown_and_malformed_receipt_ids_are_404_and_a_bad_mode_is_422(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_berlin(client, clock)
    receipt_id = served(client).json()["receipt_id"]
    unknown = "00000000-0000-0000-0000-000000000001"

    assert client.get(f"/v1/receipts/{unknown}").status_code == 404
    assert client.get("/v1/receipts/not-a-receipt").status_code == 404
    assert client.post(f"/v1/receipts/{unknown}/replay", json={"mode": "exact"}).status_code == 404
    bad = client.post(f"/v1/receipts/{receipt_id}/replay", json={"mode": "sideways"})
    assert bad.status_code == 422
    assert bad.json()["error"]["details"][0]["field"] == "mode"
    wrong_type = client.post("/v1/context", json={**TASK, "emit_receipt": "yes"})
    assert wrong_type.status_code == 422


def test_receipts_are_per_tenant_and_another_tenants_id_is_404(store: Store) -> None:
    api = ApiSettings(keys=[ApiKey(name="any", key="k", tenants=["*"])])
    with TestClient(build_app(store, api), base_url=LOOPBACK) as client:
        acme = {"X-API-Key": "k", "X-Tenant-ID": "acme"}
        globex = {"X-API-Key": "k", "X-Tenant-ID": "globex"}
        bundle = client.post(
            "/v1/context", headers=acme, json={**TASK, "emit_receipt": True}
        ).json()
        receipt_id = bundle["receipt_id"]

        assert client.get(f"/v1/receipts/{receipt_id}", headers=acme).status_code == 200
        assert client.get(f"/v1/receipts/{receipt_id}", headers=globex).status_code == 404
        assert (
            client.post(f"/v1/receipts/{receipt_id}/replay", headers=globex, json={}).status_code
            == 404
        )
        listed = client.get("/v1/receipts", headers=globex, params={"subject_id": "ana"})
        assert listed.json() == {"receipts": [], "next_cursor": None}
        assert client.get(f"/v1/receipts/{receipt_id}", headers=acme).json()["tenant_id"] == "acme"


def test_listing_is_per_subject_newest_first_within_since_and_until_a_page_at_a_time(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_berlin(client, clock)
    start = clock.now()
    ids = []
    for _ in range(5):
        ids.append(served(client).json()["receipt_id"])
        clock.advance(timedelta(minutes=1))
    client.post("/v1/context", json={**TASK, "subject_id": "bob", "emit_receipt": True})

    pages, cursor = [], None
    while True:
        params: dict[str, Any] = {"subject_id": "ana", "limit": 2}
        if cursor is not None:
            params["cursor"] = cursor
        page = client.get("/v1/receipts", params=params).json()
        pages.append([r["receipt_id"] for r in page["receipts"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    window = client.get(
        "/v1/receipts",
        params={
            "subject_id": "ana",
            "since": (start + timedelta(minutes=1)).isoformat(),
            "until": (start + timedelta(minutes=3)).isoformat(),
        },
    ).json()

    assert pages == [ids[4:2:-1], ids[2:0:-1], ids[0:1]]
    assert [r["receipt_id"] for r in window["receipts"]] == [ids[2], ids[1]]
    bad = client.get("/v1/receipts", params={"subject_id": "ana", "cursor": "nonsense!"})
    assert bad.status_code == 422
    assert bad.json()["error"]["details"][0]["field"] == "cursor"


def test_deleting_a_subject_deletes_its_receipts(client: TestClient, clock: FakeClock) -> None:
    lisbon_then_berlin(client, clock)
    receipt_id = served(client).json()["receipt_id"]
    kept = served(client, subject_id="bob").json()["receipt_id"]

    assert client.delete("/v1/subjects/ana").status_code == 200

    assert client.get(f"/v1/receipts/{receipt_id}").status_code == 404
    assert client.get(f"/v1/receipts/{kept}").status_code == 200


@pytest.mark.parametrize(
    "later",
    [
        pytest.param(("I'm in Hamburg this week.", "ana"), id="edited at the source"),
        pytest.param(("I'm in Berlin this week.", "bob"), id="moved to another subject"),
    ],
)
def test_an_exact_replay_shows_a_recent_episode_as_it_was_before_a_later_revision(
    client: TestClient, clock: FakeClock, later: tuple[str, str]
) -> None:
    say(client, "m1", "I live in Lisbon and I work at Acme.", 1)
    compile_subject(client)
    clock.advance(timedelta(minutes=1))
    say(client, "m2", "I'm in Berlin this week.", 2)  # not compiled yet: a raw episode
    clock.advance(timedelta(minutes=1))
    original = served(client)
    assert "Berlin" in original.json()["assembled_context"]
    clock.advance(timedelta(hours=1))
    text, subject = later
    say(client, "m2", text, 2, subject=subject)  # a backfill reads the record again
    compile_subject(client, subject)
    clock.advance(timedelta(hours=1))

    answer = replay(client, original.json()["receipt_id"], "exact")

    assert answer["reproduced"] is True
    assert canonical_json(answer["bundle"]).encode() == original.content


def test_an_exact_replay_still_abstains_on_a_conflict_resolved_and_opened_again_later(
    client: TestClient, clock: FakeClock
) -> None:
    say(client, "r1", "Stripe charges 3.5% + 35¢ per card payment.", 1)
    say(client, "r2", "Stripe charges 2.9% + 30¢ per card payment.", 5)
    assert compile_subject(client)["conflicts_opened"] == 1
    clock.advance(timedelta(minutes=1))
    original = served(client, task="card pricing")
    assert "onflict" in original.json()["assembled_context"]
    for subject in ("bob", "ana"):  # the record moves away (resolved), and back (reopened)
        clock.advance(timedelta(hours=1))
        say(client, "r2", "Stripe charges 2.9% + 30¢ per card payment.", 5, subject=subject)
        compile_subject(client, subject)
    [conflict] = client.get("/v1/conflicts", params={"subject_id": "ana"}).json()["conflicts"]
    assert conflict["detected_at"] == clock.now().isoformat()  # opened again, just now
    clock.advance(timedelta(hours=1))

    answer = replay(client, original.json()["receipt_id"], "exact")

    assert answer["reproduced"] is True
    assert canonical_json(answer["bundle"]).encode() == original.content
