from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
import pytest
import respx
from hypothesis import given
from hypothesis import strategies as st

from memsync.compile.llm import (
    PROMPT_VERSION,
    ExtractionRecord,
    InMemoryExtractionRecorder,
    LLMCompiler,
    LLMExtractionError,
    extraction_key,
)
from memsync.compile.types import EpisodeView, MemoryKind
from memsync.episode import content_hash

ROOT_URL = "https://llm.test"
MODEL = "tiny-extractor"


def view(number: int, text: str) -> EpisodeView:
    payload = {"text": text}
    return EpisodeView(
        id=uuid.UUID(int=number),
        subject_id="alice",
        source="api",
        type="note",
        payload=payload,
        occurred_at=datetime(2026, 2, number, tzinfo=UTC),
        revision=1,
        content_hash=content_hash(payload),
    )


def lisbon_answer(asked: list[dict[str, Any]]) -> str:
    """A model stand-in's message: one home-city claim per episode it was asked about."""
    return json.dumps(
        {
            "episodes": [
                {
                    "episode_id": item["episode_id"],
                    "memories": [
                        {
                            "kind": "profile_fact",
                            "content": "Lives in Lisbon",
                            "claim_key": "location.city",
                            "claim_value": "Lisbon",
                            "confidence": 0.9,
                        }
                    ],
                }
                for item in asked
            ]
        }
    )


@dataclass
class Endpoint:
    """A mocked model endpoint speaking one protocol; the same tests run against each.

    openai: chat completions (https://platform.openai.com/docs/api-reference/chat/create);
    anthropic: the Messages API (https://docs.anthropic.com/en/api/messages)."""

    router: respx.MockRouter
    protocol: Literal["openai", "anthropic"]

    @property
    def key_header(self) -> tuple[str, str]:
        if self.protocol == "anthropic":
            return ("x-api-key", "sk-test")
        return ("Authorization", "Bearer sk-test")

    def route(self) -> respx.Route:
        path = "/v1/messages" if self.protocol == "anthropic" else "/v1/chat/completions"
        return self.router.post(path)

    def completion(self, content: str) -> httpx.Response:
        if self.protocol == "anthropic":
            body: dict[str, Any] = {"content": [{"type": "text", "text": content}]}
        else:
            body = {"choices": [{"message": {"content": content}}]}
        return httpx.Response(200, json=body)

    def answer_for(self, request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        user = sent["messages"][0 if self.protocol == "anthropic" else 1]["content"]
        return self.completion(lisbon_answer(json.loads(user)))

    def compiler(self, recorder: InMemoryExtractionRecorder, batch_size: int = 8) -> LLMCompiler:
        return LLMCompiler(
            httpx.Client(),
            base_url=ROOT_URL if self.protocol == "anthropic" else f"{ROOT_URL}/v1",
            model=MODEL,
            api_key="sk-test",
            recorder=recorder,
            batch_size=batch_size,
            protocol=self.protocol,
        )


@pytest.fixture(params=["openai", "anthropic"])
def api(request: pytest.FixtureRequest) -> Iterator[Endpoint]:
    with respx.mock(base_url=ROOT_URL, assert_all_called=False) as router:
        yield Endpoint(router, request.param)


def test_extractions_become_candidates_with_canonical_claim_keys(api: Endpoint) -> None:
    route = api.route().mock(side_effect=api.answer_for)

    (candidate,) = api.compiler(InMemoryExtractionRecorder()).compile([view(1, "I live in Lisbon")])

    assert (candidate.kind, candidate.claim_key, candidate.claim_value) == (
        MemoryKind.PROFILE_FACT,
        "location.home_city",
        "lisbon",
    )
    assert candidate.source_episode_ids == (uuid.UUID(int=1),)
    sent = json.loads(route.calls.last.request.content)
    assert sent["model"] == MODEL
    name, value = api.key_header
    assert route.calls.last.request.headers[name] == value


def test_a_rerun_replays_the_record_and_makes_no_http_call(api: Endpoint) -> None:
    route = api.route().mock(side_effect=api.answer_for)
    recorder = InMemoryExtractionRecorder()
    episodes = [view(1, "I live in Lisbon"), view(2, "Still in Lisbon")]
    first = api.compiler(recorder).compile(episodes)
    calls_after_first = route.call_count

    second = api.compiler(recorder).compile(episodes)

    assert calls_after_first == 1
    assert route.call_count == calls_after_first
    assert second == first


def test_extractions_are_recorded_under_content_hash_model_and_prompt_version(
    api: Endpoint,
) -> None:
    api.route().mock(side_effect=api.answer_for)
    recorder = InMemoryExtractionRecorder()
    episode = view(1, "I live in Lisbon")

    api.compiler(recorder).compile([episode])

    key = extraction_key(episode.content_hash, MODEL)
    assert key == f"{PROMPT_VERSION}:{MODEL}:{episode.content_hash}"
    assert recorder.get(key) is not None


def test_episodes_are_sent_in_batches(api: Endpoint) -> None:
    route = api.route().mock(side_effect=api.answer_for)

    api.compiler(InMemoryExtractionRecorder(), batch_size=2).compile(
        [view(n, f"note {n}") for n in range(1, 6)]
    )

    assert route.call_count == 3


def test_invalid_model_json_raises_a_clear_error_and_records_nothing(
    api: Endpoint,
) -> None:
    api.route().mock(return_value=api.completion("Sure! Here are the memories"))
    recorder = InMemoryExtractionRecorder()

    with pytest.raises(LLMExtractionError, match="not the extraction JSON"):
        api.compiler(recorder).compile([view(1, "I live in Lisbon")])
    assert len(recorder) == 0


@pytest.mark.parametrize(
    "bad_memory",
    [
        {"kind": "gossip", "content": "x"},
        {"kind": "fact", "content": "x", "mood": "happy"},
        {"kind": "fact", "content": "x", "confidence": 3},
    ],
)
def test_output_outside_the_schema_is_rejected(api: Endpoint, bad_memory: dict[str, Any]) -> None:
    body = {"episodes": [{"episode_id": str(uuid.UUID(int=1)), "memories": [bad_memory]}]}
    api.route().mock(return_value=api.completion(json.dumps(body)))

    with pytest.raises(LLMExtractionError, match="not the extraction JSON"):
        api.compiler(InMemoryExtractionRecorder()).compile([view(1, "text")])


def test_an_answer_that_skips_an_episode_is_rejected(api: Endpoint) -> None:
    api.route().mock(return_value=api.completion('{"episodes": []}'))

    with pytest.raises(LLMExtractionError, match="nothing was recorded"):
        api.compiler(InMemoryExtractionRecorder()).compile([view(1, "text")])


def test_an_http_error_names_the_endpoint(api: Endpoint) -> None:
    api.route().mock(return_value=httpx.Response(401))

    with pytest.raises(LLMExtractionError, match="HTTP 401; check base_url, model and api key"):
        api.compiler(InMemoryExtractionRecorder()).compile([view(1, "text")])


def test_an_unregistered_claim_key_becomes_an_unkeyed_statement(api: Endpoint) -> None:
    memory = {
        "kind": "fact",
        "content": "Has 2 cats",
        "claim_key": "pets.count",
        "claim_value": "2",
    }
    body = {"episodes": [{"episode_id": str(uuid.UUID(int=1)), "memories": [memory]}]}
    api.route().mock(return_value=api.completion(json.dumps(body)))

    (candidate,) = api.compiler(InMemoryExtractionRecorder()).compile([view(1, "I have 2 cats")])

    assert candidate.claim_key is None
    assert candidate.metadata["unregistered_claim_key"] == "pets.count"


def test_the_recorder_keeps_the_first_record_for_a_key() -> None:
    recorder = InMemoryExtractionRecorder()

    recorder.put("k", '{"memories": []}')
    recorder.put("k", '{"memories": [1]}')

    assert recorder.get("k") == '{"memories": []}'
    assert recorder.get("other") is None


@given(
    model=st.text(st.characters(codec="ascii", exclude_characters="\n"), min_size=1, max_size=30),
    digest=st.text("0123456789abcdef", min_size=64, max_size=64),
)
def test_an_exported_record_keeps_its_key_whatever_colons_the_model_name_holds(
    model: str, digest: str
) -> None:
    key = extraction_key(digest, model)
    extraction = '{"memories":[{"kind":"fact","content":"Uses Rust"}]}'

    record = ExtractionRecord.of(key, extraction)

    assert record.key == key
    assert ExtractionRecord.model_validate_json(record.model_dump_json()) == record
    assert json.loads(record.extraction_json())["memories"][0]["content"] == "Uses Rust"
