"""The engine memsync builds for a store URL."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from memsync.runtime.storage import Store


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
