"""The HTTP server base: lifecycle, request log, handler errors."""

from __future__ import annotations

import socket
import tomllib
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath

import pytest

import memsync
from memsync.connectors.fake_http import (
    FakeHTTPServer,
    FakeResponse,
    FakeServerError,
    RecordedRequest,
)


class _Echo(FakeHTTPServer):
    def handle(self, request: RecordedRequest) -> FakeResponse:
        if request.path == "/boom":
            raise RuntimeError("bug in the fake")
        return FakeResponse(200, request.path.encode(), [("X-Echo", "1")])


def test_serves_on_loopback_with_a_free_port_and_logs_requests() -> None:
    with _Echo() as server:
        assert server.base_url.startswith("http://127.0.0.1:")
        request = urllib.request.Request(
            f"{server.base_url}/a/b?x=1&x=2&y=", data=b"k=v", method="POST"
        )
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        request.add_header("X-Custom", "yes")
        with urllib.request.urlopen(request) as response:
            assert response.read() == b"/a/b"
            assert response.headers["X-Echo"] == "1"

        [logged] = server.requests
        assert logged.method == "POST"
        assert logged.path == "/a/b"
        assert logged.query == {"x": ["1", "2"], "y": [""]}
        assert logged.headers["x-custom"] == "yes"
        assert logged.form == {"k": ["v"]}
        assert logged.number == 1
        assert server.request_count("/a/b") == 1
        assert server.request_count("/a/b", method="GET") == 0


def test_stop_closes_the_socket() -> None:
    server = _Echo().start()
    port = server.port
    server.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_handler_exception_is_a_500_for_the_client_and_fails_the_test_at_stop() -> None:
    server = _Echo().start()
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"{server.base_url}/boom")
    assert caught.value.code == 500
    assert b"bug in the fake" in caught.value.read()
    with pytest.raises(FakeServerError, match="bug in the fake"):
        server.stop()


def test_request_numbers_keep_counting_after_the_log_is_cleared() -> None:
    with _Echo() as server:
        urllib.request.urlopen(f"{server.base_url}/one").read()
        server.clear_requests()
        urllib.request.urlopen(f"{server.base_url}/two").read()
        [logged] = server.requests
        assert (logged.path, logged.number) == ("/two", 2)


def test_every_fixture_the_fakes_read_ships_as_package_data() -> None:
    package = Path(memsync.__file__).parent
    pyproject = tomllib.loads((package.parent / "pyproject.toml").read_text(encoding="utf-8"))
    globs = pyproject["tool"]["setuptools"]["package-data"]["memsync"]
    fixtures = sorted((package / "connectors" / "fixtures").rglob("*.*"))

    unshipped = [
        str(path.relative_to(package))
        for path in fixtures
        if not any(PurePosixPath(path.relative_to(package).as_posix()).match(g) for g in globs)
    ]

    assert fixtures
    assert unshipped == []


def test_actions_after_a_request_run_before_its_answer_reaches_the_client() -> None:
    class _Counter(FakeHTTPServer):
        def __init__(self) -> None:
            super().__init__()
            self.state = 0

        def handle(self, request: RecordedRequest) -> FakeResponse:
            return FakeResponse(200, str(self.state).encode())

    seen: list[str] = []
    with _Counter() as server:

        def bump(request: RecordedRequest) -> None:
            seen.append(request.path)
            server.state += 1

        server.after_request(bump)
        answers = []
        for path in ("/one", "/two"):
            with urllib.request.urlopen(f"{server.base_url}{path}") as response:
                answers.append(response.read())
                # The action already ran: the state the next request sees has moved.
                assert seen[-1] == path

    assert answers == [b"0", b"1"]
