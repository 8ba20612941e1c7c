"""A mixed load through the API, against a real ``memsync serve`` on PostgreSQL, with one
API process and with several.

    python -m bench.load [--processes 1 2] [--clients 1 16 64] [--seconds 20]

Per server (one for each ``--processes N``, all running at once on one throwaway
database seeded with ``--subjects`` subjects of 30 compiled episodes each, each warmed
up for 3 s) and per number of clients, taking turns between the servers, the clients
run for ``--seconds`` together, each on its own keep-alive connection, each
request drawn (seeded) from the mix a busy memory service sees:

- 60% ``POST /v1/episodes`` (one new chat statement),
- 20% ``POST /v1/context`` (a 500-token bundle),
- 15% ``GET /v1/timeline`` (20 episodes),
- 5% ``POST /v1/memories/compile`` (synchronous: what arrived since the last one),

each on a random subject. The clients are asyncio tasks over httpx in this process: the
load client, the server's processes and PostgreSQL share the machine's cores, as they do
on a one-machine deployment. Printed: requests per second, errors (any status >= 400 or
transport error), and p50/p99 per request type, then the ratio of requests per second of
each process count to one process at the same number of clients. Results and method:
docs/benchmarks.md ("Serving from several processes").
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections import defaultdict
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.common import machine, memsync_server, print_table, throwaway_store
from bench.compile import statement

MIX = (("ingest", 60), ("context", 20), ("timeline", 15), ("compile", 5))
SEEDED_EPISODES = 30
WARM_UP_SECONDS = 3.0
SERVER_CONFIG = "jobs:\n  serve_workers: 0\n"
"""No job workers beside the API: the load is the requests alone."""


@dataclass
class Tally:
    """What the clients of one phase saw."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: int = 0


def body(kind: str, subject: str, serial: int) -> tuple[str, str, dict[str, Any]]:
    """The method, path and httpx arguments of one request of ``kind``."""
    if kind == "ingest":
        text = f"{statement(serial)} (note {serial})"
        episode = {"subject_id": subject, "source": "chat", "type": "message"}
        return "POST", "/v1/episodes", {"json": {**episode, "payload": {"text": text}}}
    if kind == "context":
        task = "what tools and decisions matter this week"
        return (
            "POST",
            "/v1/context",
            {"json": {"subject_id": subject, "task": task, "max_tokens": 500}},
        )
    if kind == "timeline":
        return "GET", "/v1/timeline", {"params": {"subject_id": subject, "limit": 20}}
    return "POST", "/v1/memories/compile", {"json": {"subject_id": subject}}


async def client(
    base: str, seed: int, subjects: list[str], deadline: float, serials: list[int], tally: Tally
) -> None:
    draw = random.Random(seed)
    kinds = [kind for kind, _ in MIX]
    weights = [weight for _, weight in MIX]
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as connection:
        while time.monotonic() < deadline:
            kind = draw.choices(kinds, weights)[0]
            serials[0] += 1
            method, path, arguments = body(kind, draw.choice(subjects), serials[0])
            started = time.perf_counter()
            try:
                response = await connection.request(method, path, **arguments)
                failed = response.status_code >= 400
            except httpx.TransportError:
                failed = True
            tally.latencies[kind].append(time.perf_counter() - started)
            tally.errors += failed


async def phase(base: str, clients: int, seconds: float, subjects: list[str]) -> dict[str, Any]:
    tally = Tally()
    serials = [10_000_000 * clients]
    deadline = time.monotonic() + seconds
    started = time.perf_counter()
    await asyncio.gather(
        *(client(base, seed, subjects, deadline, serials, tally) for seed in range(clients))
    )
    elapsed = time.perf_counter() - started
    total = sum(len(samples) for samples in tally.latencies.values())
    return {
        "per_s": total / elapsed,
        "requests": total,
        "errors": tally.errors,
        "p50_p99_ms": {
            kind: (statistics.median(samples) * 1000, _p99(samples) * 1000)
            for kind, samples in tally.latencies.items()
        },
    }


def _p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, round(len(ordered) * 0.99) - 1)]


def seed(base: str, subjects: list[str]) -> None:
    with httpx.Client(base_url=base, timeout=120) as http:
        for number, subject in enumerate(subjects):
            episodes = [
                {
                    "subject_id": subject,
                    "source": "chat",
                    "type": "message",
                    "payload": {"text": statement(number * SEEDED_EPISODES + i)},
                }
                for i in range(SEEDED_EPISODES)
            ]
            http.post("/v1/episodes/batch", json={"episodes": episodes}).raise_for_status()
            http.post("/v1/memories/compile", json={"subject_id": subject}).raise_for_status()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--subjects", type=int, default=50)
    arguments = parser.parse_args()
    subjects = [f"user-{number}" for number in range(arguments.subjects)]
    results: dict[tuple[int, int], dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory() as directory,
        throwaway_store("postgresql", directory) as url,
        ExitStack() as servers,
    ):
        # Every server runs for the whole benchmark and the phases take turns between
        # them at each number of clients, so that the store's growth (ingest is 60% of
        # the mix) and the machine's slower moments fall on all of them alike.
        bases = {
            processes: servers.enter_context(
                memsync_server(
                    url, directory, SERVER_CONFIG, processes=processes, start_timeout=120
                )
            )[0]
            for processes in arguments.processes
        }
        seed(next(iter(bases.values())), subjects)
        for base in bases.values():  # each process's caches and pools, before timing
            asyncio.run(phase(base, 4, WARM_UP_SECONDS, subjects))
        for clients in arguments.clients:
            for processes, base in bases.items():
                results[processes, clients] = asyncio.run(
                    phase(base, clients, arguments.seconds, subjects)
                )
    print(f"machine: {machine()}; PostgreSQL; {arguments.seconds:g} s a phase\n")
    kinds = [kind for kind, _ in MIX]
    rows = []
    for (processes, clients), result in sorted(results.items()):
        one = results.get((1, clients))
        ratio = f"{result['per_s'] / one['per_s']:.2f}x" if one else "-"
        timings = [
            "{:.1f} / {:.1f}".format(*result["p50_p99_ms"][kind])
            if kind in result["p50_p99_ms"]
            else "-"
            for kind in kinds
        ]
        rows.append(
            (processes, clients, f"{result['per_s']:,.0f}", ratio, result["errors"], *timings)
        )
    print_table(
        ["processes", "clients", "req/s", "vs 1 process", "errors"]
        + [f"{kind} p50 / p99 ms" for kind in kinds],
        rows,
    )


if __name__ == "__main__":
    main()
