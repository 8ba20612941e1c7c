"""Test helpers shared across tiers: API clients, a live server on loopback, and a fake
connector that stops mid-read until released."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memsync.clock import Clock, FakeClock
from memsync.connectors import Cursor, Window
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import ApiSettings, Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store

API_NOW = datetime(2026, 6, 1, tzinfo=UTC)
"""The fake clock's time in API tests; ``say`` dates messages by days before it."""


def say(client: TestClient, key: str, text: str, day: int, subject: str = "ana") -> None:
    """The subject says ``text`` in a chat message, ``30 - day`` days before API_NOW."""
    response = client.post(
        "/v1/episodes",
        json={
            "subject_id": subject,
            "source": "chat",
            "type": "message",
            "payload": {"messages": [{"role": "user", "content": text}]},
            "idempotency_key": key,
            "occurred_at": (API_NOW - timedelta(days=30 - day)).isoformat(),
        },
    )
    assert response.status_code in (200, 201), response.text


def compile_subject(client: TestClient, subject: str = "ana") -> dict[str, Any]:
    response = client.post("/v1/memories/compile", json={"subject_id": subject})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def build_app(store: Store, api: ApiSettings | None = None, clock: Clock | None = None) -> FastAPI:
    settings = Settings(store=str(store.engine.url), api=api or ApiSettings())
    return create_app(Services(settings, store, clock or FakeClock()))


@contextmanager
def live_server(app: FastAPI) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 in a thread; yield its base URL.

    The socket is bound and listening before the thread starts, so clients can
    connect at once (the kernel queues them): there is nothing to wait for.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


class BlockingConnector(FakeConnector):
    """Stops at ``block_at`` until the test releases it."""

    def __init__(self, config: FakeConfig, records: list[FakeRecord], block_at: str) -> None:
        super().__init__(config, records)
        self.block_at = block_at
        self.reached = threading.Event()
        self.release = threading.Event()

    def fetch(self, window: Window, cursor: Cursor | None) -> Iterator[FakeRecord]:
        for record in super().fetch(window, cursor):
            if record.id == self.block_at:
                self.reached.set()
                assert self.release.wait(timeout=60)
            yield record
