"""Fake API servers on 127.0.0.1 for tests that drive the real client libraries.

PyGithub (requests) and slack-sdk (urllib) do not go through httpx, so respx cannot
intercept them; these servers speak HTTP instead. See ``tests/fakes/README.md``.
"""

from __future__ import annotations

from tests.fakes.github import FakeGitHub
from tests.fakes.http import FakeHTTPServer, FakeResponse, FakeServerError, RecordedRequest
from tests.fakes.slack import FakeSlack

__all__ = [
    "FakeGitHub",
    "FakeHTTPServer",
    "FakeResponse",
    "FakeServerError",
    "FakeSlack",
    "RecordedRequest",
]
