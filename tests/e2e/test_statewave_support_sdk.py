"""The statewave SDK's support methods (resolutions, handoff, health, SLA), unchanged,
against a live memsync server on loopback (issue #31)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from statewave import AsyncStatewaveClient, StatewaveClient
from statewave.client import NO_RETRY

from memsync.runtime.app.config import ApiKey, ApiSettings
from memsync.runtime.storage import Store
from tests.e2e.statewave_support import API_KEY, sdk
from tests.helpers import build_app, live_server

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def base_url(store: Store) -> Iterator[str]:
    api = ApiSettings(keys=[ApiKey(name="sdk", key=API_KEY, tenants=["acme", "globex"])])
    with live_server(build_app(store, api)) as url:
        yield url


def ticket_message(session: str, role: str, text: str, minutes: int) -> dict[str, object]:
    """One message of a support session, as a ticket connector sends it (a batch item:
    the SDK's single create has no ``occurred_at``)."""
    return {
        "subject_id": "ana",
        "source": "zendesk",
        "type": "comment",
        "payload": {"messages": [{"role": role, "content": text}]},
        "session_id": session,
        "idempotency_key": f"{session}-{minutes}",
        "occurred_at": (START + timedelta(minutes=minutes)).isoformat(),
    }


def billing_sessions(client: StatewaveClient) -> None:
    """s1: asked, answered after 3 minutes; s2 a day later: the same issue, unanswered."""
    client.create_episodes_batch(
        [
            ticket_message("s1", "user", "My invoice total is wrong", 0),
            ticket_message("s1", "agent", "I re-ran the billing export", 3),
            ticket_message("s2", "user", "My invoice total is wrong again", 24 * 60),
        ]
    )


def test_sdk_creates_updates_and_lists_resolutions_per_tenant(base_url: str) -> None:
    with sdk(base_url, "acme") as client, sdk(base_url, "globex") as other:
        opened = client.create_resolution("ana", "s1", metadata={"ticket": 41})
        assert (opened.status, opened.resolved_at) == ("open", None)

        resolved = client.create_resolution(
            "ana", "s1", status="resolved", resolution_summary="export fixed"
        )
        assert resolved.id == opened.id
        assert resolved.resolved_at is not None
        assert resolved.metadata == {"ticket": 41}
        client.create_resolution("ana", "s2", status="unresolved")

        assert [r.session_id for r in client.list_resolutions("ana", status="resolved")] == ["s1"]
        assert {r.session_id for r in client.list_resolutions("ana", limit=5, offset=0)} == {
            "s1",
            "s2",
        }
        assert other.list_resolutions("ana") == []


def test_sdk_reads_a_subjects_health(base_url: str) -> None:
    with sdk(base_url, "acme") as client:
        unknown = client.get_health("nobody")
        assert (unknown.score, unknown.state, unknown.factors) == (100, "healthy", [])

        billing_sessions(client)
        client.create_resolution("ana", "s1", status="unresolved")
        health = client.get_health("ana")

        assert health.subject_id == "ana"
        assert {factor.signal for factor in health.factors} == {
            "unresolved_sessions",
            "repeated_issues",
        }
        assert (health.score, health.state) == (75, "healthy")


def test_sdk_reads_a_subjects_sla(base_url: str) -> None:
    with sdk(base_url, "acme") as client:
        assert client.get_sla("nobody").total_sessions == 0

        billing_sessions(client)
        sla = client.get_sla(
            "ana", first_response_threshold_minutes=2, resolution_threshold_hours=48
        )

        assert (sla.total_sessions, sla.open_sessions) == (2, 2)
        assert sla.avg_first_response_seconds == 180.0
        assert sla.first_response_breach_count == 1
        first = sla.sessions[0]
        assert (first.session_id, first.first_response_seconds) == ("s1", 180.0)
        assert first.first_response_breached is True


def test_sdk_creates_a_handoff_that_repeats_exactly(base_url: str) -> None:
    with sdk(base_url, "acme") as client:
        billing_sessions(client)
        client.create_resolution("ana", "s1", status="resolved", resolution_summary="export fixed")

        brief = client.create_handoff(
            "ana", "s2", reason="billing escalation", max_tokens=300, caller_type="agent"
        )

        assert brief.active_issue == "My invoice total is wrong again"
        assert [item.summary for item in brief.resolution_history] == ["export fixed"]
        assert brief.health_state == "healthy"
        assert 0 < brief.token_estimate <= 300
        assert "## Active issue" in brief.handoff_notes
        assert set(brief.provenance) >= {"fact_ids", "episode_ids", "resolution_ids"}
        assert (
            client.create_handoff("ana", "s2", reason="billing escalation", max_tokens=300) == brief
        )


def test_the_async_sdk_reaches_the_same_routes(base_url: str) -> None:
    async def scenario() -> tuple[int, int, str]:
        async with AsyncStatewaveClient(
            base_url, api_key=API_KEY, tenant_id="acme", retry=NO_RETRY
        ) as client:
            await client.create_resolution("ana", "s1", status="resolved")
            listed = await client.list_resolutions("ana")
            health = await client.get_health("ana")
            brief = await client.create_handoff("ana", "s9")
            return len(listed), health.score, brief.session_id

    assert asyncio.run(scenario()) == (1, 100, "s9")
