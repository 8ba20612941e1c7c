"""What the Statewave-client tests share: one API key, an SDK client per tenant, and
a conversation to compile."""

from __future__ import annotations

from statewave import StatewaveClient
from statewave.client import NO_RETRY

API_KEY = "ms_sdk_test_key"


def sdk(base_url: str, tenant: str) -> StatewaveClient:
    """The official client, as an application would build it (without retries, so a
    refusal surfaces at once)."""
    return StatewaveClient(base_url, api_key=API_KEY, tenant_id=tenant, retry=NO_RETRY)


def tell(client: StatewaveClient, key: str, text: str) -> None:
    """Ana says ``text`` in a chat message."""
    client.create_episode(
        "ana",
        "chat",
        "message",
        {"messages": [{"role": "user", "content": text}]},
        idempotency_key=key,
    )


def tell_lisbon_and_tea(client: StatewaveClient) -> None:
    """Ana says where she lives and what she drinks: two memories once compiled."""
    tell(client, "c1", "I live in Lisbon and I prefer tea.")
