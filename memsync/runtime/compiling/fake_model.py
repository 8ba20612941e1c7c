"""A fake model on 127.0.0.1, for tests and benchmarks of the LLM compiler.

Speaks two wire formats:

- OpenAI's chat completions
  (https://platform.openai.com/docs/api-reference/chat/create): ``POST
  /v1/chat/completions`` answered with ``choices[0].message.content`` and ``usage``
  (``prompt_tokens``, ``completion_tokens``, ``total_tokens``); configure
  :attr:`FakeModel.api_base` as ``base_url``;
- Anthropic's Messages API (https://docs.anthropic.com/en/api/messages): ``POST
  /v1/messages`` with ``x-api-key`` and ``anthropic-version``, answered with
  ``content: [{"type": "text", "text": ...}]`` and ``usage`` (``input_tokens``,
  ``output_tokens``); configure :attr:`FakeModel.base_url` (the API root).

Both rate limit as their vendors document (https://platform.openai.com/docs/guides/rate-limits,
https://docs.anthropic.com/en/api/rate-limits): HTTP 429 with ``Retry-After``.

It extracts one memory per episode it is asked about, "Works at Acme" on the claim
``employment.current_employer`` (and with ``echo``, a fact stating the episode's first
passage), and reports deterministic usage: ``100 + episodes``
prompt tokens and ``20 * episodes`` completion tokens. It can answer after a fixed
``latency`` (in its own request threads) and answer 429 to the next *n* requests
(:meth:`FakeModel.rate_limit`). It logs when each request arrived (monotonic seconds)
and the most requests it had in flight at once.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from memsync.connectors.fake_http import (
    FakeHTTPServer,
    FakeResponse,
    RecordedRequest,
    compact_json,
    json_headers,
)

CHAT_COMPLETIONS = "/v1/chat/completions"
MESSAGES = "/v1/messages"

__all__ = ["FakeModel", "completion_tokens_for", "extraction_answer", "prompt_tokens_for"]


def extraction_answer(asked: list[dict[str, Any]], *, echo: bool = False) -> str:
    """The fake's message content for the episodes ``asked`` (the user message's JSON):
    one employer claim ("Works at Acme") per episode and, with ``echo``, a ``fact``
    stating the episode's first passage (so that different episodes give different
    memories)."""
    episodes = []
    for item in asked:
        memories: list[dict[str, Any]] = [
            {
                "kind": "profile_fact",
                "content": "Works at Acme",
                "claim_key": "employment.current_employer",
                "claim_value": "Acme",
                "confidence": 0.9,
            }
        ]
        if echo and item["passages"]:
            text = str(item["passages"][0]["text"])[:500]
            memories.append({"kind": "fact", "content": text, "confidence": 0.6})
        episodes.append({"episode_id": item["episode_id"], "memories": memories})
    return json.dumps({"episodes": episodes})


def prompt_tokens_for(episodes: int) -> int:
    """The prompt tokens the fake reports for a request about ``episodes`` episodes."""
    return 100 + episodes


def completion_tokens_for(episodes: int) -> int:
    """The completion tokens the fake reports for a request about ``episodes`` episodes."""
    return 20 * episodes


class FakeModel(FakeHTTPServer):
    """A chat-completions model that answers every batch it can parse (see the module)."""

    def __init__(self, *, latency: float = 0.0, echo: bool = False) -> None:
        super().__init__()
        self.latency = latency
        self.echo = echo
        self._lock = threading.Lock()
        self._refuse = 0
        self._retry_after = "0"
        self._refuse_from = 0
        self._in_flight = 0
        self.most_in_flight = 0
        self.arrivals: list[float] = []
        """When each answered (not refused) request arrived, monotonic seconds."""
        self.refused = 0
        self._pause = threading.Event()

    @property
    def api_base(self) -> str:
        """The ``base_url`` to configure: ``http://127.0.0.1:<port>/v1``."""
        return f"{self.base_url}/v1"

    def base_url_for(self, protocol: str) -> str:
        """The ``base_url`` of ``compile.llm`` for ``protocol`` (openai or anthropic)."""
        return self.base_url if protocol == "anthropic" else self.api_base

    def rate_limit(self, requests: int, *, retry_after: str = "0", after: int = 0) -> None:
        """Answer ``requests`` requests with 429 and ``Retry-After``, once ``after``
        more have been answered."""
        with self._lock:
            self._refuse, self._retry_after = requests, retry_after
            self._refuse_from = len(self.arrivals) + after

    def handle(self, request: RecordedRequest) -> FakeResponse:
        if request.method != "POST" or request.path not in (CHAT_COMPLETIONS, MESSAGES):
            return FakeResponse(404, b'{"error":{"message":"not found"}}', json_headers())
        with self._lock:
            if self._refuse > 0 and len(self.arrivals) >= self._refuse_from:
                self._refuse -= 1
                self.refused += 1
                body = b'{"error":{"message":"Rate limit reached","type":"requests"}}'
                return FakeResponse(429, body, json_headers({"Retry-After": self._retry_after}))
            self.arrivals.append(time.monotonic())
            self._in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self._in_flight)
        try:
            if self.latency:
                self._pause.wait(self.latency)
            return self._answer(request)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _answer(self, request: RecordedRequest) -> FakeResponse:
        sent = json.loads(request.body)
        if request.path == MESSAGES:
            if not request.headers.get("x-api-key") or not request.headers.get("anthropic-version"):
                return FakeResponse(401, b'{"type":"error"}', json_headers())
            asked = json.loads(sent["messages"][0]["content"])
        else:
            asked = json.loads(sent["messages"][1]["content"])
        content = extraction_answer(asked, echo=self.echo)
        prompt, completion = prompt_tokens_for(len(asked)), completion_tokens_for(len(asked))
        if request.path == MESSAGES:
            body: dict[str, Any] = {
                "id": f"msg_{request.number}",
                "type": "message",
                "role": "assistant",
                "model": sent["model"],
                "content": [{"type": "text", "text": content}],
                "stop_reason": "end_turn",
                "usage": {"input_tokens": prompt, "output_tokens": completion},
            }
        else:
            body = {
                "id": f"chatcmpl-{request.number}",
                "object": "chat.completion",
                "model": sent["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        return FakeResponse(200, compact_json(body), json_headers())
