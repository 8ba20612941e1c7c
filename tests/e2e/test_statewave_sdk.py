"""The official statewave SDK, unchanged, against a live memsync server on loopback."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from statewave import StatewaveAPIError

from memsync.clock import FakeClock
from memsync.compile.bundle import BundleLayout
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import ApiKey, ApiSettings, ContextSettings, Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from memsync.stopping import StopEvent
from tests.e2e.statewave_support import API_KEY, sdk, tell, tell_lisbon_and_tea
from tests.helpers import build_app, live_server
from tests.jobs_support import worker


@pytest.fixture
def base_url(store: Store) -> Iterator[str]:
    api = ApiSettings(keys=[ApiKey(name="sdk", key=API_KEY, tenants=["acme", "globex"])])
    with live_server(build_app(store, api)) as url:
        yield url


def test_sdk_round_trip_of_episodes_timeline_subjects_and_delete(base_url: str) -> None:
    with sdk(base_url, "acme") as client:
        first = client.create_episode(
            "user-1", "chat", "message", {"text": "hi"}, idempotency_key="m1"
        )
        again = client.create_episode(
            "user-1", "chat", "message", {"text": "hi"}, idempotency_key="m1"
        )
        assert again.id == first.id

        batch = client.create_episodes_batch(
            [
                {
                    "subject_id": "user-1",
                    "source": "chat",
                    "type": "message",
                    "payload": {"text": "hi"},
                    "idempotency_key": "m1",
                },
                {
                    "subject_id": "user-2",
                    "source": "chat",
                    "type": "message",
                    "payload": {"text": "yo"},
                    "idempotency_key": "m2",
                },
            ]
        )
        assert batch.episodes_created == 1
        assert batch.episodes[0].id == first.id

        timeline = client.get_timeline("user-1", limit=10)
        assert [item.id for item in timeline.episodes] == [first.id]
        assert timeline.episodes_has_more is False
        assert timeline.episodes[0].occurred_at is not None

        subjects = client.list_subjects()
        assert subjects.total == 2
        assert {s.subject_id: s.episode_count for s in subjects.subjects} == {
            "user-1": 1,
            "user-2": 1,
        }

        deleted = client.delete_subject("user-1")
        assert (deleted.episodes_deleted, deleted.memories_deleted) == (1, 0)
        assert client.list_subjects().total == 1


def test_sdk_sees_only_its_tenant(base_url: str) -> None:
    with sdk(base_url, "acme") as acme, sdk(base_url, "globex") as globex:
        acme.create_episode("user-1", "chat", "message", {"text": "acme"}, idempotency_key="k")
        assert globex.list_subjects().total == 0
        assert globex.get_timeline("user-1").episodes == []
        assert globex.delete_subject("user-1").episodes_deleted == 0
        assert acme.list_subjects().total == 1


def test_sdk_compile_search_and_context(base_url: str) -> None:
    with sdk(base_url, "acme") as client:
        tell_lisbon_and_tea(client)
        compiled = client.compile_memories("ana")
        assert compiled.memories_created == len(compiled.memories) > 0
        assert client.compile_memories("ana").memories_created == 0

        found = client.search_memories("ana", kind="profile_fact", query="lisbon")
        assert [memory.content for memory in found.memories] == ["Lives in Lisbon"]

        bundle = client.get_context("ana", "what to drink", max_tokens=300)
        assert any(fact.content == "Prefers tea" for fact in bundle.facts)
        assert bundle.token_estimate <= 300

        timeline = client.get_timeline("ana")
        assert {memory.id for memory in timeline.memories} == {m.id for m in compiled.memories}
        assert client.list_subjects().subjects[0].memory_count == len(compiled.memories)


def test_sdk_context_provenance_has_statewave_id_lists_and_no_episode_twice(
    base_url: str,
) -> None:
    with sdk(base_url, "acme") as client:
        tell_lisbon_and_tea(client)
        tell(client, "c2", "I moved to Porto.")
        client.compile_memories("ana")

        bundle = client.get_context("ana", "chat message porto tea", max_tokens=2000)

    provenance = bundle.provenance
    fact_ids = {str(fact.id) for fact in bundle.facts}
    assert set(provenance["fact_ids"]) | set(provenance["summary_ids"]) == fact_ids
    assert provenance["procedure_ids"] == [str(p.id) for p in bundle.procedures]
    assert provenance["episode_ids"] == [str(e.id) for e in bundle.episodes]
    assert provenance["summary_ids"]  # the Porto message's summary made it in...
    summarised = {
        str(episode_id)
        for fact in bundle.facts
        if str(fact.id) in provenance["summary_ids"]
        for episode_id in fact.source_episode_ids
    }
    assert not summarised & set(provenance["episode_ids"])  # ...so its episode is not repeated
    assert "Lisbon" not in bundle.assembled_context  # superseded, by every path


def test_sdk_sees_statewave_markdown_sections_when_configured(store: Store) -> None:
    settings = Settings(
        store=str(store.engine.url),
        api=ApiSettings(keys=[ApiKey(name="sdk", key=API_KEY, tenants=["acme"])]),
        context=ContextSettings(layout=BundleLayout.STATEWAVE),
    )
    with (
        live_server(create_app(Services(settings, store, FakeClock()))) as url,
        sdk(url, "acme") as client,
    ):
        tell_lisbon_and_tea(client)
        client.compile_memories("ana")
        text = client.get_context_string("ana", "what to drink", max_tokens=500)

    assert text.startswith("## Task\nwhat to drink\n\n## About this user\n")
    assert "- Prefers tea" in text


@pytest.fixture
def served_with_worker(store: Store) -> Iterator[str]:
    """A live server and one worker thread sharing a store and a (fake) clock."""
    clock = FakeClock()
    api = ApiSettings(keys=[ApiKey(name="sdk", key=API_KEY, tenants=["acme"])])
    stop = StopEvent()
    thread = threading.Thread(target=worker(store, clock).run, args=(stop,), daemon=True)
    thread.start()
    try:
        with live_server(build_app(store, api, clock)) as url:
            yield url
    finally:
        stop.request_stop()
        thread.join(timeout=30)


def test_sdk_async_compile_round_trip_with_a_worker(served_with_worker: str) -> None:
    with sdk(served_with_worker, "acme") as client:
        tell_lisbon_and_tea(client)
        submitted = client.compile_memories_async("ana")
        assert submitted.status in ("pending", "running", "completed")
        assert submitted.subject_id == "ana"

        waited = client.compile_memories_wait("ana", poll_interval=0.05, timeout=30)
        status = client.get_compile_status(submitted.job_id)

        assert status.status == "completed"
        assert status.error is None
        assert status.memories_created == len(status.memories) > 0
        assert "Lives in Lisbon" in {memory.content for memory in status.memories}
        # The second job found nothing new: compile is a set.
        assert waited.status == "completed"
        assert waited.memories_created == 0 or waited.job_id == submitted.job_id


def test_sdk_context_receipt_read_list_and_replay(base_url: str) -> None:
    with sdk(base_url, "acme") as client, sdk(base_url, "globex") as other:
        tell_lisbon_and_tea(client)
        client.compile_memories("ana")

        bundle = client.get_context("ana", "what to drink", max_tokens=300, emit_receipt=True)
        assert bundle.receipt_emitted is True
        assert bundle.receipt_id is not None
        receipt = client.get_receipt(bundle.receipt_id)
        listed = client.list_receipts("ana")
        replayed = client.replay_receipt(bundle.receipt_id)

        with pytest.raises(StatewaveAPIError) as refused:
            other.get_receipt(bundle.receipt_id)

    assert (receipt.receipt_id, receipt.mode, receipt.subject_id) == (
        bundle.receipt_id,
        "retrieval",
        "ana",
    )
    assert receipt.as_of == bundle.provenance["as_of"]
    assert {entry.get("memory_id") for entry in receipt.selected_entries} >= {
        str(fact.id) for fact in bundle.facts
    }
    assert [r.receipt_id for r in listed.receipts] == [bundle.receipt_id]
    assert listed.next_cursor is None
    assert replayed.original_receipt_id == bundle.receipt_id
    assert replayed.replay_receipt_id is not None
    entries = replayed.diff.selected_entries
    assert entries["added"] == entries["removed"] == []
    assert refused.value.status_code == 404
