"""Instructions a real `memsync serve` spends on one request of a route, counted.

    python -m bench.server_instructions [--db postgresql] [--requests 500]
        [--route episodes|context|timeline]

``episodes`` (the default) is a new episode each time (``POST /v1/episodes``);
``context`` and ``timeline`` are the mixed load's reads (bench.load: a 500-token
``POST /v1/context``, ``GET /v1/timeline?limit=20``) of subjects seeded first with 30
compiled episodes each, asked in turn.

Wall time and CPU time of a request move by ±30% with this VM's neighbours; the number
of instructions the server executes does not. This runs ``memsync serve`` under
valgrind's callgrind with counting off, warms the route with 100 requests, switches
counting on (``callgrind_control -i on``), sends ``--requests`` new episodes one after
the other from one keep-alive connection (the standard library's client), switches
counting off, and prints the server's instructions a request: uvicorn, memsync's app
and the database client, every thread, in user space (the kernel's work, a socket's
system calls, is not counted, nor is the database server's). Needs valgrind
(``apt-get install valgrind``). Callgrind slows the server about fiftyfold: the
figure is a count, never a rate. docs/benchmarks.md, "Single ingest over HTTP: the
sixth pass".
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import httpx

from bench.common import counted_instructions, memsync_server, print_table, throwaway_store
from bench.load import body, seed
from bench.read_path import chat_body

WARM_REQUESTS = 100
SUBJECTS = [f"bench:{number}" for number in range(10)]
"""The subjects the read routes ask for in turn (seeded before counting)."""

Request = Callable[[int], int]
"""Sends request ``i`` of the route being counted; answers its status."""


def route_requests(route: str, connection: http.client.HTTPConnection) -> Request:
    """Request ``i`` of ``route`` on ``connection`` (one keep-alive connection of the
    standard library's client, so the client costs the server nothing extra)."""

    def send(i: int) -> int:
        if route == "episodes":
            method, path, payload = "POST", "/v1/episodes", chat_body("counted", i)
        else:
            method, path, arguments = body(route, SUBJECTS[i % len(SUBJECTS)], i)
            payload = arguments.get("json")
            if "params" in arguments:
                path += "?" + str(httpx.QueryParams(arguments["params"]))
        content = None if payload is None else json.dumps(payload)
        connection.request(method, path, content, {"content-type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status

    return send


def measure(url: str, directory: str, requests: int, route: str = "episodes") -> int:
    """The server's instructions over ``requests`` requests of ``route``."""
    output = Path(directory) / "callgrind.out"
    callgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    with memsync_server(
        url,
        directory,
        wrapper=[*callgrind, f"--callgrind-out-file={output}"],
        start_timeout=600,
    ) as (base, pid):
        if route != "episodes":
            seed(base, SUBJECTS)
        host, port = base.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=600)
        send = route_requests(route, connection)
        try:
            for i in range(WARM_REQUESTS):  # validators, statement caches, pools
                assert send(-1 - i) in (200, 201)
            control = ["callgrind_control", "--instr"]
            subprocess.run([*control, "on", str(pid)], check=True, capture_output=True)
            for i in range(requests):
                status = send(i)
                assert status in (200, 201), f"{route} request {i} answered {status}"
            subprocess.run([*control, "off", str(pid)], check=True, capture_output=True)
        finally:
            connection.close()
    # The server has stopped: callgrind has written its counts.
    return counted_instructions(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--route", choices=["episodes", "context", "timeline"], default="episodes")
    arguments = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("bench.server_instructions needs valgrind (apt-get install valgrind)")
    with (
        tempfile.TemporaryDirectory() as directory,
        throwaway_store(arguments.db, directory) as url,
    ):
        instructions = measure(url, directory, arguments.requests, arguments.route)
    print_table(
        ["figure", "value"],
        [
            ("database", arguments.db),
            ("route", arguments.route),
            ("requests counted", arguments.requests),
            ("instructions a request (M)", f"{instructions / arguments.requests / 1e6:.3f}"),
        ],
    )


if __name__ == "__main__":
    main()
