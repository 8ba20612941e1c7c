"""Recorded extractions travel: compile with a model on a SQLite store, export, import
into a fresh store (PostgreSQL under ``--db=postgresql``), and compile there from the
records alone, through the ``memsync`` command line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from memsync.episode import EpisodeDraft
from memsync.runtime.app.cli import app as cli_app
from memsync.runtime.app.config import load_settings
from memsync.runtime.app.services import Services
from memsync.runtime.compiling.fake_model import FakeModel
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store, upgrade

NOW = datetime(2026, 5, 1, tzinfo=UTC)
STATEMENTS = [
    "I joined Acme last spring.",
    "I prefer tea over coffee.",
    "We decided to ship on Fridays.",
    "My laptop is a ThinkPad.",
    "I now work on the billing team.",
]


@pytest.fixture
def fake_model(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModel]:
    monkeypatch.setenv("TEST_LLM_KEY", "sk-test")
    with FakeModel(echo=True) as model:
        yield model


def drafts(count: int) -> list[EpisodeDraft]:
    return [
        EpisodeDraft(
            "ana",
            "chat",
            "note",
            {"text": STATEMENTS[number % len(STATEMENTS)] + f" (note {number})"},
            idempotency_key=f"ana:{number}",
            occurred_at=NOW - timedelta(hours=count - number),
        )
        for number in range(count)
    ]


def cli(config: Path) -> Any:
    runner = CliRunner()

    def memsync(*args: str) -> Result:
        return runner.invoke(cli_app, ["--config", str(config), *args])

    return memsync


def configured(tmp_path: Path, name: str, store_url: str, model: FakeModel) -> Path:
    config = tmp_path / f"{name}.yaml"
    config.write_text(
        f"store: {store_url}\n"
        "compile:\n  compiler: llm\n  llm:\n"
        f"    base_url: {model.api_base}\n    model: extractor-1\n    api_key: ${{TEST_LLM_KEY}}\n"
        "    max_concurrency: 4\n"
    )
    return config


def memories(store: Store) -> list[tuple[object, ...]]:
    """What must be equal between the stores: everything but ids and store times."""
    return sorted(
        (
            memory.kind.value,
            memory.content,
            memory.status.value,
            memory.claim_key,
            memory.claim_value,
            memory.confidence,
            memory.valid_from,
            memory.valid_to,
        )
        for memory in MemoryRepository(store).memories("default", "ana", statuses=None)
    )


def test_exported_records_compile_the_same_memories_elsewhere_without_a_request(
    store: Store, store_url: str, tmp_path: Path, fake_model: FakeModel
) -> None:
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    source = Store.from_url(source_url)
    upgrade(source)
    ingested = IngestService(source).ingest("default", drafts(30))
    IngestService(store).ingest("default", drafts(30))
    here = cli(configured(tmp_path, "source", source_url, fake_model))
    there = cli(configured(tmp_path, "target", store_url, fake_model))
    exported = tmp_path / "extractions.jsonl"

    compiled = here("compile", "ana", "--json")
    asked = fake_model.request_count()
    export = here("llm", "export", "--to", str(exported))
    imported = there("llm", "import", str(exported))
    again = there("llm", "import", str(exported))
    replayed = there("compile", "ana", "--replay-only", "--json")

    assert compiled.exit_code == 0, compiled.output
    assert json.loads(compiled.stdout)[0]["llm"]["requests"] == asked
    assert export.exit_code == 0, export.output
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert len(lines) == 30
    assert set(lines[0]) == {"prompt_version", "model", "content_hash", "memories"}
    text = exported.read_text()
    assert "ana" not in text  # no subject id
    assert not any(str(outcome.episode_id) in text for outcome in ingested)
    assert json.loads(imported.stdout) == {"imported": 30, "read": 30}
    assert json.loads(again.stdout) == {"imported": 0, "read": 30}
    assert replayed.exit_code == 0, replayed.output
    assert json.loads(replayed.stdout)[0]["llm"]["requests"] == 0
    assert fake_model.request_count() == asked
    assert memories(store) == memories(source)
    source.dispose()


def test_replay_only_fails_fast_naming_the_episodes_without_a_record(
    store: Store, store_url: str, tmp_path: Path, fake_model: FakeModel
) -> None:
    [episode] = IngestService(store).ingest("default", drafts(1))
    memsync = cli(configured(tmp_path, "target", store_url, fake_model))

    replayed = memsync("compile", "ana", "--replay-only")

    assert replayed.exit_code == 4
    assert "replay only" in replayed.output
    assert str(episode.episode_id) in replayed.output
    assert fake_model.request_count() == 0
    assert MemoryRepository(store).memories("default", "ana") == []


def test_a_compile_at_its_token_ceiling_exits_3_and_its_job_shows_the_tokens(
    store: Store, store_url: str, tmp_path: Path, fake_model: FakeModel
) -> None:
    IngestService(store).ingest("default", drafts(3))
    config = configured(tmp_path, "capped", store_url, fake_model)
    config.write_text(
        config.read_text().replace("max_concurrency: 4", "max_concurrency: 1")
        + "    batch_size: 1\n    max_tokens_per_job: 100\n"
    )
    memsync = cli(config)

    capped = memsync("compile", "ana", "--json")
    enqueued = memsync("compile", "ana", "--async")
    job_id = enqueued.stdout.strip()
    queued = memsync("jobs", "list", "--json")
    ran = run_one_job(config)
    shown = memsync("jobs", "show", job_id, "--json")
    waited = memsync("jobs", "wait", job_id, "--timeout", "0")

    assert capped.exit_code == 3, capped.output
    assert json.loads(capped.stdout)[0]["stopped"] == "max_tokens_per_job"
    assert "stopped early" in capped.output
    assert json.loads(queued.stdout)[0]["status"] == "pending"
    assert ran
    job = json.loads(shown.stdout)
    assert job["outcome"] == "partial"
    assert job["result"]["stopped"] == "max_tokens_per_job"
    assert job["result"]["llm"]["requests"] == 1
    assert job["result"]["llm"]["prompt_tokens"] == 101
    assert job["result"]["llm"]["completion_tokens"] == 20
    assert waited.exit_code == 3


def run_one_job(config: Path) -> bool:
    """Run the next queued job in this process, as ``memsync worker`` would."""
    services = Services.open(load_settings(config))
    try:
        return services.worker().run_once() is not None
    finally:
        services.close()
