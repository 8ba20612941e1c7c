"""Sync throughput through the runner: a local fake source and a workspace tree.

Scenarios, each in its own interpreter against a throwaway store:

- ``fake``: N fake records (ordered by cursor, batches of 1000): a first sync (all
  new), then a full re-read of the same window (all duplicates). The re-read's time per
  record is the overhead a scheduled re-sync pays for a record it already has.
- ``workspace``: a generated tree of F small text files: a first sync, then a re-sync
  of the unchanged tree (every file hashed again, every key already stored).
- ``deletions``: N fake records synced once, then full re-reads of the window in one
  process, alternating the plain re-read and one whose fetch lists the window
  completely (deletion detection on, nothing deleted), three times each (the ratio
  compares medians); then 1% of the
  records vanish from the source and a listed re-read tombstones them. Every SQL
  statement is counted per re-read, so the cost of detection shows as a time ratio
  and as a number of statements that does not grow with N.
- ``fake-json-log``: ``fake`` with the JSON log pipeline on (INFO, into a file); run
  alternately with ``fake`` in the same invocation to price structured logging.

Prints Markdown tables; see docs/benchmarks.md.

    python -m bench.sync [--records 100000] [--files 20000] [--db sqlite postgresql]
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench.common import machine, peak_rss_mib, print_table, run_child, throwaway_store
from memsync.clock import FakeClock
from memsync.connectors import load_registry
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.logcontext import bound_log_context
from memsync.runtime.app.observability import LogFormat, configure_logging
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunRecord, RunStatus, SyncRepository, SyncRunner

BATCH = 1000
T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(days=400)


def timed(action: Any) -> tuple[RunRecord, float]:
    started = time.perf_counter()
    record: RunRecord = action()
    elapsed = time.perf_counter() - started
    assert record.status is RunStatus.SUCCEEDED, record
    return record, elapsed


def fake_records(count: int) -> list[FakeRecord]:
    return [
        FakeRecord(
            id=f"{i:07d}",
            updated_at=T0 + timedelta(seconds=i * 300),
            body="Webhook retries ignore Retry-After; steps: send 429 with Retry-After: 30. " * 4,
            fields={"group": f"team-{i % 50}"},
        )
        for i in range(count)
    ]


def fake_connector(records: list[FakeRecord], **options: object) -> FakeConnector:
    config = {"name": "bench", "subject": "team:{group}", **options}
    return FakeConnector(FakeConfig.model_validate(config), records)


def fake_runner(store: Store) -> SyncRunner:
    clock = FakeClock(NOW)
    return SyncRunner(
        SyncRepository(store), IngestService(store, clock), clock=clock, batch_size=BATCH
    )


def reread(runner: SyncRunner, connector: FakeConnector) -> tuple[RunRecord, float]:
    """A full re-read of the fake's window, as one backfill slice."""
    return timed(
        lambda: runner.backfill(
            connector, since=T0 - timedelta(seconds=1), until=NOW, slice_length=NOW - T0
        )
    )


def fake_source(url: str, count: int, _directory: str) -> dict[str, Any]:
    """A first sync, then a re-read of the same window as one backfill slice."""
    connector = fake_connector(fake_records(count))
    runner = fake_runner(Store.from_url(url))
    first, first_s = timed(lambda: runner.sync(connector))
    again, again_s = reread(runner, connector)
    assert (first.created, again.duplicates, again.created) == (count, count, 0)
    return {"first": first_s, "again": again_s, "items": count, "peak_rss_mib": peak_rss_mib()}


def workspace_tree(root: Path, files: int) -> None:
    per_directory = 100
    for i in range(files):
        directory = root / f"pkg{i // per_directory:04d}"
        if i % per_directory == 0:
            directory.mkdir(parents=True)
        (directory / f"module_{i:05d}.py").write_text(
            f'"""Module {i}."""\n\n\ndef handler_{i}(event):\n    return event.get("id") == {i}\n'
        )


def workspace(url: str, files: int, directory: str) -> dict[str, Any]:
    root = Path(directory) / "tree"
    workspace_tree(root, files)
    registry = load_registry()
    [config] = registry.parse_configs(
        [
            {
                "name": "bench-ws",
                "type": "workspace",
                "subject": "ws:{workspace_id}",
                "root": str(root),
            }
        ]
    )
    connector = registry.build(config)
    store = Store.from_url(url)
    runner = SyncRunner(SyncRepository(store), IngestService(store), batch_size=BATCH)
    first, first_s = timed(lambda: runner.sync(connector))
    again, again_s = timed(lambda: runner.sync(connector))
    # Every file plus one snapshot; the unchanged snapshot is a duplicate too.
    assert (first.created, again.created, again.duplicates) == (files + 1, 0, files + 1)
    return {"first": first_s, "again": again_s, "items": files + 1, "peak_rss_mib": peak_rss_mib()}


def deletions(url: str, count: int, _directory: str) -> dict[str, Any]:
    """Re-reads without and with deletion detection, in one process and one store."""
    records = fake_records(count)
    plain, listed = fake_connector(records), fake_connector(records, list_windows=True)
    store = Store.from_url(url)
    statements = [0]

    def count_statement(*_: object) -> None:
        statements[0] += 1

    sa.event.listen(store.engine, "before_cursor_execute", count_statement)
    runner = fake_runner(store)

    def counted(connector: FakeConnector) -> tuple[RunRecord, float, int]:
        before = statements[0]
        record, seconds = reread(runner, connector)
        return record, seconds, statements[0] - before

    first, first_s = timed(lambda: runner.sync(plain))
    runs: dict[str, list[tuple[RunRecord, float, int]]] = {"plain": [], "listed": []}
    for _ in range(3):  # alternated, so drift of the machine hits both alike
        runs["plain"].append(counted(plain))
        runs["listed"].append(counted(listed))
    for record, _, _ in (*runs["plain"], *runs["listed"]):
        assert (record.duplicates, record.tombstoned) == (count, 0)
    vanished = count // 100
    listed.records = records[vanished:]
    deleted, deleted_s, deleted_statements = counted(listed)
    assert (deleted.tombstoned, first.created) == (vanished, count)
    return {
        "items": count,
        "first": first_s,
        "plain": [seconds for _, seconds, _ in runs["plain"]],
        "listed": [seconds for _, seconds, _ in runs["listed"]],
        "plain_statements": runs["plain"][0][2],
        "listed_statements": runs["listed"][0][2],
        "vanished": vanished,
        "deleted": deleted_s,
        "deleted_statements": deleted_statements,
        "peak_rss_mib": peak_rss_mib(),
    }


def fake_source_logged(url: str, count: int, directory: str) -> dict[str, Any]:
    """``fake`` with the process's JSON log pipeline on, at INFO, into a file (as a
    log collector reads a container's stderr): every line the runner logs is rendered."""
    log_file = Path(directory) / "memsync.log"
    with log_file.open("w", encoding="utf-8") as stream:
        configure_logging(LogFormat.JSON, "info", stream=stream)
        result = fake_source(url, count, directory)
    lines = log_file.read_text(encoding="utf-8").splitlines()
    assert all(json.loads(line)["timestamp"] for line in lines)
    return {**result, "log_lines": len(lines)}


SCENARIOS = {
    "fake": fake_source,
    "fake-json-log": fake_source_logged,
    "workspace": workspace,
    "deletions": deletions,
}
LOGGING_ROUNDS = 2


def child(backend: str, scenario: str, count: int) -> None:
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        result = SCENARIOS[scenario](url, count, directory)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--child", nargs=3, metavar=("DB", "SCENARIO", "N"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        backend, scenario, count = arguments.child
        child(backend, scenario, int(count))
        return

    print(
        f"sync benchmark: {arguments.records:,} fake records, {arguments.files:,}-file "
        f"workspace, batches of {BATCH}; {machine()}"
    )
    rows = []
    for backend in arguments.db:
        for scenario, size in (("fake", arguments.records), ("workspace", arguments.files)):
            result = run_child("bench.sync", [backend, scenario, str(size)])
            items = result["items"]
            rows.append(
                (
                    backend,
                    f"{scenario} ({size:,})",
                    f"{items / result['first']:,.0f}",
                    f"{result['first']:.1f}",
                    f"{items / result['again']:,.0f}",
                    f"{result['again']:.1f}",
                    f"{result['again'] / items * 1e6:,.0f}",
                    f"{result['peak_rss_mib']:.0f}",
                )
            )
    print_table(
        [
            "db",
            "source",
            "first sync rec/s",
            "first s",
            "re-read rec/s",
            "re-read s",
            "re-read µs/rec",
            "peak RSS MiB",
        ],
        rows,
    )
    print()
    print(
        "deletion detection: plain re-reads vs re-reads whose fetch lists the window "
        "(3 each, alternated), then 1% of the records vanish"
    )
    rows = []
    for backend in arguments.db:
        for size in (arguments.records // 10, arguments.records):
            result = run_child("bench.sync", [backend, "deletions", str(size)])
            plain, listed = result["plain"], result["listed"]
            rows.append(
                (
                    backend,
                    f"{size:,}",
                    " / ".join(f"{seconds:.2f}" for seconds in plain),
                    " / ".join(f"{seconds:.2f}" for seconds in listed),
                    f"{statistics.median(listed) / statistics.median(plain):.2f}",
                    str(result["plain_statements"]),
                    str(result["listed_statements"]),
                    f"{result['vanished']:,}",
                    f"{result['deleted']:.2f}",
                    str(result["deleted_statements"]),
                )
            )
    print_table(
        [
            "db",
            "records",
            "re-read s (plain)",
            "re-read s (listed)",
            "listed / plain",
            "statements (plain)",
            "statements (listed)",
            "vanished",
            "re-read s (vanished)",
            "statements (vanished)",
        ],
        rows,
    )
    print()
    print(
        f"JSON logging off vs on, fake source ({arguments.records:,} records), "
        f"{LOGGING_ROUNDS} rounds each, alternating; rec/s of the first sync + re-read"
    )
    print_table(
        ["db", "logging", "rec/s", "vs off", "log lines"],
        logging_rows(arguments.db, arguments.records),
    )
    print()
    print(f"rendering one JSON log line with run context: {json_line_micros():.1f} µs")


def json_line_micros(lines: int = 20_000) -> float:
    """The cost of one ``sync run finished``-sized JSON line, rendered and written (to
    an in-memory stream): the bound on what logging adds per line to any run."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging(LogFormat.JSON, "info", stream=io.StringIO())
    log = logging.getLogger("memsync.sync")
    counts = {"fetched": 1000, "created": 1000, "duplicates": 0, "revised": 0, "skipped": 0}
    try:
        with bound_log_context(tenant="acme", connector="bench", run_id=str(uuid.uuid4())):
            started = time.perf_counter()
            for _ in range(lines):
                log.info("sync run finished", extra={"status": "succeeded", "counts": counts})
            elapsed = time.perf_counter() - started
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return elapsed / lines * 1e6


def logging_rows(backends: list[str], records: int) -> list[tuple[str, ...]]:
    """Throughput of the same sync with the JSON log pipeline off and on, alternated
    in one run so both see the same machine."""
    rows: list[tuple[str, ...]] = []
    for backend in backends:
        seconds: dict[str, float] = {"fake": 0.0, "fake-json-log": 0.0}
        lines = 0
        for _ in range(LOGGING_ROUNDS):
            for scenario in seconds:
                result = run_child("bench.sync", [backend, scenario, str(records)])
                seconds[scenario] += result["first"] + result["again"]
                lines = result.get("log_lines", lines)
        per_second = {
            scenario: 2 * records * LOGGING_ROUNDS / total for scenario, total in seconds.items()
        }
        for scenario, label in (("fake", "off"), ("fake-json-log", "json, INFO")):
            ratio = per_second[scenario] / per_second["fake"]
            rows.append(
                (
                    backend,
                    label,
                    f"{per_second[scenario]:,.0f}",
                    f"{(ratio - 1) * 100:+.1f}%",
                    str(lines if scenario != "fake" else 0),
                )
            )
    return rows


if __name__ == "__main__":
    main()
