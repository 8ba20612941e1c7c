"""Planner statistics refreshed after bulk loads: inline, handed to an executor, or
inside the compile chunk that crosses the threshold."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.storage.citus import is_citus_coordinator
from memsync.runtime.storage.statistics import FIRST_ANALYZE_AFTER, StatisticsRefresher

pytestmark = pytest.mark.postgresql_only


def analyses(store: Store, table: str) -> int:
    with store.read() as connection:
        count = connection.exec_driver_sql(
            "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = %(table)s",
            {"table": table},
        ).scalar_one()
    return int(count)


def test_crossing_the_threshold_analyses_inline(store: Store) -> None:
    refresher = StatisticsRefresher(store, ["memories"], first_after=10)
    before = analyses(store, "memories")

    refresher.added(9)
    assert analyses(store, "memories") == before
    refresher.added(1)

    assert analyses(store, "memories") == before + 1


class HeldCalls(Executor):
    """An executor that runs nothing until told to."""

    def __init__(self) -> None:
        self.held: list[Callable[[], object]] = []

    def submit(  # type: ignore[override]
        self, fn: Callable[[], object], /, *args: object, **kwargs: object
    ) -> Future[object]:
        self.held.append(functools.partial(fn, *args, **kwargs))
        return Future()


def test_an_analysis_handed_to_an_executor_runs_there_not_inline(store: Store) -> None:
    refresher = StatisticsRefresher(store, ["memories"], first_after=10)
    before = analyses(store, "memories")
    executor = HeldCalls()

    refresher.added(10, run_in=executor)
    assert analyses(store, "memories") == before
    [analyse] = executor.held
    analyse()

    assert analyses(store, "memories") == before + 1


def test_an_analysis_that_fails_in_an_executor_is_logged_not_raised(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    refresher = StatisticsRefresher(store, ["no_such_table"], first_after=1)
    with (
        caplog.at_level(logging.ERROR, logger="memsync.storage"),
        ThreadPoolExecutor(max_workers=1) as executor,
    ):
        refresher.added(1, run_in=executor)

    assert [record.getMessage() for record in caplog.records] == [
        "planner statistics not refreshed"
    ]
    assert caplog.records[0].exc_info is not None


def test_counting_tells_exactly_one_caller_per_crossing_and_touches_nothing(
    store: Store,
) -> None:
    refresher = StatisticsRefresher(store, ["memories"], first_after=3, every=4)
    before = analyses(store, "memories")

    told = [refresher.count(rows) for rows in (1, 1, 1, 2, 0, 2, 3)]

    # 1+1+1 crosses 3; then 2+0+2 crosses 4; the last 3 is short of the next 4.
    assert told == [False, False, True, False, False, True, False]
    assert analyses(store, "memories") == before  # the caller analyses, when told
    refresher.analyze()
    assert analyses(store, "memories") == before + 1


START = datetime(2026, 1, 1, tzinfo=UTC)
TENANT = "t-young"


def decisions(subject_id: str, count: int) -> list[EpisodeDraft]:
    return [
        EpisodeDraft(
            subject_id=subject_id,
            source="chat",
            type="message",
            payload={
                "messages": [{"role": "user", "content": f"We decided to use tool{n} for job{n}."}]
            },
            idempotency_key=f"{subject_id}-{n}",
            occurred_at=START + timedelta(minutes=n),
        )
        for n in range(count)
    ]


def planner_estimate(connection: Connection) -> float:
    """The row count the planner assumes for ``memories`` where the tenant's foreign-key
    checks are planned: the table itself on PostgreSQL, the tenant's shard on Citus
    (whose coordinator keeps no statistics of a distributed table)."""
    if not is_citus_coordinator(connection):
        estimate = connection.exec_driver_sql(
            "SELECT reltuples FROM pg_class WHERE relname = 'memories'"
        ).scalar_one()
        return float(estimate)
    on_shard = connection.execute(
        sa.text(
            "SELECT result FROM run_command_on_shards('memories', "
            "$$SELECT reltuples FROM pg_class WHERE oid = '%s'::regclass$$) "
            "WHERE shardid = "
            "get_shard_id_for_distribution_column('memories', CAST(:tenant AS text))"
        ),
        {"tenant": TENANT},
    ).scalar_one()
    return float(on_shard)


def test_the_chunk_crossing_the_threshold_is_planned_with_its_own_memories(
    store: Store,
) -> None:
    clock = FakeClock(START + timedelta(days=30))
    ingest = IngestService(store, clock)
    compiler = CompileService(store, clock=clock)
    ingest.ingest(TENANT, decisions("small", 5))
    ingest.ingest(TENANT, decisions("big", FIRST_ANALYZE_AFTER + 100))
    compiler.compile(TENANT, "small")
    seen: list[tuple[int, int, float]] = []

    def inside_the_chunk(connection: Connection, counts: Mapping[str, Any]) -> None:
        rows = connection.exec_driver_sql("SELECT count(*) FROM memories").scalar_one()
        seen.append((counts["memories_created"], int(rows), planner_estimate(connection)))

    compiler.compile(TENANT, "big", on_chunk=inside_the_chunk)

    created, rows, estimate = seen[0]
    assert created >= FIRST_ANALYZE_AFTER  # the first chunk crosses the threshold
    # The planner was told of the chunk's own, still uncommitted, memories.
    assert estimate >= rows


def test_one_crossing_analyses_each_table_once(store: Store) -> None:
    clock = FakeClock(START + timedelta(days=30))
    IngestService(store, clock).ingest(TENANT, decisions("big", FIRST_ANALYZE_AFTER + 100))
    before = {table: analyses(store, table) for table in ("memories", "memory_sources")}

    CompileService(store, clock=clock).compile(TENANT, "big")

    after = {table: analyses(store, table) for table in ("memories", "memory_sources")}
    assert after == {table: count + 1 for table, count in before.items()}
