"""A single new episode's insert on the raw psycopg connection (``ingest_one`` on
PostgreSQL): the SQL Core would send, the rows Core's path stores, and the pool's
handling of errors, disconnects and interruptions."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa

from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft, IngestStatus
from memsync.runtime.ingest.service import IngestService
from memsync.runtime.storage import Store
from memsync.runtime.storage.engine import is_store_unavailable

pytestmark = pytest.mark.postgresql_only

NOW = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)


def _drafts(prefix: str) -> list[EpisodeDraft]:
    lisbon = timezone(timedelta(hours=1))
    return [
        EpisodeDraft("user-1", "chat", "message", {"text": "I live in Lisbon"}, f"{prefix}a"),
        EpisodeDraft(
            "user-2",
            "crm",
            "note",
            {"n": 1.290988186275339e17, "zz": [1, "ü", None], "a": {"b": True}},
            f"{prefix}b",
            occurred_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=lisbon),
            metadata={"z": 1, "a": "é"},
            provenance={"connector": "c1", "source_updated_at": "2025-01-02T03:04:05+00:00"},
            session_id="s-1",
        ),
        EpisodeDraft("user-1", "chat", "message", {"text": "keyless"}),
    ]


_COLUMNS = (
    "tenant_id, subject_id, source, type, idempotency_key, content_hash, session_id, "
    "occurred_at::text, payload::text, metadata::text, provenance::text, revision, "
    "compiled_revision, created_at::text, revised_at::text, deleted_at::text"
)


def _rows(store: Store, tenant_id: str) -> list[tuple[Any, ...]]:
    with store.read() as connection:
        return [
            tuple(row)
            for row in connection.exec_driver_sql(
                f"SELECT {_COLUMNS} FROM episodes WHERE tenant_id = %(t)s "
                "ORDER BY idempotency_key NULLS LAST",
                {"t": tenant_id},
            )
        ]


def test_ingest_one_stores_the_rows_and_answers_the_outcomes_of_ingest(store: Store) -> None:
    service = IngestService(store, clock=FakeClock(NOW))
    core = [service.ingest("core", [draft], with_stored=True)[0] for draft in _drafts("k-")]

    async def raw() -> list[Any]:
        return [await service.ingest_one("raw", draft, with_stored=True) for draft in _drafts("k-")]

    answered = asyncio.run(raw())

    # The same stored bytes (JSON text, times in UTC), the tenant aside.
    assert [row[1:] for row in _rows(store, "raw")] == [row[1:] for row in _rows(store, "core")]
    for mine, theirs in zip(answered, core, strict=True):
        assert (mine.status, mine.revision) == (theirs.status, theirs.revision)
        assert mine.stored is not None
        assert theirs.stored is not None
        assert mine.stored["id"] == mine.episode_id
        skip = {"tenant_id", "id"}
        assert {k: v for k, v in mine.stored.items() if k not in skip} == {
            k: v for k, v in theirs.stored.items() if k not in skip
        }
    # A known key falls back to the transaction: a duplicate, the same episode.
    again = asyncio.run(service.ingest_one("raw", _drafts("k-")[0]))
    assert (again.status, again.episode_id) == (IngestStatus.DUPLICATE, answered[0].episode_id)
    assert (
        asyncio.run(service.ingest_one("raw", _drafts("new-")[0])).stored is None
    )  # not asked for


def test_the_raw_insert_is_the_sql_and_parameters_core_sends(store: Store) -> None:
    service = IngestService(store, clock=FakeClock(NOW))
    sent: list[tuple[str, dict[str, Any]]] = []

    def capture(*arguments: Any) -> None:
        sent.append((arguments[2], arguments[3]))

    sa.event.listen(store.engine, "before_cursor_execute", capture)
    try:
        for draft in _drafts("k-")[1:]:
            service.ingest("t", [draft])
    finally:
        sa.event.remove(store.engine, "before_cursor_execute", capture)

    for draft, (statement, parameters) in zip(_drafts("x-")[1:], sent, strict=True):
        insert = service._statements.single_insert("t", draft, NOW)
        assert insert.sql == statement
        assert insert.parameters.keys() == parameters.keys()
        assert (insert.parameters["tenant_id"], insert.parameters["now"]) == ("t", NOW)


def _backend(store: Store) -> int:
    [(pid,)] = asyncio.run(store.run_one_statement_async("SELECT pg_backend_pid()", {}))
    return int(pid)


def test_a_statement_error_is_sqlalchemys_and_keeps_the_connection(store: Store) -> None:
    first = _backend(store)
    with pytest.raises(sa.exc.DataError) as raised:
        asyncio.run(store.run_one_statement_async("SELECT 1 / %(zero)s", {"zero": 0}))
    assert not raised.value.connection_invalidated
    assert not is_store_unavailable(raised.value)
    assert _backend(store) == first


def test_a_connection_broken_mid_statement_is_discarded_and_the_next_is_fresh(
    store: Store,
) -> None:
    first = _backend(store)
    with pytest.raises(sa.exc.OperationalError) as raised:
        asyncio.run(
            store.run_one_statement_async("SELECT pg_terminate_backend(pg_backend_pid())", {})
        )
    assert raised.value.connection_invalidated
    assert is_store_unavailable(raised.value)  # the API's 503
    assert _backend(store) != first


def test_a_statement_cancelled_mid_way_discards_its_connection(store: Store) -> None:
    first = _backend(store)

    async def cancelled() -> None:
        task = asyncio.ensure_future(store.run_one_statement_async("SELECT pg_sleep(30)", {}))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert _backend(store) != first


def test_a_store_that_is_down_raises_sqlalchemys_operational_error() -> None:
    store = Store.from_url("postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=2")
    try:
        with pytest.raises(sa.exc.OperationalError) as raised:
            asyncio.run(store.run_one_statement_async("SELECT 1", {}))
        assert is_store_unavailable(raised.value)
    finally:
        store.dispose()
