"""Latency of the support routes over HTTP: handoff, health, SLA and resolutions.

Each backend gets a throwaway store and a ``memsync serve`` of its own (a subprocess, as
deployed). Over HTTP the benchmark ingests one subject's ``--sessions`` support
sessions (a customer message and an agent reply each, plus chat messages for memories),
compiles it, records a resolution per session, then times ``--requests`` calls of each
route from an httpx client on loopback: p50 and p95 as the client sees them, with
``GET /v1/health`` (no store read) as the HTTP floor.

Prints a Markdown table; see docs/benchmarks.md.

    python -m bench.support [--sessions 200] [--requests 50] [--db sqlite postgresql]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx

from bench.common import machine, memsync_server, print_table, throwaway_store

START = datetime(2026, 3, 1, tzinfo=UTC)
SUBJECT = "customer-1"


def fill(client: httpx.Client, sessions: int) -> None:
    episodes = []
    for n in range(sessions):
        at = START + timedelta(hours=n)
        for role, text, minutes in (
            ("user", f"Invoice {n} shows the wrong total for plan {n % 7}", 0),
            ("agent", f"I re-ran the export for invoice {n}", 4 + n % 9),
        ):
            episodes.append(
                {
                    "subject_id": SUBJECT,
                    "source": "zendesk",
                    "type": "comment",
                    "session_id": f"s{n}",
                    "payload": {"messages": [{"role": role, "content": text}]},
                    "idempotency_key": f"s{n}-{role}",
                    "occurred_at": (at + timedelta(minutes=minutes)).isoformat(),
                }
            )
    chat = [f"I live in city {n} and I prefer tool {n}." for n in range(20)]
    episodes += [
        {
            "subject_id": SUBJECT,
            "source": "chat",
            "type": "message",
            "payload": {"messages": [{"role": "user", "content": text}]},
            "idempotency_key": f"chat-{n}",
            "occurred_at": (START + timedelta(minutes=n)).isoformat(),
        }
        for n, text in enumerate(chat)
    ]
    for start in range(0, len(episodes), 500):
        client.post(
            "/v1/episodes/batch", json={"episodes": episodes[start : start + 500]}
        ).raise_for_status()
    client.post("/v1/memories/compile", json={"subject_id": SUBJECT}).raise_for_status()
    for n in range(sessions):
        status = ("resolved", "unresolved", "open")[n % 3]
        client.post(
            "/v1/resolutions",
            json={"subject_id": SUBJECT, "session_id": f"s{n}", "status": status},
        ).raise_for_status()


def timed(call: Callable[[], httpx.Response], times: int) -> tuple[float, float]:
    call().raise_for_status()  # warm: plans, the tokenizer
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        call().raise_for_status()
        samples.append(time.perf_counter() - started)
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.95) - 1)]


def measure(backend: str, sessions: int, requests: int) -> dict[str, tuple[float, float]]:
    with (
        tempfile.TemporaryDirectory() as directory,
        throwaway_store(backend, directory) as url,
        memsync_server(url, directory) as (base, _pid),
        httpx.Client(base_url=base, timeout=60) as client,
    ):
        fill(client, sessions)
        last = f"s{sessions - 1}"
        calls: dict[str, Callable[[], httpx.Response]] = {
            "GET /v1/health (floor)": lambda: client.get("/v1/health"),
            "POST /v1/handoff (1000 tokens)": lambda: client.post(
                "/v1/handoff", json={"subject_id": SUBJECT, "session_id": last}
            ),
            "GET /v1/subjects/{id}/health": lambda: client.get(f"/v1/subjects/{SUBJECT}/health"),
            "GET /v1/subjects/{id}/sla": lambda: client.get(f"/v1/subjects/{SUBJECT}/sla"),
            "GET /v1/resolutions (50)": lambda: client.get(
                "/v1/resolutions", params={"subject_id": SUBJECT}
            ),
        }
        return {name: timed(call, requests) for name, call in calls.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    arguments = parser.parse_args()
    print(
        f"support routes benchmark: one subject, {arguments.sessions} sessions "
        f"({2 * arguments.sessions} episodes) + 20 chat messages, {arguments.requests} "
        f"requests per route; {machine()}"
    )
    rows = []
    for backend in arguments.db:
        for route, (p50, p95) in measure(backend, arguments.sessions, arguments.requests).items():
            rows.append((backend, route, f"{p50 * 1000:.1f}", f"{p95 * 1000:.1f}"))
    print_table(["db", "route", "p50 ms", "p95 ms"], rows)


if __name__ == "__main__":
    main()
