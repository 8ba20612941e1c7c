"""The LLM compiler at scale, against a fake model on loopback, in both protocols
(OpenAI chat completions, Anthropic Messages): concurrent requests, 429 storms, the
token ceiling, token and cost accounting."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import SecretStr

from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft
from memsync.runtime.app.config import Settings
from memsync.runtime.app.handlers import compile_handler
from memsync.runtime.app.services import Services
from memsync.runtime.compiling import COMPILE_JOB, CompileSettings, LLMSettings, LLMSpend
from memsync.runtime.compiling.fake_model import (
    FakeModel,
    completion_tokens_for,
    prompt_tokens_for,
)
from memsync.runtime.ingest import IngestService
from memsync.runtime.jobs import JobOutcome, JobQueue, Worker
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store

NOW = datetime(2026, 5, 1, tzinfo=UTC)


@pytest.fixture(params=["openai", "anthropic"])
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fake_model() -> Iterator[FakeModel]:
    with FakeModel(latency=0.02) as model:
        yield model


def llm_services(store: Store, model: FakeModel, protocol: str, **limits: object) -> Services:
    llm = LLMSettings.model_validate(
        {
            "protocol": protocol,
            "base_url": model.base_url_for(protocol),
            "model": "extractor-1",
            "api_key": SecretStr("sk-test"),
            "batch_size": 1,
            "max_attempts": 3,
            **limits,
        }
    )
    settings = Settings(compile=CompileSettings(compiler="llm", llm=llm))
    return Services(settings, store, FakeClock(NOW))


def notes(subject: str, count: int) -> list[EpisodeDraft]:
    return [
        EpisodeDraft(
            subject,
            "chat",
            "note",
            # The subject in the text: episodes of equal content share one recorded
            # extraction, so two subjects' compiles on threads would race to ask for it.
            {"text": f"Note {number} from {subject}: I joined Acme."},
            idempotency_key=f"{subject}:{number}",
            occurred_at=NOW - timedelta(hours=count - number),
        )
        for number in range(count)
    ]


def test_requests_run_concurrently_up_to_the_limit_and_each_episode_is_asked_once(
    store: Store, fake_model: FakeModel, protocol: str
) -> None:
    IngestService(store).ingest("t1", notes("ana", 40))
    services = llm_services(store, fake_model, protocol, max_concurrency=4)
    result = services.compile_service.compile("t1", "ana")
    assert result.episodes_compiled == 40
    assert fake_model.request_count() == 40
    assert fake_model.most_in_flight <= 4
    assert services.compile_service.compile("t1", "ana").episodes_compiled == 0
    assert fake_model.request_count() == 40


def test_tokens_and_cost_are_what_the_model_reported_in_the_job_and_metrics(
    store: Store, fake_model: FakeModel, protocol: str
) -> None:
    IngestService(store).ingest("t1", notes("ana", 6))
    services = llm_services(
        store,
        fake_model,
        protocol,
        max_concurrency=2,
        prompt_price_per_million=2.5,
        completion_price_per_million=10.0,
    )
    queue = JobQueue(store)
    job, _ = queue.enqueue("t1", COMPILE_JOB, "ana", now=NOW)
    worker = Worker(
        queue,
        {COMPILE_JOB: compile_handler(services.compile_service, queue)},
        clock=FakeClock(NOW),
        lease=timedelta(seconds=60),
        name="test-llm",
    )
    worker.run_once()
    done = queue.get("t1", job.id)
    assert done is not None
    assert done.outcome is JobOutcome.SUCCEEDED
    prompt, completion = 6 * prompt_tokens_for(1), 6 * completion_tokens_for(1)
    cost = round((prompt * 2.5 + completion * 10.0) / 1_000_000, 6)
    assert done.result is not None
    assert done.result["llm"] == LLMSpend("extractor-1", 6, prompt, completion, cost).to_dict()
    assert json.loads(json.dumps(done.to_dict()))["result"]["llm"]["prompt_tokens"] == prompt

    exposition = services.metrics.exposition().decode()
    assert 'memsync_llm_requests_total{model="extractor-1",outcome="ok"} 6.0' in exposition
    assert f'memsync_llm_tokens_total{{kind="prompt",model="extractor-1"}} {prompt}.0' in (
        exposition
    )
    assert (
        f'memsync_llm_tokens_total{{kind="completion",model="extractor-1"}} {completion}.0'
        in exposition
    )


def test_a_compile_stops_partial_at_its_token_ceiling_and_a_rerun_asks_only_for_the_rest(
    store: Store, fake_model: FakeModel, protocol: str
) -> None:
    IngestService(store).ingest("t1", notes("ana", 5))
    # One request (one episode) reports 121 tokens: the ceiling stops the next.
    capped = llm_services(store, fake_model, protocol, max_concurrency=1, max_tokens_per_job=100)
    stopped = capped.compile_service.compile("t1", "ana")
    assert stopped.stopped == "max_tokens_per_job"
    assert stopped.llm is not None
    assert stopped.llm.requests == 1
    assert fake_model.request_count() == 1

    rerun = llm_services(store, fake_model, protocol).compile_service.compile("t1", "ana")
    assert rerun.stopped is None
    assert rerun.episodes_compiled == 5
    assert fake_model.request_count() == 5  # 1 + the 4 missing


def test_a_429_storm_ends_the_compile_partial_and_loses_no_extraction(
    store: Store, fake_model: FakeModel, protocol: str
) -> None:
    IngestService(store).ingest("t1", notes("ana", 4))
    fake_model.rate_limit(1_000)
    services = llm_services(store, fake_model, protocol, max_concurrency=2)
    stopped = services.compile_service.compile("t1", "ana")
    assert stopped.stopped == "rate_limited"
    assert stopped.episodes_compiled == 0
    exposition = services.metrics.exposition().decode()
    assert 'memsync_llm_requests_total{model="extractor-1",outcome="rate_limited"}' in exposition

    fake_model.rate_limit(0)
    assert services.compile_service.compile("t1", "ana").episodes_compiled == 4


def test_429s_within_the_retry_caps_are_retried_after_retry_after(
    store: Store, fake_model: FakeModel, protocol: str
) -> None:
    IngestService(store).ingest("t1", notes("ana", 3))
    fake_model.rate_limit(2, retry_after="0")
    services = llm_services(store, fake_model, protocol, max_concurrency=1)
    result = services.compile_service.compile("t1", "ana")
    assert result.stopped is None
    assert result.episodes_compiled == 3
    assert fake_model.refused == 2


def test_a_job_stopped_at_its_ceiling_ends_partial(
    store: Store, fake_model: FakeModel, protocol: str
) -> None:
    IngestService(store).ingest("t1", notes("ana", 3))
    services = llm_services(store, fake_model, protocol, max_concurrency=1, max_tokens_per_job=100)
    queue = JobQueue(store)
    job, _ = queue.enqueue("t1", COMPILE_JOB, "ana", now=NOW)
    Worker(
        queue,
        {COMPILE_JOB: compile_handler(services.compile_service, queue)},
        clock=FakeClock(NOW),
        lease=timedelta(seconds=60),
        name="test-llm",
    ).run_once()
    done = queue.get("t1", job.id)
    assert done is not None
    assert done.outcome is JobOutcome.PARTIAL
    assert done.result is not None
    assert done.result["stopped"] == "max_tokens_per_job"


def test_both_protocols_give_the_same_memories_for_the_same_answers(
    store: Store, fake_model: FakeModel
) -> None:
    """Each protocol compiles its own tenant (records are per tenant, so the second
    really asks): the memories are equal but for their ids."""
    for tenant, protocol in (("t-openai", "openai"), ("t-anthropic", "anthropic")):
        IngestService(store).ingest(tenant, notes("ana", 5))
        llm_services(store, fake_model, protocol).compile_service.compile(tenant, "ana")
    assert fake_model.request_count() == 10

    def memories(tenant: str) -> list[tuple[object, ...]]:
        return sorted(
            (m.kind, m.content, m.status, m.claim_key, m.claim_value, m.confidence, m.valid_from)
            for m in MemoryRepository(store).memories(tenant, "ana", statuses=None)
        )

    assert memories("t-openai") == memories("t-anthropic") != []


def test_a_compile_cut_short_keeps_every_answer_and_a_rerun_asks_only_for_the_rest(
    store: Store, fake_model: FakeModel, protocol: str
) -> None:
    IngestService(store).ingest("t1", notes("ana", 5))
    fake_model.rate_limit(1_000, after=2)  # two answers, then a storm past the retries
    services = llm_services(store, fake_model, protocol, max_concurrency=1)

    stopped = services.compile_service.compile("t1", "ana")
    answered = len(fake_model.arrivals)
    fake_model.rate_limit(0)
    rerun = services.compile_service.compile("t1", "ana")

    assert stopped.stopped == "rate_limited"
    assert answered == 2
    assert stopped.llm is not None
    assert stopped.llm.requests == 2
    assert rerun.episodes_compiled == 5
    assert len(fake_model.arrivals) == 5  # the two answers were replayed, not asked again
    exposition = services.metrics.exposition().decode()
    prompt = 5 * prompt_tokens_for(1)  # 2 answers in the stopped compile, 3 in the rerun
    assert f'memsync_llm_tokens_total{{kind="prompt",model="extractor-1"}} {prompt}.0' in (
        exposition
    )


def test_compiles_on_several_threads_share_the_process_budget(
    store: Store, fake_model: FakeModel, protocol: str
) -> None:
    subjects = ["ana", "bob", "cy", "dee"]
    for subject in subjects:
        IngestService(store).ingest("t1", notes(subject, 6))
    service = llm_services(store, fake_model, protocol, max_concurrency=2).compile_service

    with ThreadPoolExecutor(len(subjects)) as pool:
        results = list(pool.map(lambda subject: service.compile("t1", subject), subjects))

    assert [result.episodes_compiled for result in results] == [6] * len(subjects)
    assert fake_model.request_count() == 6 * len(subjects)
    assert fake_model.most_in_flight <= 2
