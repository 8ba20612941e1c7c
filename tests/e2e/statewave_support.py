"""What the Statewave-client tests share: one API key and an SDK client per tenant."""

from __future__ import annotations

from statewave import StatewaveClient
from statewave.client import NO_RETRY

API_KEY = "ms_sdk_test_key"


def sdk(base_url: str, tenant: str) -> StatewaveClient:
    """The official client, as an application would build it (without retries, so a
    refusal surfaces at once)."""
    return StatewaveClient(base_url, api_key=API_KEY, tenant_id=tenant, retry=NO_RETRY)
