"""The statewave SDK's label method and its callers (``set_memory_labels``, and
``get_context`` / ``create_handoff`` with ``caller_type``), unchanged, against a live
memsync server on loopback with a read policy (issue #31 part 1)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from statewave import AsyncStatewaveClient
from statewave.client import NO_RETRY

from memsync.compile.sensitivity import PolicyAction
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import (
    ApiKey,
    ApiSettings,
    PolicyRuleSettings,
    ReadPolicySettings,
    Settings,
)
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from tests.e2e.statewave_support import API_KEY, sdk, tell_lisbon_and_tea
from tests.helpers import live_server

PII_TO_AGENTS = PolicyRuleSettings(labels=["pii"], caller_type="agent", action=PolicyAction.DENY)
OSLO = {"messages": [{"role": "user", "content": "I live in Oslo."}]}


@pytest.fixture
def base_url(store: Store) -> Iterator[str]:
    settings = Settings(
        store=str(store.engine.url),
        api=ApiSettings(keys=[ApiKey(name="sdk", key=API_KEY, tenants=["acme"])]),
        read_policy=ReadPolicySettings(
            rules=[
                PolicyRuleSettings(labels=["pii"], caller_type="agent", action=PolicyAction.DENY)
            ]
        ),
    )
    with live_server(create_app(Services(settings, store))) as url:
        yield url


def test_sdk_labels_a_memory_that_the_policy_then_keeps_from_agents(base_url: str) -> None:
    with sdk(base_url, "acme") as client:
        tell_lisbon_and_tea(client)
        compiled = client.compile_memories("ana")
        lisbon = next(m for m in compiled.memories if "Lisbon" in m.content)

        labelled = client.set_memory_labels(str(lisbon.id), ["  PII", "pii", "Home"])
        assert labelled.id == lisbon.id
        assert labelled.sensitivity_labels == ["home", "pii"]

        agent = client.get_context("ana", "where does ana live", caller_type="agent")
        person = client.get_context("ana", "where does ana live", caller_type="human")
        brief = client.create_handoff("ana", "s1", caller_type="agent")
        assert "Lisbon" not in agent.assembled_context
        assert all("Lisbon" not in fact.content for fact in agent.facts)
        assert "Lisbon" in person.assembled_context
        assert "Lisbon" not in brief.model_dump_json()

        cleared = client.set_memory_labels(str(lisbon.id), [])
        assert cleared.sensitivity_labels == []
        again = client.get_context("ana", "where does ana live", caller_type="agent")
        assert "Lisbon" in again.assembled_context


def test_async_sdk_sets_labels_too(base_url: str) -> None:
    async def label() -> list[str]:
        async with AsyncStatewaveClient(
            base_url, api_key=API_KEY, tenant_id="acme", retry=NO_RETRY
        ) as client:
            await client.create_episode(
                "bo",
                "chat",
                "message",
                {"messages": [{"role": "user", "content": "I live in Oslo."}]},
            )
            compiled = await client.compile_memories("bo")
            memory = await client.set_memory_labels(str(compiled.memories[0].id), ["PII"])
            return memory.sensitivity_labels

    assert asyncio.run(label()) == ["pii"]
