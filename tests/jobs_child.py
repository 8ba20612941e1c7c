"""A worker process for the crash test: ``python -m tests.jobs_child STORE_URL RELEASE``.

It runs one job kind, a compile that waits until the file RELEASE exists, so the
test can kill the process at a known point in the middle of a job.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from memsync.runtime.compiling import CompileService
from memsync.runtime.jobs import JobQueue, Worker
from memsync.runtime.storage import Store
from tests.jobs_support import BLOCKING_KIND, LEASE, blocking_handler


def main(store_url: str, release: str) -> None:
    store = Store.from_url(store_url)
    handlers = {BLOCKING_KIND: blocking_handler(CompileService(store), Path(release))}
    Worker(JobQueue(store), handlers, lease=LEASE, poll_interval=0.02, name="doomed").run(
        threading.Event()
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
