"""The LLM compiler through the compile service: recorded extractions in the store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import pytest
import respx
from pydantic import SecretStr

from memsync.clock import FakeClock
from memsync.compile.llm import LLMExtractionError
from memsync.episode import EpisodeDraft
from memsync.runtime.compiling import CompileService, CompileSettings, LLMSettings
from memsync.runtime.compiling.fake_model import extraction_answer
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store

BASE_URL = "https://llm.test/v1"


def model_answer(request: httpx.Request) -> httpx.Response:
    """A model stand-in: one employer claim per episode it is asked about."""
    asked = json.loads(json.loads(request.content)["messages"][1]["content"])
    content = extraction_answer(asked)
    return httpx.Response(200, json={"choices": [{"message": {"content": content}}]})


@pytest.fixture
def model() -> Iterator[respx.MockRouter]:
    with respx.mock(base_url=BASE_URL, assert_all_called=False) as router:
        router.post("/chat/completions").mock(side_effect=model_answer)
        yield router


def llm_service(store: Store) -> CompileService:
    settings = CompileSettings(
        compiler="llm",
        llm=LLMSettings(base_url=BASE_URL, model="extractor-1", api_key=SecretStr("sk-test")),
    )
    return CompileService.from_settings(
        store, settings, FakeClock(datetime(2026, 5, 1, tzinfo=UTC))
    )


def note(key: str, text: str) -> EpisodeDraft:
    return EpisodeDraft(
        "ana",
        "chat",
        "note",
        {"text": text},
        idempotency_key=key,
        occurred_at=datetime(2026, 4, 1, tzinfo=UTC),
    )


def test_the_model_is_asked_once_per_episode_content_even_across_services(
    store: Store, model: respx.MockRouter
) -> None:
    IngestService(store).ingest("t1", [note("n1", "I joined Acme.")])
    first = llm_service(store).compile("t1", "ana")
    assert first.memories_created == 1
    assert model.calls.call_count == 1

    # A second episode with the same content, and a fresh service
    # (another process): the recorded extraction is replayed from the store.
    IngestService(store).ingest("t1", [note("n2", "I joined Acme.")])
    again = llm_service(store).compile("t1", "ana")
    assert again.memories_created == 0
    assert again.episodes_compiled == 1
    assert model.calls.call_count == 1
    [memory] = MemoryRepository(store).memories("t1", "ana")
    assert len(memory.source_episode_ids) == 2


def test_a_model_failure_consumes_nothing(store: Store) -> None:
    IngestService(store).ingest("t1", [note("n1", "I joined Acme.")])
    with respx.mock(base_url=BASE_URL) as router:
        router.post("/chat/completions").mock(return_value=httpx.Response(200, text="not json"))
        with pytest.raises(LLMExtractionError, match="chat-completions"):
            llm_service(store).compile("t1", "ana")
    assert MemoryRepository(store).memories("t1", "ana") == []
    with respx.mock(base_url=BASE_URL) as router:
        router.post("/chat/completions").mock(side_effect=model_answer)
        assert llm_service(store).compile("t1", "ana").episodes_compiled == 1
