"""The HTTP stack's own work on ``POST /v1/episodes``: memsync's ASGI app called directly.

    python -m bench.http_stack [--requests 2000]

No socket, no uvicorn and no database work: the app is memsync's own (its middlewares
and access log, FastAPI's routing, dependencies and body validation, the response),
built on a SQLite store, with the ingest service answered by a stub that returns a
stored episode (the route awaits it on the event loop, as it awaits a new episode's
insert on PostgreSQL). Prints the CPU time of a request (the process,
every thread). For a figure that does not move with the machine's load, count
instructions: run it twice under valgrind and subtract,

    valgrind --tool=cachegrind --cache-sim=no python -m bench.http_stack --requests 500
    valgrind --tool=cachegrind --cache-sim=no python -m bench.http_stack --requests 1500

(the difference of the two ``I refs``, over 1,000, is one request's instructions;
start-up cancels out). docs/benchmarks.md, "Single ingest over HTTP: the fourth pass".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import uvloop
from starlette.types import Message

from bench.common import print_table
from bench.read_path import chat_body
from memsync.episode import EpisodeDraft
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.api.schemas import CreateEpisodeRequest
from memsync.runtime.app.config import Settings
from memsync.runtime.app.observability import configure_logging
from memsync.runtime.app.services import Services
from memsync.runtime.ingest import IngestOutcome, IngestService
from memsync.runtime.storage import Store, upgrade

WARM_UP = 200


class StoredStub:
    """Answers every draft with one episode that was really stored, as if new."""

    def __init__(self, stored: IngestOutcome) -> None:
        self._stored = stored

    def ingest(
        self, _tenant_id: str, drafts: Sequence[EpisodeDraft], **_options: object
    ) -> list[IngestOutcome]:
        return [self._stored for _ in drafts]

    async def ingest_one(
        self, _tenant_id: str, _draft: EpisodeDraft, **_options: object
    ) -> IngestOutcome:
        return self._stored


def request_scope(length: int) -> dict[str, Any]:
    """What uvicorn hands the app for an httpx client's ``POST /v1/episodes``."""
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"accept", b"*/*"),
        (b"accept-encoding", b"gzip, deflate"),
        (b"connection", b"keep-alive"),
        (b"user-agent", b"python-httpx/0.28.1"),
        (b"content-length", str(length).encode()),
        (b"content-type", b"application/json"),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/episodes",
        "raw_path": b"/v1/episodes",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def post(app: Any, body: bytes) -> int:
    """One request through the app; its status."""
    status = 0
    received = False

    async def receive() -> Message:
        nonlocal received
        if received:  # the app asks again only to watch for a disconnect
            await asyncio.Event().wait()
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])

    await app(request_scope(len(body)), receive, send)
    return status


async def run(app: Any, requests: int) -> float:
    """CPU seconds of the process for ``requests`` requests, after a warm-up."""
    bodies = [json.dumps(chat_body("bench", i)).encode() for i in range(WARM_UP + requests)]
    for body in bodies[:WARM_UP]:
        assert await post(app, body) == 201
    started = time.process_time()
    for body in bodies[WARM_UP:]:
        await post(app, body)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=2_000)
    arguments = parser.parse_args()
    # The access log line is part of the stack: formatted as a server formats it.
    with open("/dev/null", "w") as nowhere, tempfile.TemporaryDirectory() as directory:
        configure_logging("json", "info", stream=nowhere)
        store = Store.from_url(f"sqlite:///{directory}/bench.db")
        upgrade(store)
        draft = CreateEpisodeRequest.model_validate(chat_body("bench", 0)).to_draft()
        [stored] = IngestService(store).ingest("default", [draft], with_stored=True)
        services = Services(Settings(store=str(store.engine.url)), store)
        # The ingest service is built on first use: this one is there first.
        vars(services)["ingest"] = StoredStub(stored)
        seconds = uvloop.run(run(create_app(services), arguments.requests))
        store.dispose()
    per_request = seconds / max(arguments.requests, 1) * 1e6
    print_table(
        ["figure", "value"],
        [("requests", arguments.requests), ("CPU a request (µs)", f"{per_request:.0f}")],
    )


if __name__ == "__main__":
    main()
