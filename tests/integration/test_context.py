"""POST /v1/context: only current truth, deterministic without as_of, and the indexed
ranking is the exhaustive one, byte for byte."""

from __future__ import annotations

import gc
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from memsync.clock import FakeClock
from memsync.compile.bundle import BundleLayout
from memsync.compile.tokenizer import CL100K, default_counter
from memsync.compile.types import MemoryKind
from memsync.episode import EpisodeDraft, canonical_json
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import ContextSettings, Settings
from memsync.runtime.app.services import Services
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import (
    ContextReader,
    EpisodeRepository,
    MemoryRepository,
    MemorySearch,
    SubjectIndexes,
)
from memsync.runtime.storage import Store
from tests.helpers import API_NOW as NOW
from tests.helpers import LOOPBACK, compile_subject, say


def context(client: TestClient, **request: Any) -> Any:
    response = client.post("/v1/context", json={"subject_id": "ana", **request})
    assert response.status_code == 200, response.text
    return response


@pytest.mark.parametrize("layout", ["memsync", "statewave"])
def test_a_superseded_fact_reaches_the_bundle_by_no_path(client: TestClient, layout: str) -> None:
    say(client, "m1", "I live in Lisbon.", 1)
    say(client, "m2", "I moved to Porto.", 5)
    compile_subject(client)

    bundle = context(client, task="where does ana live", max_tokens=2000, layout=layout).json()

    assert "Porto" in bundle["assembled_context"]
    assert "Lisbon" not in bundle["assembled_context"]
    assert "Lisbon" not in canonical_json(bundle)
    assert all(fact["status"] == "active" for fact in bundle["facts"])


def test_without_as_of_two_calls_on_an_unchanged_store_are_byte_identical(
    client: TestClient, clock: FakeClock
) -> None:
    say(client, "m1", "I live in Lisbon and I work at Acme.", 1)
    say(client, "m2", "I'm in Berlin this week.", 2)
    compile_subject(client)

    first = context(client, task="plan a trip", max_tokens=400)
    clock.advance(timedelta(days=3))  # the wall clock must not matter
    second = context(client, task="plan a trip", max_tokens=400)

    assert first.content == second.content
    as_of = first.json()["provenance"]["as_of"]
    assert datetime.fromisoformat(as_of) == NOW  # the compile, the latest change


def test_a_change_moves_the_bundle_and_its_as_of(client: TestClient, clock: FakeClock) -> None:
    say(client, "m1", "I'm in Berlin this week.", 1)
    compile_subject(client)
    before = context(client, task="trip").json()
    clock.advance(timedelta(hours=2))

    say(client, "m2", "I'm in Madrid this week.", 20)
    after_ingest = context(client, task="trip").json()
    compile_subject(client)
    after_compile = context(client, task="trip").json()

    assert datetime.fromisoformat(after_ingest["provenance"]["as_of"]) == NOW + timedelta(hours=2)
    assert "Madrid" in after_ingest["assembled_context"]  # a recent episode, not yet a memory
    assert "Currently in Berlin" in before["assembled_context"]
    assert "Currently in Madrid" in after_compile["assembled_context"]
    assert "Berlin" not in after_compile["assembled_context"]


def test_the_budget_is_counted_in_cl100k_tokens_and_the_response_says_so(
    client: TestClient,
) -> None:
    for n in range(60):
        say(client, f"m{n}", f"The gateway {n} of region r{n} answers in {n * 7} ms.", n % 29)
    compile_subject(client)

    bundle = context(client, task="gateway latency", max_tokens=300).json()

    assert bundle["provenance"]["tokenizer"] == CL100K
    assert bundle["token_estimate"] == default_counter().count(bundle["assembled_context"])
    assert 0.95 * 300 <= bundle["token_estimate"] <= 300


def test_the_statewave_layout_by_request_or_by_configuration(store: Store) -> None:
    settings = Settings(
        store=str(store.engine.url), context=ContextSettings(layout=BundleLayout.STATEWAVE)
    )
    with TestClient(
        create_app(Services(settings, store, FakeClock(NOW))), base_url=LOOPBACK
    ) as client:
        say(client, "m1", "I live in Lisbon and I prefer tea.", 1)
        compile_subject(client)

        configured = context(client, task="drinks").json()
        asked = context(client, task="drinks", layout="memsync").json()

    assert configured["assembled_context"].startswith("## Task\ndrinks\n\n## About this user\n")
    assert configured["provenance"]["layout"] == "statewave"
    assert asked["assembled_context"].startswith("Subject: ana\nTask: drinks\n")


def test_an_unknown_layout_is_a_validation_error(client: TestClient) -> None:
    response = client.post("/v1/context", json={"subject_id": "ana", "task": "x", "layout": "x"})

    assert response.status_code == 422


# -- the indexed ranking against the exhaustive one ----------------------------------------

START = datetime(2026, 1, 1, tzinfo=UTC)
TOOLS = ["Postgres", "Redis", "Kafka", "Terraform", "Rust"]
CITIES = ["Lisbon", "Porto", "Berlin", "Madrid"]


def statement(i: int) -> str:
    tool, city = TOOLS[i % len(TOOLS)], CITIES[(i // 7) % len(CITIES)]
    return [
        f"I use {tool} at work.",
        f"I'm in {city} this week for the launch {i}.",
        f"We decided to move service {i % 13} onto {tool}.",
        f"Stripe charges {i % 4}.{i % 10}% per card payment.",
        f"I live in {city}.",
        f"The gateway {i} answers {100 + i} calls per minute.",
    ][i % 6]


def ingest_statements(ingest: IngestService, subject: str, numbers: range) -> None:
    """Statements ``numbers`` of the subject, as chat episodes an hour apart."""
    ingest.ingest(
        "t1",
        [
            EpisodeDraft(
                subject_id=subject,
                source="chat",
                type="message",
                payload={"messages": [{"role": "user", "content": statement(i)}]},
                idempotency_key=f"{subject}:{i}",
                occurred_at=START + timedelta(hours=i),
            )
            for i in numbers
        ],
    )


def build_store(store: Store, subject: str, count: int) -> None:
    clock = FakeClock(START)
    ingest = IngestService(store, clock)
    compiler = CompileService(store, clock=clock)
    for start in range(0, count, 40):
        ingest_statements(ingest, subject, range(start, min(start + 40, count)))
        clock.advance(timedelta(minutes=5))
        compiler.compile("t1", subject)
        clock.advance(timedelta(minutes=5))


@pytest.mark.parametrize("layout", list(BundleLayout))
def test_the_indexed_bundle_is_the_exhaustive_bundle_byte_for_byte(
    store: Store, layout: BundleLayout
) -> None:
    build_store(store, "ana", 240)
    reader = ContextReader(EpisodeRepository(store), MemoryRepository(store))
    checked = 0
    for task in ["where does she live", "which tools", "stripe fees", "", "gateway calls"]:
        for max_tokens in [60, 400, 3000]:
            fast = reader.bundle("t1", "ana", task, max_tokens, layout=layout)
            as_of = fast.as_of
            exhaustive = reader.bundle("t1", "ana", task, max_tokens, as_of, layout=layout)

            assert canonical_json(fast.to_dict()) == canonical_json(exhaustive.to_dict())
            checked += len(fast.facts) + len(fast.procedures)
    assert checked > 100  # the comparison covered real rankings, not empty bundles


# -- search from the subject's index ------------------------------------------------------


def test_indexed_search_answers_what_the_sql_search_answers(store: Store) -> None:
    build_store(store, "ana", 240)
    memories = MemoryRepository(store)
    search = MemorySearch(SubjectIndexes(memories), memories)
    compared = 0
    for text in ["", "stripe", "lisbon", "IN", "gateway 1", "charges 2.", "nothing-like-this"]:
        for kind in [None, MemoryKind.PREFERENCE, MemoryKind.EPISODE_SUMMARY]:
            for limit in [1, 20, 200]:
                indexed = search.search("t1", "ana", kind=kind, text=text, limit=limit)
                by_sql = memories.search("t1", "ana", kind=kind, text=text, limit=limit)

                assert [m.id for m in indexed] == [m.id for m in by_sql], (text, kind, limit)
                compared += len(by_sql)
    assert compared > 500


def test_search_sees_a_compile_at_once(client: TestClient) -> None:
    say(client, "m1", "I prefer tea.", 1)
    compile_subject(client)
    assert search_contents(client, "coffee") == []

    say(client, "m2", "I prefer coffee.", 2)
    compile_subject(client)

    assert "Prefers coffee" in search_contents(client, "coffee")


@pytest.mark.parametrize("freeze_from", [1, 10_000])
def test_only_a_large_index_is_frozen_out_of_the_collectors_reach(
    store: Store, freeze_from: int
) -> None:
    build_store(store, "ana", 40)
    indexes = SubjectIndexes(MemoryRepository(store), freeze_from=freeze_from)
    frozen_before = gc.get_freeze_count()
    try:
        index = indexes.current("t1", "ana")
        frozen = gc.get_freeze_count() > frozen_before
    finally:
        gc.unfreeze()
    assert 1 <= len(index) < 10_000
    # Freezing costs a full collection: a small subject's index is left to the collector.
    assert frozen is (len(index) >= freeze_from)
    assert indexes.current("t1", "ana") is index  # kept either way


def search_contents(client: TestClient, text: str) -> list[str]:
    response = client.get("/v1/memories/search", params={"subject_id": "ana", "q": text})
    assert response.status_code == 200, response.text
    return [memory["content"] for memory in response.json()["memories"]]
