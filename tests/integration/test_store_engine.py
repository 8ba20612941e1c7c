"""The engine memsync builds for a store URL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from memsync.runtime.storage import Store
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
