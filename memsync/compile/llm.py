"""The LLM compiler: extraction by a model that speaks OpenAI-compatible chat
completions or Anthropic's Messages API.

The only module of ``memsync.compile`` that talks HTTP, and only through the
``httpx.Client`` it is given (tests pass one with a respx mock; production passes one
with timeouts and retries configured).

Determinism comes from recording, not from the model: every episode's extraction is
stored under ``extraction_key(content_hash, model, PROMPT_VERSION)`` in an
``ExtractionRecorder``. Compiling an episode whose key is recorded replays the record
and makes no request, so a second compile sees the same candidates as the first. An
edited episode has a new content hash and is extracted afresh; a new model or prompt
version re-extracts everything.

The model must answer with JSON of the shape ``ExtractionResponse``; anything else
(not JSON, missing episodes, unknown kinds, extra fields) raises ``LLMExtractionError``
and records nothing for that batch. Claim keys are mapped through the claim registry;
a key the registry does not know is dropped (the memory is kept as an unkeyed
statement, with ``metadata["unregistered_claim_key"]``) because a model inventing a key
must not invent a conflict slot.
"""

from __future__ import annotations

import contextvars
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memsync.compile.budget import RequestBudget
from memsync.compile.claims import ClaimRegistry
from memsync.compile.text import passages
from memsync.compile.types import CandidateMemory, EpisodeView, MemoryKind, in_episode_order
from memsync.connectors.errors import RateLimited, RateLimitExhausted, RetryableError
from memsync.connectors.retry import Retrier, RetryPolicy, retry_after_from_headers

__all__ = [
    "PROMPT_VERSION",
    "SYSTEM_PROMPT",
    "EpisodeExtraction",
    "ExtractedMemory",
    "ExtractionRecord",
    "ExtractionRecorder",
    "ExtractionResponse",
    "InMemoryExtractionRecorder",
    "LLMCompiler",
    "LLMExtractionError",
    "LLMStopped",
    "TokenUsage",
    "extraction_key",
]

PROMPT_VERSION = "extract-v1"

SYSTEM_PROMPT = """\
You extract durable memories about a subject from episodes (chats, issues, messages).
Answer with one JSON object and nothing else:
{"episodes": [{"episode_id": "<id>", "memories": [
  {"kind": "profile_fact|preference|current_state|decision|fact|episode_summary",
   "content": "<short third-person statement>",
   "claim_key": "<dotted key or null>", "claim_value": "<value or null>",
   "confidence": 0.0-1.0, "negated": false, "explicit_change": false}]}]}
Rules: one entry per input episode, in any order; only the subject's own words make
claims about the subject; ignore quoted, hypothetical and questioned statements;
"I no longer X" is negated=true; "I moved to / I now work at" is explicit_change=true;
past tense ("I used to live in X") is not a current claim.
Known claim keys: {claim_keys}
"""


class LLMExtractionError(RuntimeError):
    """The model could not be reached or its answer was not the promised JSON."""


class LLMStopped(LLMExtractionError):
    """The compile stopped asking before every episode was extracted, on purpose:
    ``reason`` is ``max_tokens_per_job`` (the ceiling was reached) or ``rate_limited``
    (the model kept answering 429 past the retry caps). Every answer received before
    is recorded; a rerun asks only for the rest."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Requests answered and the tokens the model reported for them (its ``usage``)."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.requests + other.requests,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )


class ExtractedMemory(BaseModel):
    """One memory as the model states it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: MemoryKind
    content: str = Field(min_length=1, max_length=1000)
    claim_key: str | None = None
    claim_value: str | None = None
    confidence: float = Field(default=0.7, ge=0.0, le=1.0)
    negated: bool = False
    explicit_change: bool = False


class EpisodeExtraction(BaseModel):
    """The memories of one episode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episode_id: str
    memories: list[ExtractedMemory]


class ExtractionResponse(BaseModel):
    """The whole answer to one batch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episodes: list[EpisodeExtraction]


def extraction_key(content_hash: str, model: str, prompt_version: str = PROMPT_VERSION) -> str:
    """The record key: what was read (content), by whom (model) and how (prompt)."""
    return f"{prompt_version}:{model}:{content_hash}"


class ExtractionRecord(BaseModel):
    """One recorded extraction as it travels between stores (``memsync llm export``, one
    JSON line each): keyed by the prompt version, the model and the content hash of the
    episode read, and holding only what the model extracted. No tenant, subject or
    episode id and no episode text: a record applies to any episode with that content,
    in any store."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_version: str = Field(min_length=1)
    model: str = Field(min_length=1)
    content_hash: str = Field(pattern=r"^[0-9a-f]{16,128}$")
    memories: list[ExtractedMemory]

    @classmethod
    def of(cls, key: str, extraction_json: str) -> ExtractionRecord:
        """The record stored under ``key`` (see :func:`extraction_key`)."""
        prompt_version, rest = key.split(":", 1)
        # A model name may hold colons (``llama3:8b``); a prompt version and a hash do not.
        model, content_hash = rest.rsplit(":", 1)
        return cls(
            prompt_version=prompt_version,
            model=model,
            content_hash=content_hash,
            memories=_Memories.model_validate_json(extraction_json).memories,
        )

    @property
    def key(self) -> str:
        return extraction_key(self.content_hash, self.model, self.prompt_version)

    def extraction_json(self) -> str:
        """What a recorder stores under :attr:`key`."""
        return _Memories(memories=self.memories).model_dump_json()


class ExtractionRecorder(Protocol):
    """Durable memo of extractions, keyed by ``extraction_key``.

    Repeats: ``put`` of a key already recorded keeps the first record (the compile that
    got there first wins; both extracted the same content with the same model and
    prompt). ``get`` of an unknown key returns ``None``. Records are JSON text so a SQL
    implementation can store them in one column.
    """

    def get(self, key: str) -> str | None:
        """Return the recorded extraction JSON for ``key``, or ``None``."""
        ...

    def put(self, key: str, extraction_json: str) -> None:
        """Record ``extraction_json`` under ``key`` unless the key is already recorded."""
        ...


class InMemoryExtractionRecorder:
    """An ``ExtractionRecorder`` in a dict, for tests and one-off runs."""

    def __init__(self) -> None:
        self._records: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._records.get(key)

    def put(self, key: str, extraction_json: str) -> None:
        with self._lock:
            self._records.setdefault(key, extraction_json)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)


class _Memories(BaseModel):
    """A recorded extraction: the memories of one episode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memories: list[ExtractedMemory]


class LLMCompiler:
    """``Compiler`` backed by a model, with recorded extractions. ``protocol`` is what
    the endpoint speaks: ``openai`` (chat completions at ``{base_url}/chat/completions``)
    or ``anthropic`` (the Messages API at ``{base_url}/v1/messages``, ``base_url`` the
    API root); the prompt, the validation of the answer and the records are the same.

    Repeats: an episode already recorded under the current model and prompt version is
    replayed with zero HTTP calls, so re-compiling yields equal candidates. Conflicts:
    none decided here; the resolver settles them.

    Requests go out through ``budget`` (the process's concurrency and rate limits;
    without one, one request at a time and no limit), each retried by ``retrier`` on
    429 and 5xx (after ``Retry-After``, else backoff). ``usage`` sums what the model
    reported over this compiler's life (one compile), and ``on_usage`` is told each
    answered request's (the metrics); ``max_tokens`` stops asking once it is reached
    (:class:`LLMStopped`), the requests already in flight included.
    """

    def __init__(
        self,
        client: httpx.Client,
        *,
        base_url: str,
        model: str,
        api_key: str,
        recorder: ExtractionRecorder,
        registry: ClaimRegistry | None = None,
        batch_size: int = 8,
        budget: RequestBudget | None = None,
        retrier: Retrier | None = None,
        max_tokens: int | None = None,
        replay_only: bool = False,
        protocol: Literal["openai", "anthropic"] = "openai",
        max_output_tokens: int = 4096,
        on_usage: Callable[[TokenUsage], None] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self._client = client
        self._protocol: _ChatCompletions | _AnthropicMessages = (
            _AnthropicMessages(max_output_tokens) if protocol == "anthropic" else _ChatCompletions()
        )
        self._url = self._protocol.url(base_url)
        self._model = model
        self._api_key = api_key
        self._recorder = recorder
        self._registry = registry or ClaimRegistry.default()
        self._batch_size = batch_size
        self._budget = budget or RequestBudget()
        self._retrier = retrier or Retrier(RetryPolicy())
        self._max_tokens = max_tokens
        self._replay_only = replay_only
        self._usage = TokenUsage()
        self._usage_lock = threading.Lock()
        self._on_usage = on_usage
        self._prompt = SYSTEM_PROMPT.replace(
            "{claim_keys}", ", ".join(key.name for key in self._registry)
        )

    prepares_ahead = True

    @property
    def model(self) -> str:
        return self._model

    @property
    def usage(self) -> TokenUsage:
        """What the model reported for every request this compiler made so far."""
        with self._usage_lock:
            return self._usage

    def prepare(self, episodes: Sequence[EpisodeView]) -> None:
        """Ask the model about every episode whose extraction is not recorded yet, in
        batches of ``batch_size``, up to the budget's concurrency at once, and record
        each batch's answer as it arrives (validated in full before any of it is
        recorded). When a batch fails, no further batch is started, those in flight
        are awaited and recorded, and the first failure (in time order) is raised:
        ``LLMStopped`` for the token ceiling or a rate limit past the retry caps,
        ``LLMExtractionError`` otherwise. With ``replay_only``, nothing is asked and
        ``LLMExtractionError`` names the episodes not recorded.
        """
        ordered = in_episode_order(episodes)
        missing = [view for view in ordered if self._recorded(view) is None]
        unique_missing = list({self._key(view): view for view in missing}.values())
        if not unique_missing:
            return
        if self._replay_only:
            raise LLMExtractionError(
                f"replay only, and no extraction is recorded (model {self._model!r}, prompt "
                f"{PROMPT_VERSION}) for {len(missing)} episode(s): "
                + ", ".join(str(view.id) for view in missing[:20])
                + (" and more" if len(missing) > 20 else "")
                + "; import them with `memsync llm import` or compile without --replay-only"
            )
        batches = [
            unique_missing[start : start + self._batch_size]
            for start in range(0, len(unique_missing), self._batch_size)
        ]
        stopping = threading.Event()

        def extract(batch: Sequence[EpisodeView]) -> BaseException | None:
            if stopping.is_set():
                return None
            if self._max_tokens is not None and self.usage.total_tokens >= self._max_tokens:
                stopping.set()
                return LLMStopped(
                    f"the compile used {self.usage.total_tokens} tokens, at its ceiling of "
                    f"{self._max_tokens} (compile.llm.max_tokens_per_job); what was "
                    "extracted is kept and a rerun asks only for the rest",
                    reason="max_tokens_per_job",
                )
            try:
                self._extract(batch)
            except Exception as error:  # raised below, once the batches in flight are done
                stopping.set()
                return error
            return None

        workers = min(self._budget.max_concurrency, len(batches))
        with ThreadPoolExecutor(workers, thread_name_prefix="llm-request") as pool:
            # Each request thread logs with the compile's tenant and subject.
            futures = [
                pool.submit(contextvars.copy_context().run, extract, batch) for batch in batches
            ]
            failures = [future.result() for future in futures]
        first = next((failure for failure in failures if failure is not None), None)
        if first is not None:
            raise first

    def compile(self, episodes: Sequence[EpisodeView]) -> list[CandidateMemory]:
        """Return candidates for ``episodes`` ordered by (occurred_at, id).

        Whatever :meth:`prepare` has not recorded yet is extracted first (see there).
        Raises ``LLMExtractionError``.
        """
        self.prepare(episodes)
        ordered = in_episode_order(episodes)
        candidates: list[CandidateMemory] = []
        for view in ordered:
            recorded = self._recorded(view)
            if recorded is None:  # pragma: no cover - _extract records or raises
                raise LLMExtractionError(f"no extraction recorded for episode {view.id}")
            candidates.extend(self._candidates(view, recorded))
        return candidates

    def _key(self, view: EpisodeView) -> str:
        return extraction_key(view.content_hash, self._model)

    def _recorded(self, view: EpisodeView) -> list[ExtractedMemory] | None:
        raw = self._recorder.get(self._key(view))
        if raw is None:
            return None
        return _Memories.model_validate_json(raw).memories

    def _extract(self, batch: Sequence[EpisodeView]) -> None:
        response = self._ask(batch)
        by_id = {item.episode_id: item for item in response.episodes}
        asked = {str(view.id) for view in batch}
        if set(by_id) != asked or len(by_id) != len(response.episodes):
            raise LLMExtractionError(
                f"model {self._model!r} answered for episodes {sorted(by_id)} "
                f"but was asked about {sorted(asked)}; nothing was recorded"
            )
        for view in batch:
            memories = _Memories(memories=by_id[str(view.id)].memories)
            self._recorder.put(self._key(view), memories.model_dump_json())

    def _ask(self, batch: Sequence[EpisodeView]) -> ExtractionResponse:
        user = json.dumps(list(_describe(batch)))
        request = self._protocol.body(self._model, self._prompt, user)
        # About four characters a token: the estimate the budget counts until the
        # model says what the request really cost.
        estimate = (len(self._prompt) + len(user)) // 4
        try:
            body = self._retrier.call(
                lambda: self._post(request, estimate), what=f"POST {self._url}"
            )
        except RateLimitExhausted as error:
            raise LLMStopped(
                f"model endpoint {self._url} kept rate limiting: {error}; what was "
                "extracted is kept and a rerun asks only for the rest",
                reason="rate_limited",
            ) from error
        except RetryableError as error:
            raise LLMExtractionError(f"model endpoint {self._url} failed: {error}") from error
        try:
            content = self._protocol.content(body)
        except (KeyError, IndexError, TypeError) as error:
            raise LLMExtractionError(
                f"model endpoint {self._url} did not return a {self._protocol.answer} response"
            ) from error
        if not isinstance(content, str):
            raise LLMExtractionError(f"model {self._model!r} returned no message content")
        try:
            return ExtractionResponse.model_validate_json(content)
        except ValidationError as error:
            raise LLMExtractionError(
                f"model {self._model!r} returned output that is not the extraction JSON "
                f"(prompt {PROMPT_VERSION}): {error.error_count()} problem(s), first: "
                f"{error.errors()[0]['msg']} at {error.errors()[0]['loc']}"
            ) from error

    def _post(self, request: dict[str, object], estimate: int) -> dict[str, Any]:
        """One attempt: wait for the budget, send, count the usage. 429 and 5xx raise
        the retryable errors the retrier waits on; other failures are final."""
        with self._budget.slot(estimate) as reservation:
            try:
                reply = self._client.post(
                    self._url, json=request, headers=self._protocol.headers(self._api_key)
                )
            except httpx.ConnectError as error:
                # Nothing listens there (a wrong base_url, a server down): say so now
                # rather than after the retries' backoff.
                raise LLMExtractionError(
                    f"model endpoint {self._url} unreachable: {error}"
                ) from error
            except httpx.TransportError as error:  # a timeout, a dropped connection
                raise RetryableError(f"no answer: {error}") from error
        if reply.status_code == 429 or reply.status_code >= 500:
            wait = retry_after_from_headers(reply.headers, datetime.now(UTC))
            if reply.status_code == 429:
                raise RateLimited("HTTP 429", retry_after=wait)
            raise RetryableError(f"HTTP {reply.status_code}", retry_after=wait)
        if reply.is_error:
            raise LLMExtractionError(
                f"model endpoint {self._url} answered HTTP {reply.status_code}; "
                "check base_url, model and api key"
            )
        not_an_answer = LLMExtractionError(
            f"model endpoint {self._url} did not return a {self._protocol.answer} response"
        )
        try:
            body = reply.json()
        except ValueError as error:
            raise not_an_answer from error
        if not isinstance(body, dict):
            raise not_an_answer
        used = self._protocol.usage(body)
        self._budget.settle(reservation, used.total_tokens or estimate)
        with self._usage_lock:
            self._usage += used
        if self._on_usage is not None:
            self._on_usage(used)
        return body

    def _candidates(
        self, view: EpisodeView, memories: Sequence[ExtractedMemory]
    ) -> Iterator[CandidateMemory]:
        for memory in memories:
            claim_key = memory.claim_key
            metadata: dict[str, str] = {"compiler": "llm", "model": self._model}
            if claim_key is not None and claim_key not in self._registry:
                metadata["unregistered_claim_key"] = claim_key
                claim_key = None
            has_claim = claim_key is not None and bool(memory.claim_value)
            yield CandidateMemory(
                subject_id=view.subject_id,
                kind=memory.kind,
                content=memory.content,
                claim_key=self._registry.canonical(claim_key) if has_claim and claim_key else None,
                claim_value=memory.claim_value if has_claim else None,
                confidence=memory.confidence,
                valid_from=view.occurred_at,
                source_episode_ids=(view.id,),
                metadata=metadata,
                negated=memory.negated and has_claim,
                explicit_change=memory.explicit_change,
            )


def _counted(usage: object, prompt_field: str, completion_field: str) -> TokenUsage:
    """One answered request and the tokens its ``usage`` object reports (0 if absent)."""
    if not isinstance(usage, dict):
        return TokenUsage(requests=1)
    prompt, completion = usage.get(prompt_field, 0), usage.get(completion_field, 0)
    return TokenUsage(
        1,
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


class _ChatCompletions:
    """OpenAI's chat completions, which OpenAI, Azure OpenAI, vLLM, Ollama and most
    gateways speak (https://platform.openai.com/docs/api-reference/chat/create):
    ``POST {base_url}/chat/completions``, the answer in ``choices[0].message.content``."""

    answer = "chat-completions"

    def url(self, base_url: str) -> str:
        return base_url.rstrip("/") + "/chat/completions"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def body(self, model: str, system: str, user: str) -> dict[str, object]:
        return {
            "model": model,
            "temperature": 0,
            "response_format": {"type": "json_object"},
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        }

    def content(self, body: dict[str, Any]) -> object:
        return body["choices"][0]["message"]["content"]

    def usage(self, body: dict[str, Any]) -> TokenUsage:
        return _counted(body.get("usage"), "prompt_tokens", "completion_tokens")


ANTHROPIC_VERSION = "2023-06-01"


class _AnthropicMessages:
    """Anthropic's Messages API (https://docs.anthropic.com/en/api/messages):
    ``POST {base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version``, the
    system prompt beside the messages, the answer in the ``text`` blocks of ``content``
    and the tokens in ``usage.input_tokens`` / ``output_tokens``. ``max_tokens`` is
    required: ``max_output_tokens``."""

    answer = "Messages API"

    def __init__(self, max_output_tokens: int) -> None:
        self._max_output_tokens = max_output_tokens

    def url(self, base_url: str) -> str:
        return base_url.rstrip("/") + "/v1/messages"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION}

    def body(self, model: str, system: str, user: str) -> dict[str, object]:
        return {
            "model": model,
            "max_tokens": self._max_output_tokens,
            "temperature": 0,
            "system": system,
            "messages": [{"role": "user", "content": user}],
        }

    def content(self, body: dict[str, Any]) -> object:
        blocks = body["content"]
        texts = [block["text"] for block in blocks if block["type"] == "text"]
        return "".join(texts) if texts else None

    def usage(self, body: dict[str, Any]) -> TokenUsage:
        return _counted(body.get("usage"), "input_tokens", "output_tokens")


def _describe(batch: Sequence[EpisodeView]) -> Iterator[dict[str, object]]:
    for view in batch:
        yield {
            "episode_id": str(view.id),
            "source": view.source,
            "type": view.type,
            "occurred_at": view.occurred_at.isoformat(),
            "passages": [
                {"text": passage.text, "speaks_for_subject": passage.speaks_for_subject}
                for passage in passages(view.payload)
            ],
        }
