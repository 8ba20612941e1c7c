"""A worker process for the crash tests: ``python -m tests.jobs_child STORE_URL RELEASE
[--mid-compile REACHED]``.

By default it runs one job kind, a compile that waits until the file RELEASE exists,
so the test can kill the process at a known point before the compile starts. With
``--mid-compile`` it runs real compile jobs two episodes per chunk, and the third chunk
creates REACHED and then waits for RELEASE inside its transaction: the test kills it
there, with two chunks committed and one in flight.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Sequence
from pathlib import Path

from memsync.compile.heuristic import HeuristicCompiler
from memsync.compile.types import CandidateMemory, EpisodeView
from memsync.runtime.app.handlers import compile_handler
from memsync.runtime.compiling import COMPILE_JOB, CompileService
from memsync.runtime.jobs import JobHandler, JobQueue, Worker
from memsync.runtime.storage import Store
from memsync.stopping import StopEvent
from tests.jobs_support import BLOCKING_KIND, LEASE, MID_COMPILE_CHUNK, blocking_handler


class GatedCompiler(HeuristicCompiler):
    """The heuristic compiler, stopping at its ``gate_at``-th chunk until released."""

    def __init__(self, gate_at: int, reached: Path, release: Path) -> None:
        super().__init__()
        self.calls, self.gate_at, self.reached, self.release = 0, gate_at, reached, release

    def compile(self, episodes: Sequence[EpisodeView]) -> list[CandidateMemory]:
        self.calls += 1
        if self.calls == self.gate_at:
            self.reached.touch()
            waiting = threading.Event()
            while not self.release.exists():
                waiting.wait(0.02)
        return super().compile(episodes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("store_url")
    parser.add_argument("release", type=Path)
    parser.add_argument("--mid-compile", type=Path, metavar="REACHED")
    arguments = parser.parse_args()
    store = Store.from_url(arguments.store_url)
    queue = JobQueue(store)
    handlers: dict[str, JobHandler]
    if arguments.mid_compile is not None:
        gated = GatedCompiler(3, arguments.mid_compile, arguments.release)
        service = CompileService(store, compiler=gated, chunk_episodes=MID_COMPILE_CHUNK)
        handlers = {COMPILE_JOB: compile_handler(service, queue)}
    else:
        handlers = {
            BLOCKING_KIND: blocking_handler(CompileService(store), queue, arguments.release)
        }
    Worker(queue, handlers, lease=LEASE, poll_interval=0.02, name="doomed").run(StopEvent())


if __name__ == "__main__":
    main()
