"""``POST /v1/episodes`` as a coroutine: a new episode's insert awaited on the event loop
(PostgreSQL's asyncio pool), everything that blocks handed to the worker threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import anyio.to_thread
import httpx
import pytest
from fastapi.testclient import TestClient

from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK, OTHER_SESSIONS, build_app, episode, live_server
from tests.jobs_support import scalar, wait_until

ANSWER_DEADLINE_SECONDS = 30


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(build_app(store), base_url=LOOPBACK) as client:
        yield client


def _hold_every_worker_thread(client: TestClient, release: threading.Event) -> None:
    """Leave the app's event loop one worker thread, busy until ``release`` is set."""

    async def hold() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 1
        await anyio.to_thread.run_sync(release.wait)

    assert client.portal is not None
    client.portal.start_task_soon(hold)
    wait_until(
        lambda: (
            client.portal is not None
            and client.portal.call(
                lambda: anyio.to_thread.current_default_thread_limiter().borrowed_tokens
            )
            == 1
        ),
        timeout=ANSWER_DEADLINE_SECONDS,
        what="the worker thread to be taken",
    )


@pytest.mark.postgresql_only
def test_a_new_episode_is_stored_while_every_worker_thread_is_busy(
    client: TestClient,
) -> None:
    release = threading.Event()
    _hold_every_worker_thread(client, release)
    with ThreadPoolExecutor(max_workers=2) as requests:
        created = requests.submit(client.post, "/v1/episodes", json=episode("new"))
        try:
            answer = created.result(timeout=ANSWER_DEADLINE_SECONDS)
            # A known key is looked up in a transaction, on a worker thread: it is
            # answered once one is free.
            known = requests.submit(client.post, "/v1/episodes", json=episode("new"))
        finally:
            release.set()
        repeat = known.result(timeout=ANSWER_DEADLINE_SECONDS)

    assert answer.status_code == 201, answer.text
    assert (repeat.status_code, repeat.json()["id"]) == (200, answer.json()["id"])


def test_concurrent_creates_of_one_key_store_it_once(store: Store) -> None:
    clients = 8
    start = threading.Barrier(clients)

    def create(base: str) -> httpx.Response:
        with httpx.Client(base_url=base, timeout=ANSWER_DEADLINE_SECONDS) as http:
            http.get("/v1/health").raise_for_status()  # connected before the race
            start.wait(timeout=ANSWER_DEADLINE_SECONDS)
            return http.post("/v1/episodes", json=episode("raced"))

    with (
        live_server(build_app(store)) as base,
        ThreadPoolExecutor(max_workers=clients) as pool,
    ):
        answers = list(pool.map(create, [base] * clients))

    assert sorted(answer.status_code for answer in answers) == [200] * (clients - 1) + [201]
    assert {answer.json()["ingest_outcome"] for answer in answers} == {"created", "duplicate"}
    assert len({answer.json()["id"] for answer in answers}) == 1
    stored = scalar(store, "SELECT count(*) FROM episodes WHERE idempotency_key = 'raced'")
    assert stored == 1


@pytest.mark.postgresql_only
def test_a_stopping_server_closes_its_asyncio_pool(store: Store, store_url: str) -> None:
    watcher = Store.from_url(store_url)
    others = f"SELECT count(*) {OTHER_SESSIONS}"
    try:
        with TestClient(build_app(store), base_url=LOOPBACK) as client:
            assert client.post("/v1/episodes", json=episode()).status_code == 201
            assert client.get("/v1/subjects").status_code == 200
            both_pools = scalar(watcher, others)
        wait_until(
            lambda: scalar(watcher, others) == both_pools - 1,
            timeout=ANSWER_DEADLINE_SECONDS,
            what="the asyncio pool's session to end",
        )
        # The plain pool is the process's, closed with the store; either opens again.
        store.dispose()
        wait_until(lambda: scalar(watcher, others) == 0, what="the plain pool's session to end")
    finally:
        watcher.dispose()
