"""Forgetting a connector's data: what it costs with N episodes, and whether finding a
connector's episodes needs an index.

A throwaway store holds N episodes of two connectors (half each), each with its own
memory (one provenance row), over N/100 subjects, plus one memory per subject derived
from both connectors. One interpreter per database:

- ``find``: the statement that lists the connector's episodes (by
  ``provenance.connector``, no index on it), three times; the median;
- ``dry run``: ``Services.forget_connector(..., dry_run=True)`` (every statement, rolled
  back);
- ``forget``: the same, committed.

Every SQL statement of the last two is counted: the count grows with the number of
slices of 10,000 ids, not with N.

    python -m bench.forget [--episodes 100000] [--db sqlite postgresql]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from bench.common import machine, print_table, run_child, throwaway_store
from memsync.clock import FakeClock
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.ingest.statements import connector_episodes
from memsync.runtime.storage import Store, tables

NOW = datetime(2026, 6, 1, tzinfo=UTC)
CONNECTORS = ("gh", "slack")
PER_STATEMENT = 5000


def fill(store: Store, count: int) -> None:
    subjects = max(1, count // 100)
    episodes: list[dict[str, Any]] = []
    memories: list[dict[str, Any]] = []
    sources: list[dict[str, Any]] = []
    shared = {s: uuid.uuid4() for s in range(subjects)}
    for s, memory_id in shared.items():
        memories.append(memory(memory_id, f"subject-{s}", "shared"))
    for i in range(count):
        # The first two episodes of each subject, one per connector, share a memory.
        shares = i < 2 * subjects
        subject = f"subject-{i // 2 if shares else i % subjects}"
        connector = CONNECTORS[i % 2]
        episode_id, memory_id = uuid.uuid4(), uuid.uuid4()
        moment = NOW - timedelta(minutes=i)
        episodes.append(
            {
                "tenant_id": "default",
                "id": episode_id,
                "subject_id": subject,
                "source": "fake",
                "type": "fake.record",
                "payload": {"id": i, "body": f"record {i}"},
                "metadata": {},
                "provenance": {"connector": connector, "connector_type": "fake"},
                "session_id": None,
                "idempotency_key": f"fake:{connector}:record:{i}",
                "content_hash": f"{i:064x}",
                "revision": 1,
                "compiled_revision": 1,
                "occurred_at": moment,
                "created_at": moment,
                "revised_at": None,
                "deleted_at": None,
            }
        )
        memories.append(memory(memory_id, subject, f"m{i}"))
        for cited in (memory_id, shared[i // 2]) if shares else (memory_id,):
            sources.append(
                {
                    "tenant_id": "default",
                    "memory_id": cited,
                    "episode_id": episode_id,
                    "subject_id": subject,
                    "episode_revision": 1,
                    "added_at": NOW,
                }
            )
    with store.write() as connection:
        for table, rows in (
            (tables.episodes, episodes),
            (tables.memories, memories),
            (tables.memory_sources, sources),
        ):
            for start in range(0, len(rows), PER_STATEMENT):
                connection.execute(table.insert(), rows[start : start + PER_STATEMENT])
    with store.write() as connection:
        connection.exec_driver_sql("ANALYZE")


def memory(memory_id: uuid.UUID, subject: str, key: str) -> dict[str, Any]:
    return {
        "tenant_id": "default",
        "id": memory_id,
        "subject_id": subject,
        "memory_key": key,
        "kind": "fact",
        "content": f"memory {key}",
        "claim_key": None,
        "claim_value": None,
        "confidence": 1.0,
        "negated": False,
        "explicit_change": False,
        "status": "active",
        "status_rule": None,
        "valid_from": NOW,
        "valid_to": None,
        "asserted_at": NOW,
        "metadata": {},
        "job_id": None,
        "created_at": NOW,
        "updated_at": NOW,
        "status_changed_at": NOW,
    }


def child(backend: str, count: int) -> None:
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        store = Store.from_url(url)
        fill(store, count)
        services = Services(Settings.model_validate({"store": url}), store, FakeClock(NOW))
        finds = []
        for _ in range(3):
            started = time.perf_counter()
            with store.read() as connection:
                found = connector_episodes(connection, "default", "gh")
            finds.append(time.perf_counter() - started)
        statements: list[str] = []

        def counted(*_: object) -> None:
            statements.append("")

        sa.event.listen(store.engine, "before_cursor_execute", counted)
        started = time.perf_counter()
        dry = services.forget_connector("default", "gh", dry_run=True)
        dry_seconds, dry_statements = time.perf_counter() - started, len(statements)
        statements.clear()
        started = time.perf_counter()
        done = services.forget_connector("default", "gh")
        seconds, done_statements = time.perf_counter() - started, len(statements)
        assert dry.episodes == done.episodes == len(found) == count // 2
        store.dispose()
    print(
        json.dumps(
            {
                "find": statistics.median(finds),
                "dry": dry_seconds,
                "dry_statements": dry_statements,
                "forget": seconds,
                "statements": done_statements,
                "episodes": done.episodes,
                "memories_deleted": done.memories_deleted,
                "memories_kept": done.memories_kept,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--child", nargs=2, metavar=("DB", "N"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        backend, count = arguments.child
        child(backend, int(count))
        return
    print(
        f"forget benchmark: {arguments.episodes:,} episodes of two connectors, one memory "
        f"each; forgetting one connector; {machine()}"
    )
    rows = []
    for backend in arguments.db:
        result = run_child("bench.forget", [backend, str(arguments.episodes)])
        rows.append(
            (
                backend,
                f"{result['episodes']:,}",
                f"{result['find'] * 1000:,.0f}",
                f"{result['dry']:.2f}",
                f"{result['forget']:.2f}",
                f"{result['statements']}",
                f"{result['memories_deleted']:,} / {result['memories_kept']:,}",
            )
        )
    print_table(
        [
            "db",
            "episodes forgotten",
            "find ms",
            "dry run s",
            "forget s",
            "statements",
            "memories deleted / kept",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
