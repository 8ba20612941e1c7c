"""Recorded API responses: the shared fixture set beside the repository, else our copies."""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARED_FIXTURES = REPO_ROOT / ".." / "shared" / "fixtures"
LOCAL_FIXTURES = REPO_ROOT / "tests" / "fixtures"


def fixture_path(service: str, name: str) -> Path:
    shared = SHARED_FIXTURES / service / name
    return shared if shared.is_file() else LOCAL_FIXTURES / service / name


def load_fixture(service: str, name: str) -> Any:
    """A fresh copy of a fixture's JSON value (tests may change it freely)."""
    return copy.deepcopy(json.loads(fixture_path(service, name).read_text(encoding="utf-8")))


def fixture_response(service: str, name: str) -> httpx.Response:
    """An ``httpx.Response`` from a ``*.response.json`` file: status, headers, body."""
    recorded = load_fixture(service, name)
    headers = {k: v for k, v in recorded["headers"].items() if k != "content-length"}
    body = recorded["body"]
    content = body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode()
    return httpx.Response(recorded["status"], headers=headers, content=content)


def zendesk_signed(
    body: bytes, at: datetime, secret: str, invocation_id: str | None = "8350205582"
) -> dict[str, str]:
    """The headers Zendesk sends with a webhook delivery signed at ``at``
    (https://developer.zendesk.com/documentation/webhooks/anatomy-of-a-webhook-request/):
    ``base64(HMAC-SHA256(timestamp + body))`` as
    https://developer.zendesk.com/documentation/webhooks/verifying/ describes."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    digest = hmac.new(secret.encode(), stamp.encode() + body, hashlib.sha256).digest()
    headers = {
        "X-Zendesk-Webhook-Signature": base64.b64encode(digest).decode(),
        "X-Zendesk-Webhook-Signature-Timestamp": stamp,
        "Content-Type": "application/json",
    }
    if invocation_id is not None:
        headers["X-Zendesk-Webhook-Invocation-Id"] = invocation_id
    return headers


def linear_signed(
    body: bytes, secret: str, *, delivery: str | None = None, event: str = "Issue"
) -> dict[str, str]:
    """The headers Linear sends with a webhook delivery
    (https://linear.app/developers/webhooks), named in lower case as a receiver is given
    them: the hex HMAC-SHA256 of the raw body under ``secret`` in ``linear-signature``,
    the delivery's id (``delivery``, else a fresh UUID), the resource type ``event``."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "linear-signature": digest,
        "linear-delivery": delivery or str(uuid.uuid4()),
        "linear-event": event,
        "content-type": "application/json; charset=utf-8",
    }
