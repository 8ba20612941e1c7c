"""Random ids for a batch of rows while another thread of the process computes.

    python -m bench.busy_thread_ids [--ids 1000] [--rounds 5]

Ingest gives every new episode an id, and a compile every supersession record, while
other threads of the process compute (the API's other requests, the compile's
read-ahead). ``os.urandom``, under ``uuid.uuid4()``, lets go of the GIL around its system
call, so beside a busy thread each id may wait for the GIL back, up to a switch
interval. Made here, ``--ids`` ids two ways, each idle and beside a thread spinning in
Python (``bench.busy_thread_rows.busy_thread``), under CPython's default switch interval
(5 ms) and under the API server's (0.5 ms):

- ``random_uuids``: how the store makes them (``memsync.ids``: one read of the random
  source for the batch);
- ``uuid4 each``: ``uuid.uuid4()`` once an id, as ingest and compile made them before.

Printed: the median of ``--rounds`` rounds each, milliseconds, and busy over idle.

Results and method: docs/benchmarks.md ("Ids beside a busy thread").
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable

from bench.busy_thread_rows import busy_thread, print_medians, taking_turns
from bench.common import machine
from memsync.ids import random_uuids


def uuid4_each(count: int) -> list[uuid.UUID]:
    return [uuid.uuid4() for _ in range(count)]


def timed(make: Callable[[int], list[uuid.UUID]], count: int, busy: bool) -> float:
    with busy_thread(busy):
        started = time.perf_counter()
        make(count)
        return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    ways: dict[str, Callable[[int], list[uuid.UUID]]] = {
        "random_uuids": random_uuids,
        "uuid4 each": uuid4_each,
    }
    results = taking_turns(
        arguments.rounds, list(ways), lambda way, busy: timed(ways[way], arguments.ids, busy)
    )
    print(f"{machine()}; {arguments.ids:,} ids, median of {arguments.rounds}\n")
    print_medians(results, list(ways), decimals=1)


if __name__ == "__main__":
    main()
