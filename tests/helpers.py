"""Test helpers shared across tiers: API clients, a live server on loopback, and a fake
connector that stops mid-read until released."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memsync.clock import Clock, FakeClock
from memsync.connectors import Cursor, Deletion, Window
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import ApiSettings, Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from tests.jobs_support import scalar, wait_until

LOOPBACK = "http://127.0.0.1"
"""The base URL test clients use: with no API keys the API answers loopback names only."""


def episode(key: str | None = "k1", **overrides: Any) -> dict[str, Any]:
    """A ``POST /v1/episodes`` body for subject ``user-1``; ``overrides`` replace fields."""
    body: dict[str, Any] = {
        "subject_id": "user-1",
        "source": "chat",
        "type": "message",
        "payload": {"text": "I live in Lisbon"},
    }
    if key is not None:
        body["idempotency_key"] = key
    body.update(overrides)
    return body


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


def log_lines(stderr: str) -> list[dict[str, Any]]:
    """Every line of a JSON log, parsed; a line that is not a JSON object fails the test."""
    parsed = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert all(isinstance(line, dict) for line in parsed), parsed
    return parsed


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


OTHER_SESSIONS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend' AND left(application_name, 5) <> 'citus'"
)
"""The clients' sessions on the test's PostgreSQL database but this one: not Citus' own
(its maintenance daemon, and the sessions its nodes open to one another)."""


def terminate_other_backends(store_url: str) -> None:
    """End every other session on the PostgreSQL database of ``store_url``, as a restart
    of the server does (each backend says goodbye and closes its socket), and return once
    they are gone."""
    admin = Store.from_url(store_url)
    try:
        with admin.read() as connection:
            connection.exec_driver_sql(f"SELECT pg_terminate_backend(pid) {OTHER_SESSIONS}")
        wait_until(
            lambda: scalar(admin, f"SELECT count(*) {OTHER_SESSIONS}") == 0,
            timeout=30,
            what="the other sessions to end",
        )
    finally:
        admin.dispose()


class BlockingConnector(FakeConnector):
    """Stops at ``block_at`` until the test releases it."""

    def __init__(self, config: FakeConfig, records: list[FakeRecord], block_at: str) -> None:
        super().__init__(config, records)
        self.block_at = block_at
        self.reached = threading.Event()
        self.release = threading.Event()

    def fetch(self, window: Window, cursor: Cursor | None) -> Iterator[FakeRecord | Deletion]:
        for record in super().fetch(window, cursor):
            if isinstance(record, FakeRecord) and record.id == self.block_at:
                self.reached.set()
                assert self.release.wait(timeout=60)
            yield record


class SwitchableProxy:
    """A TCP proxy on 127.0.0.1 to ``upstream``, switched off and on by the test: while
    off it closes every connection it holds and every new one at once, as a database
    server that went away does."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._on = threading.Event()
        self._on.set()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def off(self) -> None:
        self._on.clear()
        with self._lock:
            for held in self._open:
                held.close()
            self._open.clear()

    def on(self) -> None:
        self._on.set()

    def close(self) -> None:
        self.off()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._on.is_set():
                client.close()
                continue
            server = socket.create_connection(self._upstream)
            with self._lock:
                self._open += [client, server]
            for source, target in ((client, server), (server, client)):
                threading.Thread(target=_pump, args=(source, target), daemon=True).start()


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, target):
            with suppress(OSError):
                end.close()


def notes_config(tmp_path: Path, store_url: str, **extra: str) -> Path:
    """A configuration file with one workspace connector, ``notes`` (subject
    ``ws:notes``), over a workspace holding one note; ``extra`` adds connector fields."""
    root = tmp_path / "workspace"
    root.mkdir(exist_ok=True)
    (root / "NOTES.md").write_text("We decided to use Postgres for the queue.\n")
    fields = "".join(f"    {key}: '{value}'\n" for key, value in extra.items())
    path = tmp_path / "memsync.yaml"
    path.write_text(
        f"store: {store_url}\nconnectors:\n  - name: notes\n    type: workspace\n"
        f"    subject: 'ws:notes'\n    root: {root}\n{fields}"
    )
    return path
