"""``memsync serve --processes N``: N API processes behind one port, as a client and
an operator see them from outside.

The server runs as a child process on the backend under test; every request goes on a
new connection, so the kernel hands it to either API process, and each access log line
says which process answered (``pid``). Nothing sleeps: the tests poll with deadlines.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.jobs_support import wait_until
from tests.processes import StderrLines, free_port, spawn

pytestmark = pytest.mark.slow

STOP_DEADLINE = 10.0
"""How long the server may take to stop every process after SIGTERM: each child answers
what is in flight, shuts its application down and exits, on a busy two-core machine."""


class Server:
    """``memsync serve --processes 2`` on a free port, its log read as it runs."""

    def __init__(self, tmp_path: Path, store_url: str) -> None:
        port = free_port()
        config = tmp_path / "memsync.yaml"
        config.write_text(f"api: {{port: {port}}}\njobs: {{poll_seconds: 0.05}}\n")
        self.base = f"http://127.0.0.1:{port}"
        self.process = spawn(
            "-m", "memsync", "--config", str(config), "serve", "--processes", "2",
            store_url=store_url, environment={"MEMSYNC_LOG_FORMAT": "json"},
        )  # fmt: skip
        self.log = StderrLines(self.process)

    def request(self, method: str, path: str, **arguments: object) -> httpx.Response:
        """One request on a new connection (any process may take it)."""
        with httpx.Client(base_url=self.base, timeout=30) as client:
            response = client.request(method, path, **arguments)  # type: ignore[arg-type]
        return response

    def answering(self) -> bool:
        try:
            return self.request("GET", "/v1/health").status_code == 200
        except httpx.TransportError:
            return False

    def pid_of(self, response: httpx.Response) -> int:
        """The process that answered ``response``, from its access log line."""
        request_id = response.headers["X-Request-ID"]
        line = self.log.wait_for('"memsync.access"', request_id, timeout=30)
        pid: int = json.loads(line)["pid"]
        return pid

    def children(self) -> set[int]:
        """The server's live child processes (API processes and multiprocessing's helper)."""
        pid = self.process.pid
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
        return {int(child) for child in text.split()}


@pytest.fixture
def server(tmp_path: Path, store_url: str) -> Iterator[Server]:
    running = Server(tmp_path, store_url)
    try:
        wait_until(running.answering, timeout=90, what="memsync serve --processes 2 to answer")
        yield running
    finally:
        if running.process.poll() is None:
            running.process.send_signal(signal.SIGTERM)  # stops its children too
            try:
                running.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                running.process.kill()  # the children then leave on their own
                running.process.wait(timeout=30)
        running.log.close()


def stopped(process: subprocess.Popen[str]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=STOP_DEADLINE)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running {STOP_DEADLINE:g}s after SIGTERM") from None


def test_both_processes_answer_a_write_in_one_is_read_in_the_other_and_metrics_add_up(
    server: Server,
) -> None:
    answered_by: set[int] = set()
    read_elsewhere = 0
    created = 0

    def one_more_round() -> bool:
        # A new statement, compiled by one process, then searched by whichever takes
        # the next connection: a process that had the subject cached must see it too.
        nonlocal read_elsewhere, created
        city = f"Town{created}"
        episode = server.request(
            "POST", "/v1/episodes",
            json={"subject_id": "ana", "source": "chat", "type": "message",
                  "payload": {"text": f"I live in {city}."}},
        )  # fmt: skip
        assert episode.status_code == 201, episode.text
        created += 1
        compiled = server.request("POST", "/v1/memories/compile", json={"subject_id": "ana"})
        assert compiled.status_code == 200, compiled.text
        found = server.request(
            "GET", "/v1/memories/search", params={"subject_id": "ana", "q": city}
        )
        assert found.status_code == 200, found.text
        assert found.json()["memories"], f"{city} compiled but not found"
        writer, reader = server.pid_of(compiled), server.pid_of(found)
        answered_by.update({writer, reader, server.pid_of(episode)})
        read_elsewhere += writer != reader
        return len(answered_by) == 2 and read_elsewhere >= 3

    wait_until(one_more_round, timeout=120, what="both processes to answer, reads crossing")

    assert answered_by <= server.children()
    # Every process counts into the same files: any scrape reports all of them.
    metrics = server.request("GET", "/metrics").text
    episodes = next(
        line
        for line in metrics.splitlines()
        if line.startswith("memsync_http_request_duration_seconds_count")
        and 'route="/v1/episodes"' in line
        and 'status="201"' in line
    )
    assert float(episodes.rsplit(" ", 1)[1]) == created


def test_a_killed_process_is_replaced_and_sigterm_stops_them_all(server: Server) -> None:
    first = server.pid_of(server.request("GET", "/v1/health"))
    before = server.children()
    os.kill(first, signal.SIGKILL)

    replacement: set[int] = set()
    answered: set[int] = set()

    def a_new_process_answers() -> bool:
        response = server.request("GET", "/v1/health")
        assert response.status_code == 200  # the other process answers meanwhile
        pid = server.pid_of(response)
        answered.add(pid)
        if pid not in before:
            replacement.add(pid)
        return bool(replacement)

    wait_until(a_new_process_answers, timeout=120, what="a replacement process to answer")
    children = server.children()
    assert first not in children
    assert replacement <= children
    # The API processes seen answering (not multiprocessing's resource tracker, which
    # leaves on its own once the parent has gone).
    serving = children & answered
    assert replacement <= serving

    assert stopped(server.process) == 0
    for child in serving:
        assert not Path(f"/proc/{child}").exists() or _is_zombie_of_nobody(child)
    assert "Stopping parent process" in server.log.text()


def _is_zombie_of_nobody(pid: int) -> bool:
    """A process already exited whose entry outlives it for a moment (reaped by init)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True


def test_the_processes_leave_when_the_parent_is_killed_outright(server: Server) -> None:
    answered = {server.pid_of(server.request("GET", "/v1/health"))}
    serving = server.children() & answered
    assert serving

    server.process.kill()  # no SIGTERM for its children: they must notice
    server.process.wait(timeout=30)

    wait_until(
        lambda: all(_is_zombie_of_nobody(pid) for pid in serving),
        timeout=60,
        what="the orphaned API processes to stop",
    )
