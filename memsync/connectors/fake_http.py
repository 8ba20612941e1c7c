"""Fake API servers on 127.0.0.1, shipped beside the real connectors.

Like httpx's ``MockTransport`` next to its transports: PyGithub (requests/urllib3) and
slack-sdk (urllib) do not go through httpx, so respx cannot intercept them; these
small HTTP servers speak the real wire format instead, and tests and benchmarks drive
the real client libraries against them. Every response is built from the recorded
shapes in ``memsync/connectors/fixtures`` (its README says where each file comes
from; read them with :func:`load_fixture`), overriding only ids, numbers, urls,
timestamps and texts.

- this module: :class:`FakeHTTPServer`, the base of every fake;
- :mod:`memsync.connectors.github.fake_api`: ``FakeGitHub``;
- :mod:`memsync.connectors.slack.fake_api`: ``FakeSlack``;
- :mod:`memsync.connectors.http.fake_desk`: ``FakeDesk``, for the HTTP base's example;
- :mod:`memsync.connectors.linear.fake_api`: ``FakeLinear`` (GraphQL).

Both fakes keep one lock around their state, deterministic ids and timestamps,
rendered items cached as bytes until the item changes, and sorted keys + ``bisect``
for ``since`` / ``oldest``. Local numbers: 10,000 issues read through PyGithub (101
requests) take about 3 to 5 s, most of it PyGithub; 50,000 Slack messages read through
``WebClient`` (51 requests) about 1.6 s. ``tests/unit/fakes/conftest.py`` has
``fake_github`` (token ``"t"``) and ``fake_slack`` (token ``"xoxb-test"``) fixtures.

Subclasses implement :meth:`FakeHTTPServer.handle`, which turns a
:class:`RecordedRequest` into a :class:`FakeResponse`. The base class owns the
socket, the serving thread, the request log and shutdown:

- the socket is bound to ``127.0.0.1`` on a free port when the object is built, so
  :attr:`FakeHTTPServer.base_url` is known before :meth:`FakeHTTPServer.start`;
- ``start()`` runs ``serve_forever`` in a daemon thread and returns once the thread is
  running (an event, no sleeping); ``stop()`` shuts the loop down, closes the socket
  and joins the thread. The object is a context manager doing both;
- every request is logged (method, path, query, lower-cased headers, body, form)
  before it is handled, under a lock, in arrival order (``requests``,
  ``request_count(path, method)``, ``clear_requests()``);
- ``after_request(action)`` runs ``action(request)`` after each answer, before it is
  sent (a test edits the source between two pages);
- an exception raised by ``handle`` is a bug in the fake: the client gets a 500 with
  the traceback, and ``stop()`` re-raises it as :class:`FakeServerError` so the test
  fails loudly.

Responses are HTTP/1.0 style (one request per connection, ``Connection: close``), so
no keep-alive thread outlives ``stop()``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from types import TracebackType
from typing import Any, Self
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "FakeHTTPServer",
    "FakeResponse",
    "FakeServerError",
    "RecordedRequest",
    "compact_json",
    "json_headers",
    "load_fixture",
]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes = b""
    form: dict[str, list[str]] = field(default_factory=dict)
    number: int = 0
    """1-based position of this request among all requests the server received."""

    def param(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name`` in the query string, else in the form body."""
        values = self.query.get(name) or self.form.get(name)
        return values[0] if values else default


@dataclass
class FakeResponse:
    """What the fake sends back. Header names are sent as given."""

    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        for key, value in self.headers:
            if key.lower() == lowered:
                return value
        return None


class FakeServerError(AssertionError):
    """A fake server's handler raised: a bug in the fake or in the test's scripting."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def _dispatch(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        split = urlsplit(self.path)
        headers = {name.lower(): value for name, value in self.headers.items()}
        form: dict[str, list[str]] = {}
        if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            form = parse_qs(body.decode("utf-8"), keep_blank_values=True)
        request = owner._record(
            method=self.command,
            path=split.path,
            query=parse_qs(split.query, keep_blank_values=True),
            headers=headers,
            body=body,
            form=form,
        )
        try:
            response = owner.handle(request)
            owner._after_answer(request)
        except Exception as exc:
            owner._record_error(exc)
            text = traceback.format_exc().encode("utf-8")
            response = FakeResponse(500, text, [("Content-Type", "text/plain; charset=utf-8")])
        self._send(response)

    def _send(self, response: FakeResponse) -> None:
        self.send_response(response.status)
        for name, value in response.headers:
            self.send_header(name, value)
        if response.header("content-length") is None:
            self.send_header("Content-Length", str(len(response.body)))
        self.end_headers()
        if self.command != "HEAD" and response.body:
            self.wfile.write(response.body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _dispatch

    def log_message(self, format: str, *args: object) -> None:
        """Silence the per-request stderr line; the request log replaces it."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeHTTPServer


class FakeHTTPServer:
    """Base class of the fake API servers: a threaded HTTP server on 127.0.0.1."""

    def __init__(self) -> None:
        self._log_lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._received = 0
        self._errors: list[BaseException] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._thread: threading.Thread | None = None
        self._running = threading.Event()
        self._after_request_actions: list[Callable[[RecordedRequest], None]] = []

    # -- lifecycle -------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``, without a trailing slash."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError(f"{type(self).__name__} is already started")
        self._thread = threading.Thread(
            target=self._serve, name=f"{type(self).__name__}:{self.port}", daemon=True
        )
        self._thread.start()
        self._running.wait()
        return self

    def _serve(self) -> None:
        self._running.set()
        self._server.serve_forever(poll_interval=0.05)

    def stop(self) -> None:
        """Stop serving, close the socket, join the thread; re-raise a handler error."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        with self._log_lock:
            errors = list(self._errors)
        if errors:
            raise FakeServerError(
                f"{type(self).__name__} handler raised {len(errors)} time(s); first: {errors[0]!r}"
            ) from errors[0]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.stop()
            return
        with contextlib.suppress(FakeServerError):  # the test already fails with its own error
            self.stop()

    # -- to implement ----------------------------------------------------------

    def handle(self, request: RecordedRequest) -> FakeResponse:
        """Turn a request into a response. Called from the server's threads."""
        raise NotImplementedError

    def after_request(self, action: Callable[[RecordedRequest], None]) -> None:
        """Call ``action(request)`` after each request is answered and before its response
        is sent (so before the client can send the next one): edit the source between two
        page requests, as a user would."""
        with self._log_lock:
            self._after_request_actions.append(action)

    def _after_answer(self, request: RecordedRequest) -> None:
        with self._log_lock:
            actions = list(self._after_request_actions)
        for action in actions:
            action(request)

    # -- request log -----------------------------------------------------------

    def _record(
        self,
        *,
        method: str,
        path: str,
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: bytes,
        form: dict[str, list[str]],
    ) -> RecordedRequest:
        with self._log_lock:
            self._received += 1
            request = RecordedRequest(
                method=method,
                path=path,
                query=query,
                headers=headers,
                body=body,
                form=form,
                number=self._received,
            )
            self._requests.append(request)
        return request

    def _record_error(self, exc: BaseException) -> None:
        with self._log_lock:
            self._errors.append(exc)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the request log, in arrival order."""
        with self._log_lock:
            return list(self._requests)

    def request_count(self, path: str | None = None, method: str | None = None) -> int:
        """How many requests had exactly this path (no query) and method; None = any."""
        with self._log_lock:
            return sum(
                1
                for r in self._requests
                if (path is None or r.path == path) and (method is None or r.method == method)
            )

    def clear_requests(self) -> None:
        """Forget the request log; ``RecordedRequest.number`` keeps counting."""
        with self._log_lock:
            self._requests.clear()


def json_headers(
    extra: Iterable[tuple[str, str]] | Mapping[str, str] = (),
) -> list[tuple[str, str]]:
    """``Content-Type: application/json; charset=utf-8`` plus ``extra``."""
    pairs = list(extra.items()) if isinstance(extra, Mapping) else list(extra)
    return [("Content-Type", "application/json; charset=utf-8"), *pairs]


def compact_json(value: Any) -> bytes:
    """``value`` as UTF-8 JSON without spaces, as the real APIs send it."""
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def load_fixture(service: str, name: str) -> Any:
    """A fresh copy of a recorded response body from ``memsync/connectors/fixtures``
    (``service`` is ``github`` or ``slack``; see the README there for each file's source).

    Read through :mod:`importlib.resources`, so it works from an installed wheel too.
    """
    resource = files("memsync.connectors").joinpath("fixtures", service, name)
    return json.loads(resource.read_text(encoding="utf-8"))
