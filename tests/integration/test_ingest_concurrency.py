"""Two processes ingesting the same keys at the same time end with one episode per key."""

from __future__ import annotations

import multiprocessing
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest
import sqlalchemy as sa

from memsync.episode import EpisodeDraft
from memsync.runtime.ingest import IngestService, IngestSummary
from memsync.runtime.storage import Store

KEYS = 5_000


def ingest_all(store_url: str, start_together: Barrier, reverse: bool, results: Queue[Any]) -> None:
    store = Store.from_url(store_url)
    drafts = [
        EpisodeDraft(
            subject_id=f"user-{i % 10}",
            source="race",
            type="note",
            payload={"i": i},
            idempotency_key=f"k{i}",
        )
        for i in range(KEYS)
    ]
    if reverse:
        drafts.reverse()
    start_together.wait(timeout=60)
    summary = IngestSummary.of(IngestService(store, batch_size=1_000).ingest("t1", drafts))
    store.dispose()
    results.put((summary.created, summary.duplicates, summary.revised))


@pytest.mark.slow
@pytest.mark.parametrize("reverse_second", [False, True], ids=["same-order", "opposite-order"])
def test_two_processes_ingesting_the_same_keys_store_each_once(
    store_url: str, reverse_second: bool
) -> None:
    context = multiprocessing.get_context("spawn")
    start_together = context.Barrier(2)
    results: Queue[Any] = context.Queue()
    workers = [
        context.Process(target=ingest_all, args=(store_url, start_together, reverse, results))
        for reverse in (False, reverse_second)
    ]
    for worker in workers:
        worker.start()
    summaries = [results.get(timeout=240) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0

    created = sum(summary[0] for summary in summaries)
    duplicates = sum(summary[1] for summary in summaries)
    assert (created, duplicates) == (KEYS, KEYS)
    assert all(summary[2] == 0 for summary in summaries)

    store = Store.from_url(store_url)
    with store.read() as connection:
        rows = connection.execute(sa.text("SELECT count(*) FROM episodes")).scalar_one()
    store.dispose()
    assert rows == KEYS
