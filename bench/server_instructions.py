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
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import counted_instructions, memsync_server, print_table, throwaway_store
from bench.read_path import chat_body, stdlib_post

WARM_REQUESTS = 100


def measure(url: str, directory: str, requests: int) -> int:
    """The server's instructions over ``requests`` new episodes."""
    output = Path(directory) / "callgrind.out"
    callgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    with memsync_server(
        url,
        directory,
        wrapper=[*callgrind, f"--callgrind-out-file={output}"],
        start_timeout=600,
    ) as (base, pid):
        post, close = stdlib_post(base)
        try:
            for i in range(WARM_REQUESTS):  # validators, statement caches, pools
                assert post(chat_body("warm", i)) in (200, 201)
            control = ["callgrind_control", "--instr"]
            subprocess.run([*control, "on", str(pid)], check=True, capture_output=True)
            for i in range(requests):
                status = post(chat_body("counted", i))
                assert status == 201, f"POST /v1/episodes answered {status}"
            subprocess.run([*control, "off", str(pid)], check=True, capture_output=True)
        finally:
            close()
    # The server has stopped: callgrind has written its counts.
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
