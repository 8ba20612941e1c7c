"""Transaction time kept: every change to a memory is a new row of its history, so
``as_of=T`` shows what the store said at T, whatever changed later."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from memsync.clock import FakeClock
from memsync.runtime.app.cli import app as cli_app
from memsync.runtime.storage import Store, upgrade
from memsync.runtime.storage.migrate import downgrade
from tests.helpers import API_NOW, compile_subject, say


def current_state(client: TestClient, as_of: datetime | None = None) -> list[str]:
    request: dict[str, Any] = {"subject_id": "ana", "task": "where is ana this week"}
    if as_of is not None:
        request["as_of"] = as_of.isoformat()
    bundle = client.post("/v1/context", json=request).json()
    return [fact["content"] for fact in bundle["facts"] if fact["kind"] == "current_state"]


def history(store: Store) -> list[tuple[str, str]]:
    with store.read() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT m.content, h.status FROM memory_history AS h JOIN memories AS m "
                "ON m.tenant_id = h.tenant_id AND m.id = h.memory_id "
                "ORDER BY h.recorded_at, m.content"
            )
        )
        return [(content, status) for content, status in rows]


def berlin_then_madrid(client: TestClient, clock: FakeClock) -> datetime:
    """Ana is in Berlin, compiled; an hour later in Madrid, compiled (Madrid supersedes
    Berlin). Returns the moment the store knew only Berlin."""
    say(client, "m1", "I'm in Berlin this week.", 1)
    compile_subject(client)
    berlin_known = clock.now()
    clock.advance(timedelta(hours=1))
    say(client, "m2", "I'm in Madrid this week.", 5)
    compile_subject(client)
    return berlin_known


def test_a_memory_reinstated_later_is_shown_superseded_as_of_a_moment_between(
    client: TestClient, clock: FakeClock, store: Store
) -> None:
    say(client, "m1", "I'm in Berlin this week.", 1)
    compile_subject(client)
    clock.advance(timedelta(hours=1))
    say(client, "m2", "I'm in Madrid this week.", 5)
    compile_subject(client)  # Madrid supersedes Berlin
    superseded = clock.now()
    clock.advance(timedelta(hours=1))
    say(client, "m2", "I'm in Madrid this week.", 5, subject="bob")  # the record moves away
    compile_subject(client, "bob")  # Madrid retired in ana's memories: Berlin is back
    clock.advance(timedelta(hours=1))

    assert current_state(client) == ["Currently in Berlin"]
    assert current_state(client, superseded) == ["Currently in Madrid"]
    assert current_state(client, superseded - timedelta(minutes=1)) == ["Currently in Berlin"]


def test_every_change_of_a_memory_is_a_new_row_and_no_row_is_rewritten(
    client: TestClient, clock: FakeClock, store: Store
) -> None:
    say(client, "m1", "I'm in Berlin this week.", 1)
    compile_subject(client)
    first = history(store)
    clock.advance(timedelta(hours=1))
    say(client, "m2", "I'm in Madrid this week.", 5)
    compile_subject(client)
    clock.advance(timedelta(hours=1))
    compile_subject(client)  # nothing new: nothing recorded

    rows = history(store)

    assert rows[: len(first)] == first
    assert ("Currently in Berlin", "active") in first
    assert rows[len(first) :] == sorted(
        [
            ("Currently in Berlin", "superseded"),
            ("Currently in Madrid", "active"),
            ("chat message: I'm in Madrid this week.", "active"),
        ]
    )


def test_0015_starts_each_memorys_history_with_what_as_of_assumed_before(
    client: TestClient, clock: FakeClock, store: Store
) -> None:
    say(client, "m1", "I'm in Berlin this week.", 1)
    compile_subject(client)
    clock.advance(timedelta(hours=1))
    say(client, "m2", "I'm in Madrid this week.", 5)
    compile_subject(client)
    written = history(store)
    downgrade(store, "0014")

    notes = upgrade(store)

    assert history(store) == written
    assert (
        "0015 memory history: 4 memories start their history at their creation, "
        "1 of them with their one recorded status change"
    ) in notes


def test_the_inspector_lists_a_memorys_earlier_versions_apart_from_the_current_set(
    client: TestClient, clock: FakeClock
) -> None:
    created = berlin_then_madrid(client, clock)

    report = client.get("/v1/subjects/ana/inspect").json()

    [berlin] = [m for m in report["memories"]["superseded"] if "Berlin" in m["content"]]
    [earlier] = report["history"]  # only Berlin changed; nothing else has a past
    assert earlier["memory_id"] == berlin["id"]
    assert (earlier["status"], earlier["valid_to"], earlier["status_rule"]) == (
        "active",
        None,
        None,
    )
    assert earlier["recorded_at"] == created.isoformat()
    assert earlier["replaced_at"] == clock.now().isoformat()
    assert [s["loser_memory_id"] for s in report["supersessions"]] == [berlin["id"]]


def test_search_as_of_finds_what_was_active_then_with_its_sources_then(
    client: TestClient, clock: FakeClock
) -> None:
    say(client, "m1", "I'm in Berlin this week.", 1)
    compile_subject(client)
    then = clock.now()
    clock.advance(timedelta(hours=1))
    say(client, "m2", "I'm in Madrid this week.", 5)
    say(client, "m3", "I'm in Berlin this week.", 0)  # older news, found later
    compile_subject(client)

    def search(**params: Any) -> list[dict[str, Any]]:
        response = client.get(
            "/v1/memories/search", params={"subject_id": "ana", "kind": "current_state", **params}
        )
        assert response.status_code == 200, response.text
        memories: list[dict[str, Any]] = response.json()["memories"]
        return memories

    [before] = search(as_of=then.isoformat())
    assert before["content"] == "Currently in Berlin"
    assert before["status"] == "active"
    assert len(before["source_episode_ids"]) == 1  # the later source is not shown then
    assert [m["content"] for m in search()] == ["Currently in Madrid"]
    assert search(as_of=(then - timedelta(days=1)).isoformat()) == []


def test_the_timeline_as_of_shows_episodes_at_their_revision_and_memories_in_their_status_then(
    client: TestClient, clock: FakeClock
) -> None:
    say(client, "m1", "I'm in Berlin this week.", 1)
    compile_subject(client)
    then = clock.now()
    clock.advance(timedelta(hours=1))
    say(client, "m1", "I'm in Hamburg this week.", 1)  # edited at the source
    say(client, "m2", "I'm in Madrid this week.", 5)
    compile_subject(client)

    past = client.get("/v1/timeline", params={"subject_id": "ana", "as_of": then.isoformat()})
    now = client.get("/v1/timeline", params={"subject_id": "ana"}).json()

    assert past.status_code == 200, past.text
    [episode] = past.json()["episodes"]
    assert episode["payload"]["messages"][0]["content"] == "I'm in Berlin this week."
    assert episode["revision"] == 1
    assert {m["content"]: m["status"] for m in past.json()["memories"]} == {
        "Currently in Berlin": "active",
        "chat message: I'm in Berlin this week.": "active",
    }
    assert [e["revision"] for e in now["episodes"]] == [2, 1]
    assert len(now["memories"]) > 2


def conflict_history(store: Store) -> list[tuple[Any, ...]]:
    with store.read() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                sa.text(
                    "SELECT conflict_id, recorded_at, status, detected_at, resolved_at, "
                    "chosen_memory_id FROM conflict_history ORDER BY recorded_at"
                )
            )
        ]


def test_0015_starts_each_conflicts_history_at_its_detection_and_its_resolution(
    client: TestClient, clock: FakeClock, store: Store
) -> None:
    say(client, "r1", "Stripe charges 3.5% + 35¢ per card payment.", 1)
    say(client, "r2", "Stripe charges 2.9% + 30¢ per card payment.", 5)
    compile_subject(client)
    [conflict] = client.get("/v1/conflicts").json()["conflicts"]
    clock.advance(timedelta(hours=1))
    keep = {"keep_memory_id": conflict["memory_ids"][0]}
    assert client.post(f"/v1/conflicts/{conflict['id']}/resolve", json=keep).status_code == 200
    written = conflict_history(store)
    downgrade(store, "0014")

    upgrade(store)

    assert [row[2] for row in written] == ["open", "resolved"]
    assert conflict_history(store) == written


def inspect(client: TestClient, **params: str) -> dict[str, Any]:
    response = client.get("/v1/subjects/ana/inspect", params=params)
    assert response.status_code == 200, response.text
    report: dict[str, Any] = response.json()
    return report


def test_the_inspector_as_of_a_moment_gives_the_report_it_gave_then(
    client: TestClient, clock: FakeClock
) -> None:
    say(client, "m1", "I'm in Berlin this week.", 1)
    say(client, "m2", "I work at Acme.", 2)
    compile_subject(client)
    clock.advance(timedelta(hours=1))
    then, report_then = clock.now(), inspect(client)
    clock.advance(timedelta(hours=1))
    say(client, "m3", "I'm in Madrid this week.", 5)  # supersedes Berlin
    say(client, "m4", "I'm in Berlin this week.", 0)  # older evidence: Berlin's valid_from moves
    say(client, "m2", "I work at Globex.", 2)  # a revision of a compiled record
    compile_subject(client)
    clock.advance(timedelta(hours=1))

    report_now = inspect(client)
    report_as_of = inspect(client, as_of=then.isoformat())

    assert report_now != report_then  # what changed since is not in the report of then
    assert report_as_of.pop("as_of") == then.isoformat()
    assert report_as_of == report_then
    assert report_now["history"]  # and today's lists the versions it replaced


def test_the_inspector_as_of_and_valid_at_names_what_held_by_what_the_store_knew_then(
    client: TestClient, clock: FakeClock
) -> None:
    then = berlin_then_madrid(client, clock)
    valid_at = (API_NOW - timedelta(days=20)).isoformat()  # after both messages

    def held(report: dict[str, Any]) -> list[str]:
        contents = {
            memory["id"]: memory["content"]
            for memories in report["memories"].values()
            for memory in memories
        }
        return sorted(contents[memory_id] for memory_id in report["held"])

    assert "Currently in Madrid" in held(inspect(client, valid_at=valid_at))
    assert "Currently in Berlin" not in held(inspect(client, valid_at=valid_at))
    known_then = held(inspect(client, valid_at=valid_at, as_of=then.isoformat()))
    assert "Currently in Berlin" in known_then
    assert not any("Madrid" in content for content in known_then)


def test_memsync_inspect_takes_as_of_and_valid_at_as_the_api_does(
    client: TestClient, clock: FakeClock, store: Store, tmp_path: Path
) -> None:
    then = berlin_then_madrid(client, clock)
    config = tmp_path / "memsync.yaml"
    config.write_text(f"store: {store.engine.url.render_as_string(hide_password=False)}\n")
    valid_at = (API_NOW - timedelta(days=20)).isoformat()

    def memsync(*args: str) -> Any:
        return CliRunner().invoke(cli_app, ["--config", str(config), "inspect", "ana", *args])

    printed = memsync("--as-of", then.isoformat(), "--valid-at", valid_at, "--json")
    table = memsync("--as-of", then.isoformat(), "--valid-at", valid_at)
    wrong = memsync("--as-of", "last tuesday")

    assert printed.exit_code == 0, printed.output
    assert json.loads(printed.stdout) == inspect(client, as_of=then.isoformat(), valid_at=valid_at)
    assert table.exit_code == 0, table.output
    assert f"ana as of {then.isoformat()}" in table.stdout
    assert "Madrid" not in table.stdout
    assert wrong.exit_code == 2
    assert "--as-of 'last tuesday' is not a date" in wrong.output
