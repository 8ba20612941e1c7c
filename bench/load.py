"""A mixed load through the API, against a real ``memsync serve`` on PostgreSQL, with one
API process and with several.

    python -m bench.load [--processes 1 2] [--clients 1 16 64] [--seconds 20]
                         [--client-processes 2] [--admission priority fifo]

Per server (one for each ``--processes N``, all running at once on one throwaway
database seeded with ``--subjects`` subjects of 30 compiled episodes each, each warmed
up for 3 s) and per number of clients, taking turns between the servers, the clients
run for ``--seconds`` together, each on its own keep-alive connection, each
request drawn (seeded) from the mix a busy memory service sees:

- 60% ``POST /v1/episodes`` (one new chat statement),
- 20% ``POST /v1/context`` (a 500-token bundle),
- 15% ``GET /v1/timeline`` (20 episodes),
- 5% ``POST /v1/memories/compile`` (synchronous: what arrived since the last one),

each on a random subject. The clients are asyncio tasks, each on a keep-alive connection
of its own (``--client lean``, the default: :class:`LeanConnection`; ``--client httpx``:
an ``httpx.AsyncClient``, what this benchmark used first, at four times the client's
CPU), spread over ``--client-processes`` processes of their own (2 by default), so that
the load client is not one interpreter's single core: the client, the server's processes
and PostgreSQL share the machine's cores, as they do on a one-machine deployment.
With ``--admission priority fifo`` each process count is served twice, once with the
waiting requests let in as configured by default and once in arrival order (the
servers take turns too): what the prioritized lane does to each request type, in one
run. Printed: requests per second, errors (any status >= 400 or transport error), p50/p99 per
request type, the ratio of requests per second of each process count to one process at
the same number of clients, and where the cores went (CPU seconds a second of the
server's processes and of the client's, and how busy the whole machine was). Results and
method:
docs/benchmarks.md ("Serving from several processes").
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import tempfile
import time
import urllib.parse
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from bench.common import (
    machine,
    machine_busy_seconds,
    memsync_server,
    print_table,
    throwaway_store,
    tree_cpu_seconds,
)
from bench.compile import statement

MIX = (("ingest", 60), ("context", 20), ("timeline", 15), ("compile", 5))
SEEDED_EPISODES = 30
WARM_UP_SECONDS = 3.0
START_MARGIN_SECONDS = 0.5
"""A phase starts this long after it is handed to the client processes (all at once)."""
SERVER_CONFIG = "jobs:\n  serve_workers: 0\n"
"""No job workers beside the API: the load is the requests alone."""

ADMISSIONS = {
    "priority": "",
    "fifo": "api:\n  overtake_limit: 0\n",
}
"""How a server process lets waiting requests in (``--admission``): ``priority`` as
configured by default (context and search ahead of the others, ``api.prioritized_paths``),
``fifo`` every request in arrival order (``api.overtake_limit: 0``)."""


@dataclass
class Tally:
    """What the clients of one phase (in one client process) saw."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: int = 0
    #: CPU seconds this client process spent in the phase.
    client_cpu: float = 0.0

    def add(self, other: Tally) -> None:
        for kind, samples in other.latencies.items():
            self.latencies[kind].extend(samples)
        self.errors += other.errors
        self.client_cpu += other.client_cpu


def body(kind: str, subject: str, serial: int) -> tuple[str, str, dict[str, Any]]:
    """The method, path and arguments (``json``: the body; ``params``: the query) of
    one request of ``kind``."""
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


class LeanConnection:
    """One keep-alive HTTP/1.1 connection that sends a request and reads its answer,
    with next to no work of its own: the load client runs on the same two cores as the
    servers and PostgreSQL, and httpx's ``AsyncClient`` cost it about 1.4 ms of CPU a
    request, a third of a core at 225 requests/s. Enough HTTP for memsync's answers: a
    status line, headers, and a body of ``content-length`` bytes or chunks."""

    def __init__(self, base: str) -> None:
        self._host, port = base.removeprefix("http://").split(":")
        self._port = int(port)
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(self, method: str, path: str, arguments: dict[str, Any]) -> int:
        """Send the request; answer its status once the whole body is read."""
        if self._streams is None:
            self._streams = await asyncio.open_connection(self._host, self._port)
        reader, writer = self._streams
        if "params" in arguments:
            path += "?" + urllib.parse.urlencode(arguments["params"])
        content = orjson.dumps(arguments["json"]) if "json" in arguments else b""
        head = (
            f"{method} {path} HTTP/1.1\r\nhost: {self._host}\r\ncontent-length: {len(content)}\r\n"
        )
        if content:
            head += "content-type: application/json\r\n"
        writer.write(head.encode() + b"\r\n" + content)
        header_block = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = header_block.decode("latin-1").split("\r\n")
        headers = dict(
            (name.strip().lower(), value.strip())
            for name, _, value in (line.partition(":") for line in header_lines if line)
        )
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                await reader.readexactly(size + 2)
            await reader.readuntil(b"\r\n")
        else:
            await reader.readexactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return int(status_line.split(" ", 2)[1])

    async def close(self) -> None:
        if self._streams is not None:
            _, writer = self._streams
            self._streams = None
            writer.close()


class HttpxConnection:
    """:class:`LeanConnection`'s interface on an ``httpx.AsyncClient`` of one
    keep-alive connection (``--client httpx``)."""

    def __init__(self, base: str) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        self._client = httpx.AsyncClient(base_url=base, timeout=60, limits=limits)

    async def request(self, method: str, path: str, arguments: dict[str, Any]) -> int:
        return (await self._client.request(method, path, **arguments)).status_code

    async def close(self) -> None:
        await self._client.aclose()


CONNECTIONS: dict[str, type[LeanConnection | HttpxConnection]] = {
    "lean": LeanConnection,
    "httpx": HttpxConnection,
}


async def client(share: Share, seed: int, serials: list[int], tally: Tally) -> None:
    draw = random.Random(seed)
    kinds = [kind for kind, _ in MIX]
    weights = [weight for _, weight in MIX]
    connection = CONNECTIONS[share.client](share.base)
    subjects, deadline = share.subjects, share.ends_at
    try:
        while time.time() < deadline:
            kind = draw.choices(kinds, weights)[0]
            serials[0] += 1
            method, path, arguments = body(kind, draw.choice(subjects), serials[0])
            started = time.perf_counter()
            try:
                failed = await connection.request(method, path, arguments) >= 400
            except (OSError, asyncio.IncompleteReadError, ValueError, httpx.TransportError):
                failed = True
                await connection.close()  # a fresh connection for the next request
            tally.latencies[kind].append(time.perf_counter() - started)
            tally.errors += failed
    finally:
        await connection.close()


@dataclass(frozen=True)
class Share:
    """One client process's part of a phase: its clients' seeds, and when (wall clock,
    shared by every process) they start and stop."""

    base: str
    seeds: tuple[int, ...]
    subjects: list[str]
    starts_at: float
    ends_at: float
    first_serial: int
    client: str


def run_share(share: Share) -> Tally:
    """Run one client process's clients for the phase (in that process)."""
    return asyncio.run(_share(share))


async def _share(share: Share) -> Tally:
    tally = Tally()
    # Every client process starts at the same instant, so the phase's clients all run
    # for the same window whatever each process's start-up took.
    await asyncio.sleep(max(0.0, share.starts_at - time.time()))
    serials = [share.first_serial]
    cpu_before = time.process_time()
    await asyncio.gather(*(client(share, seed, serials, tally) for seed in share.seeds))
    tally.client_cpu = time.process_time() - cpu_before
    return tally


@dataclass
class Phase:
    """What one phase against one server measured: the clients' tally, and the cores."""

    tally: Tally
    elapsed: float
    server_cpu: float
    machine_busy: float
    machine_idle: float


def phase(
    pool: ProcessPoolExecutor,
    client_processes: int,
    server_pid: int,
    base: str,
    clients: int,
    seconds: float,
    subjects: list[str],
    client_kind: str,
    first_serial: int,
) -> Phase:
    """``clients`` clients (each a ``client_kind`` connection) against ``base`` for
    ``seconds``, spread round-robin over the ``client_processes`` processes of ``pool``;
    their new episodes' texts are numbered from ``first_serial`` (a million a process)."""
    starts_at = time.time() + START_MARGIN_SECONDS
    ends_at = starts_at + seconds
    shares = [
        Share(
            base,
            tuple(range(process, clients, client_processes)),
            subjects,
            starts_at,
            ends_at,
            first_serial + 1_000_000 * process,
            client_kind,
        )
        for process in range(min(client_processes, clients))
    ]
    server_cpu_before = tree_cpu_seconds(server_pid)
    busy_before, idle_before = machine_busy_seconds()
    tally = Tally()
    for part in pool.map(run_share, shares):
        tally.add(part)
    elapsed = max(seconds, time.time() - starts_at)
    server_cpu = tree_cpu_seconds(server_pid) - server_cpu_before
    busy_after, idle_after = machine_busy_seconds()
    return Phase(tally, elapsed, server_cpu, busy_after - busy_before, idle_after - idle_before)


def summary(phases: list[Phase]) -> dict[str, Any]:
    """The phases of one server at one number of clients, as one: requests a second,
    errors, p50/p99 per request type over every sample, and the cores."""
    tally = Tally()
    for part in phases:
        tally.add(part.tally)
    elapsed = sum(part.elapsed for part in phases)
    busy = sum(part.machine_busy for part in phases)
    idle = sum(part.machine_idle for part in phases)
    total = sum(len(samples) for samples in tally.latencies.values())
    return {
        "per_s": total / elapsed,
        "requests": total,
        "errors": tally.errors,
        "server_cpu_per_s": sum(part.server_cpu for part in phases) / elapsed,
        "client_cpu_per_s": tally.client_cpu / elapsed,
        "machine_busy": busy / (busy + idle),
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
    parser.add_argument("--client-processes", type=int, default=2)
    parser.add_argument("--client", choices=sorted(CONNECTIONS), default="lean")
    parser.add_argument("--admission", choices=sorted(ADMISSIONS), nargs="+", default=["priority"])
    arguments = parser.parse_args()
    subjects = [f"user-{number}" for number in range(arguments.subjects)]
    results: dict[tuple[str, int, int], dict[str, Any]] = {}
    with (
        tempfile.TemporaryDirectory() as directory,
        throwaway_store("postgresql", directory) as url,
        ExitStack() as servers,
        ProcessPoolExecutor(arguments.client_processes) as pool,
    ):
        # Every server runs for the whole benchmark and the phases take turns between
        # them at each number of clients, so that the store's growth (ingest is 60% of
        # the mix) and the machine's slower moments fall on all of them alike.
        servers_by_kind = {
            (admission, processes): servers.enter_context(
                memsync_server(
                    url,
                    directory,
                    SERVER_CONFIG + ADMISSIONS[admission],
                    processes=processes,
                    start_timeout=120,
                )
            )
            for admission in arguments.admission
            for processes in arguments.processes
        }
        seed(next(iter(servers_by_kind.values()))[0], subjects)

        phases_run = itertools.count()

        def run(server: tuple[str, int], clients: int, seconds: float) -> Phase:
            base, pid = server
            # Each phase's new episodes are new texts: none is a repeat of another's.
            first_serial = 10_000_000 * next(phases_run)
            return phase(
                pool,
                arguments.client_processes,
                pid,
                base,
                clients,
                seconds,
                subjects,
                arguments.client,
                first_serial,
            )

        # Each server process's caches and pools, and each client process, before timing.
        for server in servers_by_kind.values():
            run(server, 4 * arguments.client_processes, WARM_UP_SECONDS)
        for clients in arguments.clients:
            # Each server's time in two halves, in turn forwards then backwards (ABBA): the
            # store grows all along, and a server measured later would meet a larger one.
            phases: dict[tuple[str, int], list[Phase]] = defaultdict(list)
            order = list(servers_by_kind)
            for kind in order + order[::-1]:
                phases[kind].append(run(servers_by_kind[kind], clients, arguments.seconds / 2))
            for (admission, processes), halves in phases.items():
                results[admission, processes, clients] = summary(halves)
    print(
        f"machine: {machine()}; PostgreSQL; {arguments.seconds:g} s a phase; "
        f"clients in {arguments.client_processes} processes, {arguments.client} connections\n"
    )
    kinds = [kind for kind, _ in MIX]
    rows = []
    for (admission, processes, clients), result in sorted(results.items()):
        one = results.get((admission, 1, clients))
        ratio = f"{result['per_s'] / one['per_s']:.2f}x" if one else "-"
        timings = [
            "{:.1f} / {:.1f}".format(*result["p50_p99_ms"][kind])
            if kind in result["p50_p99_ms"]
            else "-"
            for kind in kinds
        ]
        cores = (
            f"{result['server_cpu_per_s']:.2f} / {result['client_cpu_per_s']:.2f} / "
            f"{result['machine_busy']:.0%}"
        )
        rows.append(
            (
                admission,
                processes,
                clients,
                f"{result['per_s']:,.0f}",
                ratio,
                result["errors"],
                *timings,
                cores,
            )
        )
    print_table(
        ["admission", "processes", "clients", "req/s", "vs 1 process", "errors"]
        + [f"{kind} p50 / p99 ms" for kind in kinds]
        + ["server / client CPU s/s / machine busy"],
        rows,
    )


if __name__ == "__main__":
    main()
