"""Valid time: ``valid_at=T`` answers what the sources say was true at T, by everything
known now — or, with ``as_of``, by what the store knew then. The worked example of
docs/concepts.md ("Two times"): Ana lives in Lisbon, then moves to Porto; later the
Porto message is deleted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.episode import canonical_json
from memsync.runtime.reading.bundles import BUNDLE_EPISODES
from tests.helpers import API_NOW, compile_subject, say

LISBON_DAY, PORTO_DAY = 1, 10
"""The days (of ``say``) the two messages occurred: each memory's valid_from."""


def day(number: int) -> datetime:
    """A moment of valid time: noon of ``say``'s day ``number``."""
    return API_NOW - timedelta(days=30 - number) + timedelta(hours=12)


BEFORE_THE_MOVE, AFTER_THE_MOVE = day(5), day(15)


@dataclass(frozen=True, slots=True)
class Moments:
    """Transaction times of the example: when the store knew only Lisbon, and when it
    had compiled the (backfilled, older) Porto message."""

    lisbon_known: datetime
    porto_known: datetime


def lisbon_then_porto(client: TestClient, clock: FakeClock) -> Moments:
    say(client, "m1", "I live in Lisbon.", LISBON_DAY)
    compile_subject(client)
    lisbon_known = clock.now()
    clock.advance(timedelta(hours=1))
    # A backfill: the move happened weeks ago, but the store learns of it only now.
    say(client, "m2", "I moved to Porto.", PORTO_DAY)
    compile_subject(client)
    porto_known = clock.now()
    clock.advance(timedelta(hours=1))
    return Moments(lisbon_known, porto_known)


def delete_the_porto_message(client: TestClient, clock: FakeClock) -> datetime:
    """Move the Porto message to another subject: under ana its memories are
    tombstoned (their source is gone). Returns the moment before it happened."""
    before = clock.now()
    clock.advance(timedelta(hours=1))
    say(client, "m2", "I moved to Porto.", PORTO_DAY, subject="bob")
    compile_subject(client, "bob")
    clock.advance(timedelta(hours=1))
    return before


def context(client: TestClient, **moments: datetime) -> Any:
    request = {"subject_id": "ana", "task": "where does ana live", "max_tokens": 400}
    response = client.post(
        "/v1/context",
        json={**request, **{name: moment.isoformat() for name, moment in moments.items()}},
    )
    assert response.status_code == 200, response.text
    return response


def lives(client: TestClient, **moments: datetime) -> list[str]:
    """Where the bundle says ana lives."""
    facts = context(client, **moments).json()["facts"]
    return [fact["content"] for fact in facts if fact["content"].startswith("Lives in")]


def search(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    query = {"subject_id": "ana", "q": "lives", **params}
    response = client.get(
        "/v1/memories/search",
        params={
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in query.items()
        },
    )
    assert response.status_code == 200, response.text
    memories: list[dict[str, Any]] = response.json()["memories"]
    return memories


def test_valid_at_before_the_move_is_lisbon_and_after_it_porto(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_porto(client, clock)
    say(client, "m3", "Flying to Madrid tomorrow.", 20)  # not compiled yet: no memory

    assert lives(client) == ["Lives in Porto"]
    assert lives(client, valid_at=BEFORE_THE_MOVE) == ["Lives in Lisbon"]
    assert lives(client, valid_at=AFTER_THE_MOVE) == ["Lives in Porto"]
    assert lives(client, valid_at=day(0)) == []  # before anything was said
    then = context(client, valid_at=BEFORE_THE_MOVE).json()
    # Neither message after it had occurred yet: nothing of them shows.
    assert "Porto" not in then["assembled_context"]
    assert "Madrid" not in then["assembled_context"]
    assert "Madrid" in context(client).json()["assembled_context"]
    assert {fact["content"] for fact in then["facts"]} == {
        "Lives in Lisbon",
        "chat message: I live in Lisbon.",
    }
    [lisbon] = [fact for fact in then["facts"] if fact["content"] == "Lives in Lisbon"]
    assert lisbon["status"] == "superseded"  # shown as it is now: held then, not now


def test_valid_at_with_as_of_before_a_backfill_and_after_it(
    client: TestClient, clock: FakeClock
) -> None:
    moments = lisbon_then_porto(client, clock)

    # Before the backfill the store knew of no move: Lisbon held, open-ended.
    assert lives(client, as_of=moments.lisbon_known, valid_at=AFTER_THE_MOVE) == ["Lives in Lisbon"]
    assert lives(client, as_of=moments.porto_known, valid_at=AFTER_THE_MOVE) == ["Lives in Porto"]
    assert lives(client, as_of=moments.porto_known, valid_at=BEFORE_THE_MOVE) == ["Lives in Lisbon"]
    both = context(client, as_of=moments.lisbon_known, valid_at=AFTER_THE_MOVE).json()
    assert both["provenance"]["as_of"] == moments.lisbon_known.isoformat()
    assert both["provenance"]["valid_at"] == AFTER_THE_MOVE.isoformat()


def test_search_with_valid_at_finds_what_held_then_whatever_its_status_now(
    client: TestClient, clock: FakeClock
) -> None:
    moments = lisbon_then_porto(client, clock)

    [then] = search(client, valid_at=BEFORE_THE_MOVE)
    assert (then["content"], then["status"]) == ("Lives in Lisbon", "superseded")
    assert [m["content"] for m in search(client, valid_at=AFTER_THE_MOVE)] == ["Lives in Porto"]
    assert search(client, valid_at=day(0)) == []
    known_then = search(client, valid_at=AFTER_THE_MOVE, as_of=moments.lisbon_known)
    assert [(m["content"], m["status"]) for m in known_then] == [("Lives in Lisbon", "active")]


def test_a_tombstoned_memory_never_holds_but_as_of_before_its_deletion_it_did(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_porto(client, clock)
    before = delete_the_porto_message(client, clock)

    # Nothing known now says ana moved: Lisbon holds, before the move and after it.
    for moment in (BEFORE_THE_MOVE, AFTER_THE_MOVE):
        assert lives(client, valid_at=moment) == ["Lives in Lisbon"]
        assert [m["content"] for m in search(client, valid_at=moment)] == ["Lives in Lisbon"]
    bundle = context(client, valid_at=AFTER_THE_MOVE).json()
    assert "Porto" not in bundle["assembled_context"]
    # What the store said before the deletion: she had moved.
    assert lives(client, as_of=before, valid_at=AFTER_THE_MOVE) == ["Lives in Porto"]


def test_a_bundle_with_valid_at_is_dated_by_the_store_and_built_again_by_that_as_of(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_porto(client, clock)

    plain = context(client)
    asked = context(client, valid_at=BEFORE_THE_MOVE)
    as_of = datetime.fromisoformat(asked.json()["provenance"]["as_of"])
    again = context(client, as_of=as_of, valid_at=BEFORE_THE_MOVE)

    assert "valid_at" not in plain.json()["provenance"]  # only when asked for
    assert asked.json()["provenance"]["as_of"] == plain.json()["provenance"]["as_of"]
    assert again.content == asked.content
    assert asked.content == canonical_json(asked.json()).encode()


def test_a_receipt_keeps_valid_at_and_replays_the_same_bundle(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_porto(client, clock)
    request = {"subject_id": "ana", "task": "where does ana live", "emit_receipt": True}
    original = client.post("/v1/context", json={**request, "valid_at": BEFORE_THE_MOVE.isoformat()})
    receipt_id = original.json()["receipt_id"]
    plain = client.post("/v1/context", json=request).json()

    stored = client.get(f"/v1/receipts/{receipt_id}").json()
    exact = client.post(f"/v1/receipts/{receipt_id}/replay", json={"mode": "exact"}).json()
    current = client.post(f"/v1/receipts/{receipt_id}/replay", json={"mode": "current"}).json()

    assert stored["request"]["valid_at"] == BEFORE_THE_MOVE.isoformat()
    assert "valid_at" not in client.get(f"/v1/receipts/{plain['receipt_id']}").json()["request"]
    assert exact["reproduced"] is True
    assert canonical_json(exact["bundle"]).encode() == original.content
    assert "Lives in Lisbon" in current["bundle"]["assembled_context"]  # same question today
    assert current["bundle"]["provenance"]["valid_at"] == BEFORE_THE_MOVE.isoformat()


def test_the_inspector_with_valid_at_names_the_memories_that_held_then(
    client: TestClient, clock: FakeClock
) -> None:
    lisbon_then_porto(client, clock)
    delete_the_porto_message(client, clock)

    plain = client.get("/v1/subjects/ana/inspect").json()
    report = client.get(
        "/v1/subjects/inspect", params={"subject_id": "ana", "valid_at": AFTER_THE_MOVE.isoformat()}
    ).json()

    assert "held" not in plain
    assert "valid_at" not in plain
    contents = {m["id"]: m["content"] for ms in report["memories"].values() for m in ms}
    # The Porto memories are tombstoned: after the move only Lisbon is known to hold.
    assert sorted(contents[memory_id] for memory_id in report["held"]) == [
        "Lives in Lisbon",
        "chat message: I live in Lisbon.",
    ]
    assert report["valid_at"] == AFTER_THE_MOVE.isoformat()
    before = client.get("/v1/subjects/ana/inspect", params={"valid_at": day(0).isoformat()}).json()
    assert before["held"] == []


def test_the_episodes_of_a_bundle_with_valid_at_are_the_newest_that_had_occurred_then(
    client: TestClient, clock: FakeClock
) -> None:
    say(client, "m0", "Booked the dentist.", 3)
    # More messages after it than a bundle considers (none compiled: no memory hides one).
    for number in range(BUNDLE_EPISODES + 1):
        say(client, f"later-{number}", f"Note number {number}.", 20)

    then = context(client, valid_at=day(5)).json()

    assert [e["payload"]["messages"][0]["content"] for e in then["episodes"]] == [
        "Booked the dentist."
    ]
    assert "dentist" not in context(client).json()["assembled_context"]


@pytest.mark.parametrize("moment", ["yesterday", "2026-13-01T00:00:00Z"])
def test_valid_at_that_is_not_an_iso_moment_is_422_naming_it(
    client: TestClient, moment: object
) -> None:
    body = {"subject_id": "ana", "task": "t", "valid_at": moment}
    bad_body = client.post("/v1/context", json=body)
    bad_query = client.get("/v1/memories/search", params={"subject_id": "ana", "valid_at": moment})

    assert bad_body.status_code == bad_query.status_code == 422
    assert [p["field"] for p in bad_body.json()["error"]["details"]] == ["valid_at"]
    assert [p["field"] for p in bad_query.json()["error"]["details"]] == ["query.valid_at"]


def test_valid_at_without_a_zone_is_utc_as_as_of_is(client: TestClient, clock: FakeClock) -> None:
    lisbon_then_porto(client, clock)
    naive = BEFORE_THE_MOVE.replace(tzinfo=None).isoformat()

    response = client.post(
        "/v1/context", json={"subject_id": "ana", "task": "where does ana live", "valid_at": naive}
    )

    assert response.status_code == 200, response.text
    assert response.content == context(client, valid_at=BEFORE_THE_MOVE).content
