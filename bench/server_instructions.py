"""Instructions a real `memsync serve` spends on one ``POST /v1/episodes``, counted.

    python -m bench.server_instructions [--db postgresql] [--requests 500]

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
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import free_port, print_table, throwaway_store
from bench.read_path import chat_body

WARM_REQUESTS = 100


def connect(port: int, timeout: float) -> http.client.HTTPConnection:
    """A keep-alive connection to the server once it answers ``/v1/health`` (a server
    under callgrind takes tens of seconds to start)."""
    deadline = time.monotonic() + timeout
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            connection.request("GET", "/v1/health")
            connection.getresponse().read()
            return connection
        except OSError:
            connection.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)  # a process starting up: nothing to wait on but its port


def post_episode(connection: http.client.HTTPConnection, subject: str, i: int) -> int:
    connection.request(
        "POST",
        "/v1/episodes",
        json.dumps(chat_body(subject, i)),
        {"content-type": "application/json"},
    )
    response = connection.getresponse()
    response.read()
    return response.status


def counted_instructions(output: Path) -> int:
    """The total of a callgrind output file (its ``summary:`` or ``totals:`` line)."""
    totals = re.findall(r"^(?:summary|totals): (\d+)", output.read_text(errors="replace"), re.M)
    if not totals:
        raise RuntimeError(f"no totals in {output}")
    return max(int(total) for total in totals)


def measure(url: str, directory: str, requests: int) -> int:
    """The server's instructions over ``requests`` new episodes."""
    config = Path(directory) / "memsync.yaml"
    config.write_text("{}\n")
    output = Path(directory) / "callgrind.out"
    server = subprocess.Popen(
        [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={output}",
            sys.executable,
            "-m",
            "memsync",
            "--config",
            str(config),
            "serve",
            "--port",
            str(port := free_port()),
        ],
        env={**os.environ, "MEMSYNC_STORE": url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        connection = connect(port, timeout=600)
        for i in range(WARM_REQUESTS):  # validators, statement caches, pools
            assert post_episode(connection, "warm", i) in (200, 201)
        control = ["callgrind_control", "--instr"]
        subprocess.run([*control, "on", str(server.pid)], check=True, capture_output=True)
        for i in range(requests):
            status = post_episode(connection, "counted", i)
            assert status == 201, f"POST /v1/episodes answered {status}"
        subprocess.run([*control, "off", str(server.pid)], check=True, capture_output=True)
        connection.close()
    finally:
        server.terminate()
        server.wait(timeout=300)
    return counted_instructions(output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--requests", type=int, default=500)
    arguments = parser.parse_args()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("bench.server_instructions needs valgrind (apt-get install valgrind)")
    with (
        tempfile.TemporaryDirectory() as directory,
        throwaway_store(arguments.db, directory) as url,
    ):
        instructions = measure(url, directory, arguments.requests)
    print_table(
        ["figure", "value"],
        [
            ("database", arguments.db),
            ("requests counted", arguments.requests),
            ("instructions a request (M)", f"{instructions / arguments.requests / 1e6:.3f}"),
        ],
    )


if __name__ == "__main__":
    main()
