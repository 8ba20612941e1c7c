"""Support routes (issue #31): POST/GET /v1/resolutions, POST /v1/handoff,
GET /v1/subjects/{id}/health and /sla, per tenant, on both databases."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.compile.support import ResolutionStatus
from memsync.runtime.storage import Store
from memsync.runtime.support.resolutions import Resolutions
from tests.helpers import API_NOW, LOOPBACK, build_app, compile_subject, say

START = API_NOW
"""When the support sessions begin (the fake clock starts there too)."""


def message(
    client: TestClient,
    key: str,
    session: str,
    role: str,
    text: str,
    minutes: float,
    subject: str = "ana",
) -> None:
    """A support message of ``session``, ``minutes`` after START."""
    response = client.post(
        "/v1/episodes",
        json={
            "subject_id": subject,
            "source": "zendesk",
            "type": "comment",
            "session_id": session,
            "payload": {"messages": [{"role": role, "content": text}]},
            "idempotency_key": key,
            "occurred_at": (START + timedelta(minutes=minutes)).isoformat(),
        },
    )
    assert response.status_code in (200, 201), response.text


def resolve(client: TestClient, session: str, status: str, **fields: Any) -> dict[str, Any]:
    response = client.post(
        "/v1/resolutions",
        json={"subject_id": "ana", "session_id": session, "status": status, **fields},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def get(client: TestClient, url: str, **params: Any) -> Any:
    response = client.get(url, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def two_billing_sessions(client: TestClient) -> None:
    """s1: asked, answered after 3 minutes; s2 a day later: the same issue, unanswered."""
    message(client, "t1", "s1", "user", "My invoice total is wrong this month", 0)
    message(client, "t2", "s1", "agent", "I re-ran the billing export for you", 3)
    message(client, "t3", "s2", "user", "My invoice total is wrong again", 24 * 60)


# -- resolutions -----------------------------------------------------------------------


def test_a_resolution_is_upserted_per_session_keeping_its_id_and_what_was_left_out(
    client: TestClient, clock: FakeClock
) -> None:
    opened = resolve(client, "s1", "open", resolution_summary="looking", metadata={"ticket": 7})
    assert (opened["status"], opened["resolved_at"]) == ("open", None)

    clock.advance(timedelta(hours=2))
    resolved = resolve(client, "s1", "resolved")

    assert resolved["id"] == opened["id"]
    assert resolved["created_at"] == opened["created_at"]
    assert resolved["updated_at"] == clock.now().isoformat()
    assert resolved["resolved_at"] == clock.now().isoformat()
    assert (resolved["resolution_summary"], resolved["metadata"]) == ("looking", {"ticket": 7})

    clock.advance(timedelta(hours=1))
    again = resolve(client, "s1", "resolved", resolution_summary="export fixed")
    assert again["resolved_at"] == resolved["resolved_at"]  # still resolved since then
    assert again["resolution_summary"] == "export fixed"
    assert resolve(client, "s1", "unresolved")["resolved_at"] is None


def test_resolutions_are_listed_newest_update_first_by_status_and_per_tenant(
    client: TestClient, clock: FakeClock
) -> None:
    resolve(client, "s1", "resolved")
    clock.advance(timedelta(minutes=1))
    resolve(client, "s2", "open")
    clock.advance(timedelta(minutes=1))
    resolve(client, "s3", "resolved")

    listed = get(client, "/v1/resolutions", subject_id="ana")
    assert [r["session_id"] for r in listed] == ["s3", "s2", "s1"]
    resolved = get(client, "/v1/resolutions", subject_id="ana", status="resolved")
    assert [r["session_id"] for r in resolved] == ["s3", "s1"]
    assert [
        r["session_id"] for r in get(client, "/v1/resolutions", subject_id="ana", limit=1, offset=1)
    ] == ["s2"]

    other = client.get(
        "/v1/resolutions", params={"subject_id": "ana"}, headers={"X-Tenant-ID": "globex"}
    )
    assert other.status_code == 200
    assert other.json() == []
    refused = client.post(
        "/v1/resolutions", json={"subject_id": "ana", "session_id": "s1", "status": "closed"}
    )
    assert refused.status_code == 422


@given(
    writes=st.lists(
        st.tuples(
            st.sampled_from(["s1", "s2", "s3"]), st.sampled_from(["open", "resolved", "unresolved"])
        ),
        min_size=1,
        max_size=8,
    )
)
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_any_sequence_of_upserts_leaves_one_record_per_session_with_the_last_status(
    store: Store, writes: list[tuple[str, str]]
) -> None:
    subject = f"prop-{abs(hash(tuple(writes)))}"
    with TestClient(build_app(store, clock=FakeClock(API_NOW)), base_url=LOOPBACK) as client:
        for session, status in writes:
            response = client.post(
                "/v1/resolutions",
                json={"subject_id": subject, "session_id": session, "status": status},
            )
            assert response.status_code == 200
        listed = get(client, "/v1/resolutions", subject_id=subject)
        client.delete(f"/v1/subjects/{subject}")
    last = dict(writes)
    assert {r["session_id"]: r["status"] for r in listed} == last
    assert len(listed) == len(last)


def test_concurrent_writers_of_one_session_leave_one_record(store: Store) -> None:
    resolutions = Resolutions(store, FakeClock(API_NOW))
    statuses = [ResolutionStatus.OPEN, ResolutionStatus.RESOLVED, ResolutionStatus.UNRESOLVED] * 4
    start = threading.Barrier(len(statuses))

    def write(status: ResolutionStatus) -> uuid.UUID:
        start.wait(timeout=30)
        return resolutions.record("acme", "ana", "s1", status).id

    with ThreadPoolExecutor(max_workers=len(statuses)) as pool:
        ids = set(pool.map(write, statuses))

    [stored] = resolutions.list("acme", "ana")
    assert ids == {stored.id}


def test_deleting_a_subject_deletes_its_resolutions(client: TestClient) -> None:
    resolve(client, "s1", "resolved")
    assert client.delete("/v1/subjects/ana").status_code == 200
    assert get(client, "/v1/resolutions", subject_id="ana") == []


# -- health ----------------------------------------------------------------------------


def test_an_unknown_subject_is_healthy_with_no_factors_and_no_sessions(client: TestClient) -> None:
    assert get(client, "/v1/subjects/nobody/health") == {
        "subject_id": "nobody",
        "score": 100,
        "state": "healthy",
        "factors": [],
    }
    sla = get(client, "/v1/subjects/nobody/sla")
    assert (sla["total_sessions"], sla["sessions"], sla["avg_first_response_seconds"]) == (
        0,
        [],
        None,
    )


def test_health_loses_points_per_signal_and_names_each_factor(client: TestClient) -> None:
    two_billing_sessions(client)
    resolve(client, "s1", "unresolved")
    resolve(client, "s2", "open")

    health = get(client, "/v1/subjects/ana/health")

    assert {f["signal"]: f["impact"] for f in health["factors"]} == {
        "unresolved_sessions": -15,
        "open_sessions": -5,
        "repeated_issues": -10,
    }
    assert (health["score"], health["state"]) == (70, "healthy")

    message(client, "t4", "s3", "user", "Invoice total wrong this month again", 3 * 24 * 60)
    resolve(client, "s3", "unresolved")
    health = get(client, "/v1/subjects/ana/health")
    assert (health["score"], health["state"]) == (45, "watch")


def test_memories_nothing_asserted_for_180_days_count_as_stale(client: TestClient) -> None:
    say(client, "old", "I prefer tea.", -300)  # 330 days before the sessions begin
    message(client, "t1", "s1", "user", "I prefer green tea.", 0)
    compile_subject(client)
    fresh = get(client, "/v1/subjects/ana/health")

    stale = [f for f in fresh["factors"] if f["signal"] == "stale_memories"]
    assert len(stale) == 1
    assert stale[0]["detail"].endswith("not asserted for 180 days")

    say(client, "new", "I prefer tea.", 29, subject="bo")
    compile_subject(client, "bo")
    assert get(client, "/v1/subjects/bo/health")["factors"] == []


def test_a_subject_id_with_a_slash_reaches_its_health(client: TestClient) -> None:
    message(client, "t1", "s1", "user", "hello", 0, subject="repo:acme/api")
    resolve_body = {"subject_id": "repo:acme/api", "session_id": "s1", "status": "unresolved"}
    assert client.post("/v1/resolutions", json=resolve_body).status_code == 200
    health = get(client, "/v1/subjects/repo:acme/api/health")
    assert health["subject_id"] == "repo:acme/api"
    assert health["score"] == 85
    assert get(client, "/v1/subjects/health", subject_id="repo:acme/api") == health


def test_the_query_forms_take_an_id_a_client_would_rewrite_in_a_path(client: TestClient) -> None:
    odd = "a/../b"
    message(client, "t1", "s1", "user", "hello", 0, subject=odd)
    sla = get(client, "/v1/subjects/sla", subject_id=odd, resolution_threshold_hours=1)
    assert (sla["subject_id"], sla["total_sessions"]) == (odd, 1)
    assert get(client, "/v1/subjects/health", subject_id=odd)["subject_id"] == odd


# -- SLA -------------------------------------------------------------------------------


def test_sla_measures_first_response_and_resolution_per_session(
    client: TestClient, clock: FakeClock
) -> None:
    two_billing_sessions(client)
    clock.set(START + timedelta(hours=2))
    resolve(client, "s1", "resolved")

    sla = get(client, "/v1/subjects/ana/sla", first_response_threshold_minutes=5)

    first, second = sla["sessions"]
    assert first["session_id"] == "s1"
    assert (first["status"], first["first_response_seconds"]) == ("resolved", 180.0)
    assert (first["resolution_seconds"], first["resolution_breached"]) == (7200.0, False)
    assert first["first_response_breached"] is False
    # s2 is still waiting, measured up to the state's last change: its own message.
    assert (second["status"], second["first_response_seconds"]) == ("open", None)
    assert (second["open_duration_seconds"], second["first_response_breached"]) == (0.0, False)
    assert (sla["total_sessions"], sla["resolved_sessions"], sla["open_sessions"]) == (2, 1, 1)
    assert sla["avg_first_response_seconds"] == 180.0

    strict = get(
        client,
        "/v1/subjects/ana/sla",
        first_response_threshold_minutes=2,
        resolution_threshold_hours=1,
    )
    assert (strict["first_response_breach_count"], strict["resolution_breach_count"]) == (1, 1)
    assert (
        client.get("/v1/subjects/ana/sla", params={"resolution_threshold_hours": 0}).status_code
        == 422
    )


# -- handoff ---------------------------------------------------------------------------


def handoff(client: TestClient, **fields: Any) -> Any:
    body = {"subject_id": "ana", "session_id": "s2", "reason": "billing escalation", **fields}
    response = client.post("/v1/handoff", json=body)
    assert response.status_code == 200, response.text
    return response


def test_a_handoff_briefs_the_session_from_current_truth_only_and_repeats_byte_for_byte(
    client: TestClient, clock: FakeClock
) -> None:
    say(client, "c1", "I live in Lisbon and I prefer tea.", 1)
    say(client, "c2", "I moved to Porto.", 5)
    compile_subject(client)
    two_billing_sessions(client)
    message(client, "t5", "s2", "agent", "Escalating to billing", 24 * 60 + 30)
    resolve(client, "s1", "resolved", resolution_summary="export fixed")
    clock.advance(timedelta(days=3))

    first = handoff(client)
    brief = first.json()

    assert brief["active_issue"] == "My invoice total is wrong again"
    assert brief["attempted_steps"] == ["Escalating to billing"]
    assert "Lives in Porto" in brief["customer_summary"]
    assert [item["summary"] for item in brief["resolution_history"]] == ["export fixed"]
    assert "Lisbon" not in first.text  # superseded: neither the memory nor its episode
    # The state's latest change (the last message), not the clock three days on.
    assert brief["generated_at"] == (START + timedelta(days=1, minutes=30)).isoformat()
    assert brief["health_score"] == get(client, "/v1/subjects/ana/health")["score"]
    assert len(brief["provenance"]["resolution_ids"]) == 1
    assert handoff(client).content == first.content


@pytest.mark.parametrize("max_tokens", [30, 60, 120])
def test_a_handoff_stays_within_its_token_budget(client: TestClient, max_tokens: int) -> None:
    two_billing_sessions(client)
    for index in range(20):
        message(
            client,
            f"x{index}",
            "s2",
            "agent",
            f"Tried step number {index} on the invoice",
            24 * 60 + index + 1,
        )

    brief = handoff(client, max_tokens=max_tokens).json()
    full = handoff(client, max_tokens=5000).json()

    assert brief["token_estimate"] <= max_tokens
    assert brief["attempted_steps"] == full["attempted_steps"][: len(brief["attempted_steps"])]
    assert all(step in brief["handoff_notes"] for step in brief["attempted_steps"])


def test_a_handoff_of_an_unknown_subject_is_an_empty_brief(client: TestClient) -> None:
    brief = client.post("/v1/handoff", json={"subject_id": "nobody", "session_id": "s1"}).json()

    assert (brief["reason"], brief["active_issue"], brief["key_facts"]) == ("escalation", "", [])
    assert (brief["health_score"], brief["generated_at"]) == (100, "1970-01-01T00:00:00+00:00")
    assert brief["token_estimate"] > 0  # the header
