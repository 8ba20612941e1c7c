"""The engine memsync builds for a store URL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta, timezone

import psycopg
import pytest
import sqlalchemy as sa

from memsync.runtime.storage import Store, tables
from memsync.runtime.storage import engine as store_engine
from tests.helpers import terminate_other_backends


@pytest.mark.postgresql_only
def test_settings_in_the_url_options_reach_the_session_and_moments_stay_in_utc(
    store_url: str,
) -> None:
    url = sa.make_url(store_url).update_query_dict(
        {"options": "-c synchronous_commit=off -c timezone=Asia/Tokyo"}
    )
    store = Store.from_url(url.render_as_string(hide_password=False))
    try:
        with store.read() as connection:
            commit = connection.exec_driver_sql("SHOW synchronous_commit").scalar_one()
            zone = connection.exec_driver_sql("SHOW timezone").scalar_one()
    finally:
        store.dispose()
    assert commit == "off"
    assert zone == "UTC"


@pytest.mark.postgresql_only
def test_a_url_without_options_commits_synchronously(store: Store) -> None:
    with store.read() as connection:
        assert connection.exec_driver_sql("SHOW synchronous_commit").scalar_one() == "on"


def _backend_pid(store: Store) -> int:
    with store.read() as connection:
        return int(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def _counting_pings(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pings: list[int] = []
    ping = store.engine.dialect.do_ping

    def counted(dbapi_connection: object) -> bool:
        pings.append(1)
        return ping(dbapi_connection)

    monkeypatch.setattr(store.engine.dialect, "do_ping", counted)
    return pings


@pytest.mark.postgresql_only
def test_a_connection_used_moments_ago_is_not_pinged_at_checkout(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings = _counting_pings(store, monkeypatch)
    # However slow the machine, nothing here sits idle for an hour.
    monkeypatch.setattr(store_engine, "PING_AFTER_IDLE_SECONDS", 3600.0)
    first = _backend_pid(store)
    again = [_backend_pid(store) for _ in range(5)]
    assert again == [first] * 5
    assert pings == []


@pytest.mark.postgresql_only
def test_a_connection_idle_for_longer_than_the_threshold_is_pinged_first(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings = _counting_pings(store, monkeypatch)
    first = _backend_pid(store)
    monkeypatch.setattr(store_engine, "PING_AFTER_IDLE_SECONDS", 0.0)
    assert _backend_pid(store) == first
    assert pings == [1]


@pytest.mark.postgresql_only
def test_a_pooled_connection_the_server_closed_is_replaced_without_an_error(
    store: Store, store_url: str
) -> None:
    pooled = _backend_pid(store)
    terminate_other_backends(store_url)
    assert _backend_pid(store) != pooled


@pytest.mark.postgresql_only
def test_a_read_leaves_no_transaction_open_between_its_statements(store: Store) -> None:
    observer = Store.from_url(store.engine.url.render_as_string(hide_password=False))
    try:
        with store.read() as connection:
            pid = connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()
            with observer.read() as watching:
                state = watching.exec_driver_sql(
                    f"SELECT state FROM pg_stat_activity WHERE pid = {int(pid)}"
                ).scalar_one()
            # The read goes on after the wait: a later statement still answers.
            assert connection.exec_driver_sql("SELECT 1").scalar_one() == 1
    finally:
        observer.dispose()
    # Not 'idle in transaction': no snapshot or lock held while the request computes.
    assert state == "idle"


@pytest.mark.postgresql_only
def test_as_many_reads_at_once_as_the_pool_keeps_reuse_its_connections(store_url: str) -> None:
    readers = store_engine.POOL_SIZE + 3
    store = Store.from_url(store_url, pool_size=readers)
    all_in = threading.Barrier(readers, timeout=30)

    def read_backend() -> int:
        with store.read() as connection:
            pid = int(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
            all_in.wait()  # every reader holds its connection at once
            return pid

    seen: set[int] = set()
    try:
        with ThreadPoolExecutor(readers) as pool:
            for _ in range(3):
                seen.update(pool.map(lambda _: read_backend(), range(readers)))
    finally:
        store.dispose()
    # Opened once and kept: a pool smaller than the readers closes the connections
    # past its size at check-in and opens new ones the next round.
    assert len(seen) == readers


def test_moments_come_back_aware_and_in_utc_on_every_database(store: Store) -> None:
    moment = datetime(2026, 3, 1, 14, 30, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    versions = tables.memory_versions
    with store.write() as connection:
        connection.execute(
            versions.insert().values(
                tenant_id="t1", subject_id="ana", version="v1", changed_at=moment
            )
        )
    with store.read() as connection:
        read = connection.execute(sa.select(versions.c.changed_at)).scalar_one()
    assert read == moment
    assert read.tzinfo is UTC  # isoformat() then says +00:00, as every answer does


@pytest.mark.postgresql_only
def test_a_session_opened_in_another_zone_is_set_to_utc_before_its_first_use(
    store_url: str,
) -> None:
    url = sa.make_url(store_url)
    with psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.username,
        dbname=url.database,
        options="-c timezone=Asia/Kolkata",
    ) as connection:
        assert connection.info.timezone is not UTC  # as a pooler dropping options leaves it
        store_engine.sessions_in_utc(connection)

        assert connection.info.timezone is UTC
        (now,) = connection.execute("SELECT now()").fetchone() or ()
        assert now.tzinfo is UTC


@pytest.mark.parametrize("wanted", [set(), {"v2"}, {"v1", "v3"}])
def test_in_select_finds_what_in_finds(store: Store, wanted: set[str]) -> None:
    versions = tables.memory_versions
    moment = datetime(2026, 3, 1, tzinfo=UTC)
    with store.write() as connection:
        connection.execute(
            versions.insert(),
            [
                {"tenant_id": "t1", "subject_id": f"s{n}", "version": f"v{n}", "changed_at": moment}
                for n in range(1, 5)
            ],
        )
    chosen = sa.select(versions.c.subject_id).where(versions.c.version.in_(sorted(wanted)))
    postgresql = store.engine.dialect.name == "postgresql"
    with store.read() as connection:
        found = connection.execute(
            sa.select(versions.c.version).where(
                tables.in_select(versions.c.subject_id, chosen, postgresql=postgresql)
            )
        ).scalars()
        assert set(found) == wanted
