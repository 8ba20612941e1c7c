"""One `POST /v1/episodes` against its floor, in the same run, on PostgreSQL.

    python -m bench.single_write [--requests 1000] [--rounds 3]

The floor (issue #30, part 2) is a bare ASGI app (:func:`floor_app`) on the same
uvicorn as ``memsync serve`` (its defaults: uvloop, httptools, no access log) that
reads the same JSON body, decodes it with ``json.loads``, inserts one row into a
PostgreSQL table on one psycopg ``AsyncConnection`` in autocommit mode (one durable
commit a request, as memsync's insert of a new episode) and answers 201 with a small
JSON body. memsync runs as ``memsync serve`` against a migrated store in the same
database cluster.

One keep-alive httpx client sends ``--requests`` new episodes (the body of
``bench.read_path``'s single ingest) to each server in turn, ``--rounds`` times,
alternating (so a neighbour's load falls on both); each server's first 50 requests warm
it and are not counted. Prints, per server, the median and p99 per request over every
round, the requests a second and the server process's CPU a request (from /proc), and
memsync's median over the floor's: issue #30's target is at most 2. ``--before DIR``
serves a second memsync from another tree (``git archive main | tar -x -C DIR``) on the
same store, in the same alternation: before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

import httpx
import sqlalchemy as sa

from bench.common import (
    cpu_seconds,
    free_port,
    machine,
    memsync_server,
    print_table,
    throwaway_store,
    wait_until_serving,
)
from bench.read_path import chat_body, percentiles

FLOOR_URL_VARIABLE = "MEMSYNC_BENCH_FLOOR_URL"
FLOOR_TABLE = "bench_floor"
WARM = 50


async def floor_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The floor: parse the body, insert one row with one durable commit, answer 201.

    One connection for the process, opened at the first request (a keep-alive client
    sends one request at a time, so it is never shared by two)."""
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["method"] == "GET":  # bench.common.wait_until_serving's probe
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    episode = json.loads(body)
    episode_id = uuid.uuid4()
    connection = await _floor_connection()
    await connection.execute(
        f"INSERT INTO {FLOOR_TABLE} (id, subject_id, idempotency_key, payload)"
        " VALUES (%s, %s, %s, %s)",
        (episode_id, episode["subject_id"], episode.get("idempotency_key"), body.decode()),
    )
    answer = json.dumps({"id": str(episode_id), "status": "created"}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 201,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": answer})


_connection: Any = None


async def _floor_connection() -> Any:
    global _connection
    if _connection is None:
        import psycopg

        _connection = await psycopg.AsyncConnection.connect(
            os.environ[FLOOR_URL_VARIABLE], autocommit=True
        )
    return _connection


@contextmanager
def floor_server(url: str) -> Iterator[tuple[str, int]]:
    """The floor app under uvicorn (as ``memsync serve`` configures it) on a free port;
    yield its base URL and pid once it answers."""
    psycopg_url = (
        sa.make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    )
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.exec_driver_sql(
            f"CREATE TABLE {FLOOR_TABLE} (id uuid PRIMARY KEY, subject_id text NOT NULL,"
            " idempotency_key text, payload jsonb NOT NULL)"
        )
    engine.dispose()
    port = free_port()
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "uvicorn", "bench.single_write:floor_app"),
            *("--port", str(port), "--no-access-log", "--log-level", "warning"),
        ],
        env={**os.environ, FLOOR_URL_VARIABLE: psycopg_url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=5) as client:
            wait_until_serving(client, timeout=30)
        yield base, server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_round(
    client: httpx.Client, pid: int, subject: str, count: int, path: str
) -> dict[str, Any]:
    """``count`` new episodes posted one after the other; per-request ms, CPU, seconds."""
    samples = []
    cpu_before = cpu_seconds(pid)
    started = time.perf_counter()
    for i in range(count):
        body = chat_body(subject, i)
        request_started = time.perf_counter()
        status = client.post(path, json=body).status_code
        samples.append((time.perf_counter() - request_started) * 1000)
        assert status == 201, f"{path} answered {status}"
    return {
        "samples": samples,
        "seconds": time.perf_counter() - started,
        "cpu_s": cpu_seconds(pid) - cpu_before,
    }


@contextmanager
def python_path(directory: str | None) -> Iterator[None]:
    """``PYTHONPATH`` set to ``directory`` for the servers started meanwhile (they take
    this process's environment), so that another tree of memsync can be served."""
    before = os.environ.get("PYTHONPATH")
    if directory is not None:
        os.environ["PYTHONPATH"] = directory
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def measure(requests: int, rounds: int, before: str | None) -> dict[str, dict[str, Any]]:
    """Alternating rounds against memsync, the floor and, given ``before`` (a directory
    holding another tree of memsync), that tree's server on the same store."""
    with ExitStack() as stack:
        directory = stack.enter_context(tempfile.TemporaryDirectory())
        url = stack.enter_context(throwaway_store("postgresql", directory))
        servers: dict[str, tuple[httpx.Client, int]] = {}

        def serve(name: str, server: AbstractContextManager[tuple[str, int]]) -> None:
            base, pid = stack.enter_context(server)
            servers[name] = (stack.enter_context(httpx.Client(base_url=base, timeout=60)), pid)

        if before is not None:
            with python_path(before):
                serve("memsync before", memsync_server(url, directory))
        serve("memsync", memsync_server(url, directory))
        serve("floor", floor_server(url))
        totals: dict[str, dict[str, Any]] = {
            name: {"samples": [], "seconds": 0.0, "cpu_s": 0.0} for name in servers
        }
        for name, (client, pid) in servers.items():  # imports, plans, pools
            run_round(client, pid, f"{name}-warm", WARM, "/v1/episodes")
        for r in range(rounds):
            for name, (client, pid) in servers.items():
                result = run_round(client, pid, f"{name}-{r}", requests, "/v1/episodes")
                total = totals[name]
                total["samples"].extend(result["samples"])
                total["seconds"] += result["seconds"]
                total["cpu_s"] += result["cpu_s"]
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--before", help="a directory holding another tree of memsync, served beside this one"
    )
    arguments = parser.parse_args()
    totals = measure(arguments.requests, arguments.rounds, arguments.before)
    count = arguments.requests * arguments.rounds
    figures = {name: percentiles(total["samples"]) for name, total in totals.items()}
    print(f"{machine()}; PostgreSQL; {arguments.rounds} alternating rounds of {arguments.requests}")
    print()
    print_table(
        ["server", "p50 ms", "p99 ms", "requests/s", "server CPU ms a request"],
        [
            (
                name,
                f"{figures[name]['p50']:.2f}",
                f"{figures[name]['p99']:.2f}",
                f"{count / total['seconds']:,.0f}",
                f"{total['cpu_s'] * 1000 / count:.2f}",
            )
            for name, total in totals.items()
        ],
    )
    print()
    for name in totals:
        if name != "floor":
            ratio = figures[name]["p50"] / figures["floor"]["p50"]
            cpu_ratio = totals[name]["cpu_s"] / totals["floor"]["cpu_s"]
            print(f"- {name} over the floor: p50 {ratio:.2f}x, server CPU {cpu_ratio:.2f}x")


if __name__ == "__main__":
    main()
