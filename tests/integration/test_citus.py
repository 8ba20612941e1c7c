"""memsync on a Citus cluster (``pytest --db=citus``): the schema distributed by tenant,
each tenant's rows on its shard's worker, and a worker that goes down.

The cluster is the one ``scripts/citus start`` makes: a coordinator and two workers on
loopback. The outage test stops a worker with the same script and starts it again.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from memsync.runtime.app.config import ApiKey, ApiSettings
from memsync.runtime.storage import Store, metadata
from memsync.runtime.storage.citus import COORDINATOR_TABLES, DISTRIBUTION_COLUMN
from tests.helpers import LOOPBACK, build_app

pytestmark = pytest.mark.citus_only

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "citus"
ADMIN_KEY = "ms_citus_admin"


def as_tenant(tenant: str) -> dict[str, str]:
    return {"X-API-Key": ADMIN_KEY, "X-Tenant-ID": tenant}


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    api = ApiSettings(keys=[ApiKey(name="admin", key=ADMIN_KEY, tenants=["*"])])
    with TestClient(build_app(store, api), base_url=LOOPBACK) as client:
        yield client


def worker_port(store: Store, tenant: str) -> int:
    """The port of the worker that holds ``tenant``'s shard of every table."""
    with store.read() as connection:
        port = connection.execute(
            sa.text(
                "SELECT nodeport FROM citus_shards WHERE table_name = 'episodes'::regclass "
                "AND shardid = get_shard_id_for_distribution_column("
                "'episodes', CAST(:tenant AS text))"
            ),
            {"tenant": tenant},
        ).scalar_one()
    return int(port)


def tenants_on_each_worker(store: Store) -> dict[int, str]:
    """One tenant per worker port: the first names that land on each."""
    found: dict[int, str] = {}
    for number in range(200):
        found.setdefault(worker_port(store, f"tenant-{number}"), f"tenant-{number}")
        if len(found) == 2:
            return found
    raise AssertionError(f"200 tenants all landed on {sorted(found)}")


def rows_on_worker(port: int, table: str, tenant: str, store: Store) -> int:
    """How many of ``tenant``'s rows of ``table`` the worker on ``port`` holds, read from
    the worker itself (its shard tables), not through the coordinator."""
    with store.read() as connection:
        shards = connection.execute(
            sa.text(
                "SELECT shard_name FROM citus_shards WHERE table_name = CAST(:table AS regclass) "
                "AND nodeport = :port"
            ),
            {"table": table, "port": port},
        ).scalars()
        shard_names = list(shards)
    url = store.engine.url.set(port=port)
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return sum(
                connection.execute(
                    sa.text(f'SELECT count(*) FROM "{name}" WHERE tenant_id = :tenant'),
                    {"tenant": tenant},
                ).scalar_one()
                for name in shard_names
            )
    finally:
        engine.dispose()


def episode(subject: str, key: str, text: str) -> dict[str, Any]:
    return {
        "subject_id": subject,
        "source": "chat",
        "type": "message",
        "payload": {"messages": [{"role": "user", "content": text}]},
        "idempotency_key": key,
        "occurred_at": "2026-05-01T10:00:00Z",
    }


def test_every_tenant_table_is_distributed_by_tenant_and_colocated(store: Store) -> None:
    with store.read() as connection:
        rows = connection.exec_driver_sql(
            "SELECT logicalrelid::regclass::text, partmethod, "
            "column_to_column_name(logicalrelid, partkey), colocationid FROM pg_dist_partition"
        ).all()
    placed = {name: (method, column, group) for name, method, column, group in rows}
    tenant_tables = {table.name for table in metadata.sorted_tables} - COORDINATOR_TABLES
    assert set(placed) == tenant_tables
    assert {method for method, _, _ in placed.values()} == {"h"}
    assert {column for _, column, _ in placed.values()} == {DISTRIBUTION_COLUMN}
    assert len({group for _, _, group in placed.values()}) == 1, placed


def test_upgrade_again_distributes_nothing(store: Store) -> None:
    from memsync.runtime.storage.migrate import distribute

    assert distribute(store) == []


def test_each_tenants_rows_live_on_its_shards_worker(store: Store, client: TestClient) -> None:
    on_worker = tenants_on_each_worker(store)
    for tenant in on_worker.values():
        for number in range(3):
            answer = client.post(
                "/v1/episodes",
                json=episode("ana", f"{tenant}-{number}", f"I live in Lisbon ({number})"),
                headers=as_tenant(tenant),
            )
            assert answer.status_code == 201, answer.text
        compiled = client.post(
            "/v1/memories/compile", json={"subject_id": "ana"}, headers=as_tenant(tenant)
        )
        assert compiled.status_code == 200, compiled.text

    for port, tenant in on_worker.items():
        (other_port,) = set(on_worker) - {port}
        assert rows_on_worker(port, "episodes", tenant, store) == 3
        assert rows_on_worker(port, "memories", tenant, store) >= 1
        assert rows_on_worker(other_port, "episodes", tenant, store) == 0
        assert rows_on_worker(other_port, "memories", tenant, store) == 0


def citus(*arguments: str, store: Store) -> None:
    """Run ``scripts/citus`` against the cluster the store is on."""
    coordinator_port = store.engine.url.port or 9700
    environment = {**os.environ, "MEMSYNC_CITUS_PORT": str(coordinator_port)}
    subprocess.run([str(SCRIPT), *arguments], check=True, env=environment, timeout=120)


def test_a_stopped_worker_fails_only_its_tenants_with_503_and_loses_nothing(
    store: Store, client: TestClient
) -> None:
    on_worker = tenants_on_each_worker(store)
    coordinator_port = store.engine.url.port or 9700
    (down_port, down_tenant), (up_port, up_tenant) = sorted(on_worker.items(), reverse=True)
    for tenant in (down_tenant, up_tenant):
        answer = client.post(
            "/v1/episodes",
            json=episode("ana", "before", "I live in Lisbon"),
            headers=as_tenant(tenant),
        )
        assert answer.status_code == 201, answer.text

    node = str(down_port - coordinator_port)
    citus("stop-node", node, store=store)
    try:
        during = client.post(
            "/v1/episodes",
            json=episode("ana", "during", "I moved to Porto"),
            headers=as_tenant(up_tenant),
        )
        assert during.status_code == 201, during.text
        context = client.post(
            "/v1/context", json={"subject_id": "ana", "task": "where"}, headers=as_tenant(up_tenant)
        )
        assert context.status_code == 200, context.text

        refused = client.post(
            "/v1/episodes",
            json=episode("ana", "refused", "I moved to Faro"),
            headers=as_tenant(down_tenant),
        )
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"]
        error = refused.json()["error"]
        assert error["code"] == "store_unavailable"
        assert "node" in error["message"]
        unread = client.post(
            "/v1/context",
            json={"subject_id": "ana", "task": "where"},
            headers=as_tenant(down_tenant),
        )
        assert unread.status_code == 503, unread.text
    finally:
        citus("start-node", node, store=store)

    for tenant, keys in ((up_tenant, ["before", "during"]), (down_tenant, ["before"])):
        listed = client.get("/v1/timeline", params={"subject_id": "ana"}, headers=as_tenant(tenant))
        assert listed.status_code == 200, listed.text
        stored = sorted(item["idempotency_key"] for item in listed.json()["episodes"])
        assert stored == keys
    again = client.post(
        "/v1/episodes",
        json=episode("ana", "refused", "I moved to Faro"),
        headers=as_tenant(down_tenant),
    )
    assert again.status_code == 201, again.text
    assert up_port != down_port


def test_an_upgrade_across_migrations_keeps_every_table_distributed(store: Store) -> None:
    from memsync.runtime.storage.migrate import downgrade, upgrade

    # 0003 onwards create tables (memories, memory_versions, sync_streams, …) that
    # later migrations fill from, and join with, tables distributed before them.
    downgrade(store, "0002")
    upgrade(store)

    test_every_tenant_table_is_distributed_by_tenant_and_colocated(store)


def test_every_statement_of_one_tenants_work_is_sent_to_one_shard(
    store: Store, client: TestClient
) -> None:
    from bench.citus import Recorder

    tenant = "tenant-0"
    recorder = Recorder(store.engine)
    try:
        with recorder.operation("tenant", scoped=True):
            batch = [episode("ana", f"b{number}", f"I use tool{number}") for number in range(5)]
            answer = client.post(
                "/v1/episodes/batch", json={"episodes": batch}, headers=as_tenant(tenant)
            )
            assert answer.status_code in (200, 201), answer.text
            single = episode("ana", "single", "I live in Lisbon")
            for _ in range(2):  # created, then a duplicate
                client.post("/v1/episodes", json=single, headers=as_tenant(tenant))
            for path, body in (
                ("/v1/memories/compile", {"subject_id": "ana"}),
                ("/v1/context", {"subject_id": "ana", "task": "where does ana live"}),
            ):
                answer = client.post(path, json=body, headers=as_tenant(tenant))
                assert answer.status_code == 200, (path, answer.text)
            for path, query in (
                ("/v1/memories/search", {"subject_id": "ana", "q": "Lisbon"}),
                ("/v1/timeline", {"subject_id": "ana"}),
            ):
                answer = client.get(path, params=query, headers=as_tenant(tenant))
                assert answer.status_code == 200, (path, answer.text)
    finally:
        recorder.close()
    recorder.explain_deferred()

    captured = list(recorder.captured.values())
    assert len(captured) >= 15, [statement.text for statement in captured]
    assert [statement for statement in captured if statement.error] == []
    spread = [statement for statement in captured if any(n > 1 for n in statement.shards)]
    assert spread == [], [(statement.source, statement.text) for statement in spread]
