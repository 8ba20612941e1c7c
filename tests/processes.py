"""Driving memsync in child processes: start one, read its log as it runs, and wait
for what it says with a deadline (no sleeping)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from tests.jobs_support import wait_until

REPO = Path(__file__).resolve().parents[1]


def spawn(
    *args: str, store_url: str, environment: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """``python ARGS`` from the repository root, with ``$MEMSYNC_STORE`` set and
    ``environment`` added (no other ``MEMSYNC_`` variable of ours leaks in)."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    child.update({"MEMSYNC_STORE": store_url, **(environment or {})})
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=child,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class StderrLines:
    """Every line a process writes to stderr, collected by a thread as it comes, so a
    test can wait for a line with a deadline while the process runs."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        self._stream = process.stderr
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.append(line)

    def wait_for(self, *texts: str, timeout: float = 60.0) -> str:
        """The first line containing every one of ``texts``, once it is written."""
        found: list[str] = []

        def said() -> bool:
            found[:] = [line for line in list(self.lines) if all(t in line for t in texts)]
            return bool(found)

        wait_until(said, timeout=timeout, what=f"a line saying {texts!r}")
        return found[0]

    def text(self) -> str:
        """What was written so far (all of it once the process exited: see :meth:`close`)."""
        return "".join(self.lines)

    def close(self) -> None:
        """Read to the end; the process must have exited."""
        self._reader.join(timeout=30)
