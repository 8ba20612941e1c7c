"""What a read policy costs a read: context, search and timeline over HTTP, without a
policy and with one that denies labelled memories to the caller.

Each backend gets a throwaway store, filled once over HTTP (``--messages`` chat
messages of one subject, compiled, and ``--labelled`` of its memories labelled
``pii``), then two ``memsync serve`` processes on it in turn (subprocesses, as
deployed): one with no ``read_policy``, one enforcing ``pii`` → deny for
``caller_type: agent``. Each route is called ``--requests`` times as that agent, from
an httpx client on loopback: p50 and p95 as the client sees them. With the policy, a
read also reads the subject's labelled memories and episodes and logs one decision
per labelled memory (to a log nobody reads, as a file would take it).

Prints a Markdown table; see docs/benchmarks.md.

    python -m bench.labels [--messages 500] [--labelled 20] [--requests 50] [--db sqlite postgresql]
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import httpx

from bench.common import machine, memsync_server, print_table, throwaway_store
from bench.support import timed

START = datetime(2026, 3, 1, tzinfo=UTC)
SUBJECT = "customer-1"
AGENT = {"X-Caller-Type": "agent"}
POLICY = """read_policy:
  rules:
    - {name: pii-to-agents, labels: [pii], caller_type: agent, action: deny}
"""


def fill(client: httpx.Client, messages: int, labelled: int) -> None:
    episodes = [
        {
            "subject_id": SUBJECT,
            "source": "chat",
            "type": "message",
            "payload": {
                "messages": [
                    {"role": "user", "content": f"I live in city {n} and I prefer tool {n}."}
                ]
            },
            "idempotency_key": f"chat-{n}",
            "occurred_at": (START + timedelta(minutes=n)).isoformat(),
        }
        for n in range(messages)
    ]
    for start in range(0, len(episodes), 500):
        client.post(
            "/v1/episodes/batch", json={"episodes": episodes[start : start + 500]}
        ).raise_for_status()
    compiled = client.post("/v1/memories/compile", json={"subject_id": SUBJECT})
    compiled.raise_for_status()
    for memory in compiled.json()["memories"][:labelled]:
        client.patch(
            f"/v1/memories/{memory['id']}/labels", json={"sensitivity_labels": ["pii"]}
        ).raise_for_status()


def measure(
    backend: str, messages: int, labelled: int, requests: int
) -> dict[tuple[str, str], tuple[float, float]]:
    results: dict[tuple[str, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        for policy, config in (("none", ""), ("deny pii to agents", POLICY)):
            with (
                memsync_server(url, directory, config) as (base, _pid),
                httpx.Client(base_url=base, timeout=60, headers=AGENT) as client,
            ):
                if policy == "none":
                    fill(client, messages, labelled)
                calls: dict[str, Callable[[], httpx.Response]] = {
                    "POST /v1/context (1000 tokens)": lambda: client.post(
                        "/v1/context", json={"subject_id": SUBJECT, "task": "where city tool"}
                    ),
                    "GET /v1/memories/search (20)": lambda: client.get(
                        "/v1/memories/search", params={"subject_id": SUBJECT, "q": "city"}
                    ),
                    "GET /v1/timeline (50)": lambda: client.get(
                        "/v1/timeline", params={"subject_id": SUBJECT}
                    ),
                }
                for route, call in calls.items():
                    results[(route, policy)] = timed(call, requests)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--labelled", type=int, default=20)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    arguments = parser.parse_args()
    print(
        f"read policy benchmark: one subject, {arguments.messages} chat messages compiled, "
        f"{arguments.labelled} memories labelled pii, {arguments.requests} requests per "
        f"route as caller_type agent; {machine()}"
    )
    rows = []
    for backend in arguments.db:
        found = measure(backend, arguments.messages, arguments.labelled, arguments.requests)
        for (route, policy), (p50, p95) in found.items():
            rows.append((backend, route, policy, f"{p50 * 1000:.1f}", f"{p95 * 1000:.1f}"))
    print_table(["db", "route", "policy", "p50 ms", "p95 ms"], rows)


if __name__ == "__main__":
    main()
