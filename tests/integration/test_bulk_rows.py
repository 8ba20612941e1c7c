"""Bulk inserts of rows (``tables.insert_rows``) and pipelined statements, on both
databases."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.runtime.storage import Store, tables

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def version_rows(subjects: range) -> Iterator[dict[str, Any]]:
    for n in subjects:
        yield {"tenant_id": "t1", "subject_id": f"s{n}", "version": f"v{n}", "changed_at": NOW}


def stored_versions(store: Store) -> list[tuple[str, str]]:
    with store.read() as connection:
        rows = connection.execute(
            sa.select(tables.memory_versions.c.subject_id, tables.memory_versions.c.version)
        )
        return sorted((subject, version) for subject, version in rows)


def test_rows_from_a_generator_are_inserted_a_statement_at_a_time_and_all_of_them(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "ROWS_PER_BATCH", 2)
    with store.write() as connection:
        tables.insert_rows(connection, tables.memory_versions, version_rows(range(5)), ignore=False)

    assert stored_versions(store) == sorted((f"s{n}", f"v{n}") for n in range(5))


def test_ignoring_skips_rows_a_unique_index_holds_and_an_empty_input_writes_nothing(
    store: Store,
) -> None:
    with store.write() as connection:
        tables.insert_rows(connection, tables.memory_versions, version_rows(range(2)), ignore=False)
        tables.insert_rows(connection, tables.memory_versions, [], ignore=False)
        again = ({**row, "version": "other"} for row in version_rows(range(3)))
        tables.insert_rows(connection, tables.memory_versions, again, ignore=True)

    assert stored_versions(store) == [("s0", "v0"), ("s1", "v1"), ("s2", "other")]


def test_a_failing_batch_raises_the_databases_error_and_the_transaction_keeps_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tables, "ROWS_PER_BATCH", 2)
    # The third row repeats the first one's key: the second statement fails, after the
    # first was sent (on PostgreSQL, before its result was read).
    rows = [*version_rows(range(2)), *version_rows(range(1))]

    with pytest.raises(sa.exc.IntegrityError), store.write() as connection:
        tables.insert_rows(connection, tables.memory_versions, rows, ignore=False)

    assert stored_versions(store) == []


def test_on_sqlite_each_batch_is_one_statement_of_many_rows_within_the_parameter_limit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An executemany steps, and lets go of the GIL, once a row: with another thread
    # computing, every row then waits for the interpreter (see insert_rows).
    if store.is_postgresql:
        pytest.skip("PostgreSQL streams the rows by COPY")
    import sqlite3

    monkeypatch.setattr(tables, "ROWS_PER_BATCH", 4)
    sent: list[tuple[bool, int]] = []

    def count(*arguments: Any) -> None:
        parameters, executemany = arguments[3], arguments[5]
        sent.append((executemany, len(parameters)))

    with store.write() as connection:
        driver = connection.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        # memory_versions has four columns: at most two rows a statement.
        limit = driver.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 9)
        sa.event.listen(connection, "before_cursor_execute", count)
        try:
            tables.insert_rows(
                connection, tables.memory_versions, version_rows(range(7)), ignore=False
            )
            again = ({**row, "version": "other"} for row in version_rows(range(8)))
            tables.insert_rows(connection, tables.memory_versions, again, ignore=True)
        finally:
            sa.event.remove(connection, "before_cursor_execute", count)
            driver.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)

    # 7 rows: batches of 4 and 3, sent as 2 + 2 and 2 + 1 rows; then 8 rows, 2 at a time.
    assert sent == [(False, 8), (False, 8), (False, 8), (False, 4)] + [(False, 8)] * 4
    assert stored_versions(store) == sorted(
        [(f"s{n}", f"v{n}") for n in range(7)] + [("s7", "other")]
    )


def test_provenance_naming_no_memory_is_refused(store: Store) -> None:
    orphan = {
        "tenant_id": "t1",
        "memory_id": uuid.uuid4(),
        "episode_id": uuid.uuid4(),
        "subject_id": "ana",
        "episode_revision": 1,
        "added_at": NOW,
    }
    with pytest.raises(sa.exc.IntegrityError), store.write() as connection:
        tables.insert_rows(connection, tables.memory_sources, [orphan], ignore=True)


@pytest.mark.postgresql_only
def test_pipelined_statements_have_run_when_the_block_ends(store: Store) -> None:
    with store.write() as connection:
        with tables.pipelined(connection) as send:
            send(
                "INSERT INTO memory_versions VALUES (%(t)s, %(s)s, %(v)s, %(at)s)",
                {"t": "t1", "s": "ana", "v": "v1", "at": NOW},
            )
            send("UPDATE memory_versions SET version = %(v)s", {"v": "v2"})
        # The connection is SQLAlchemy's again, in the same transaction.
        versions = connection.execute(sa.select(tables.memory_versions.c.version)).scalars()
        assert list(versions) == ["v2"]
    assert stored_versions(store) == [("ana", "v2")]


def send_then_fail(store: Store) -> None:
    with store.write() as connection, tables.pipelined(connection) as send:
        send("INSERT INTO memory_versions VALUES ('t1', 'ana', 'v1', now())", {})
        raise RuntimeError("resolver failed")


@pytest.mark.postgresql_only
def test_an_error_of_the_block_propagates_and_what_it_sent_is_rolled_back(store: Store) -> None:
    with pytest.raises(RuntimeError, match="resolver failed"):
        send_then_fail(store)
    assert stored_versions(store) == []


def test_pipelined_statements_need_postgresql(store: Store) -> None:
    if store.is_postgresql:
        pytest.skip("the refusal is SQLite's")
    with (
        store.read() as connection,
        pytest.raises(ValueError, match="PostgreSQL"),
        tables.pipelined(connection),
    ):
        pass


def memory_row(memory_id: uuid.UUID, content: str) -> dict[str, Any]:
    return {
        "tenant_id": "t1",
        "id": memory_id,
        "subject_id": "ana",
        "memory_key": content,
        "kind": "fact",
        "content": content,
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


def test_one_of_matches_exactly_the_ids_given(store: Store) -> None:
    ids = [uuid.uuid4() for _ in range(6)]
    rows = [memory_row(memory_id, f"m{n}") for n, memory_id in enumerate(ids)]
    with store.write() as connection:
        tables.insert_rows(connection, tables.memories, rows, ignore=False)
    memories = tables.memories
    wanted = [ids[1], ids[3], ids[4], uuid.uuid4()]  # the last names nothing
    with store.read() as connection:
        found = connection.execute(
            sa.select(memories.c.content).where(
                tables.one_of(memories.c.id, wanted, postgresql=store.is_postgresql)
            )
        )
        assert sorted(found.scalars()) == ["m1", "m3", "m4"]


def test_one_of_on_postgresql_sends_the_arrays_text_untyped_so_the_server_reads_it_once() -> None:
    from sqlalchemy.dialects import postgresql

    memories = tables.memories
    for column, array_type in ((memories.c.id, "UUID[]"), (memories.c.memory_key, "TEXT[]")):
        statement = sa.select(memories.c.id).where(tables.one_of(column, ["a"], postgresql=True))
        sql = str(statement.compile(dialect=postgresql.psycopg.dialect()))
        # A parameter typed as text (``%(param_1)s::VARCHAR``) is cast again for every
        # row a prepared statement's generic plan filters: a 4,000-episode compile took
        # 35-45 s so. Untyped, the parameter takes the array's type.
        assert re.search(r"= ANY \(CAST\(%\(param_\d+\)s AS " + re.escape(array_type), sql), sql


# Keys that an array's text must quote: separators, braces, quotes, backslashes, spaces,
# the word NULL, an empty string, letters outside ASCII. (PostgreSQL's text holds no NUL.)
_AWKWARD_KEYS = st.lists(
    st.one_of(
        st.sampled_from([",", "{", "}", '"', "\\", " ", "NULL", "ü", "\n"]),
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    ),
    max_size=6,
).map("".join)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(keys=st.lists(_AWKWARD_KEYS, min_size=1, max_size=8, unique=True), data=st.data())
def test_one_of_matches_exactly_the_text_keys_given_however_they_are_spelled(
    store: Store, keys: list[str], data: st.DataObject
) -> None:
    memories = tables.memories
    tenant = f"t-{uuid.uuid4().hex}"  # the store lives across examples
    rows = [
        {**memory_row(uuid.uuid4(), f"m{n}"), "tenant_id": tenant, "memory_key": key}
        for n, key in enumerate(keys)
    ]
    with store.write() as connection:
        tables.insert_rows(connection, memories, rows, ignore=False)
    wanted = data.draw(st.lists(st.sampled_from(keys), unique=True))
    absent = data.draw(_AWKWARD_KEYS.filter(lambda key: key not in keys))
    with store.read() as connection:
        found = connection.execute(
            sa.select(memories.c.memory_key).where(
                memories.c.tenant_id == tenant,
                tables.one_of(
                    memories.c.memory_key, [*wanted, absent], postgresql=store.is_postgresql
                ),
            )
        )
        assert sorted(found.scalars()) == sorted(wanted)


def wide_memory_row(number: int, **changes: Any) -> dict[str, Any]:
    lisbon = timezone(timedelta(hours=1))
    row = {
        "tenant_id": "t1",
        "id": uuid.UUID(int=number),
        "subject_id": "ana",
        "memory_key": f"k{number}",
        "kind": "fact",
        "content": f"Fact ü{number}",
        "claim_key": None,
        "claim_value": None,
        "confidence": 0.7,
        "negated": number % 2 == 0,
        "explicit_change": False,
        "status": "active",
        "status_rule": None,
        # A time in another zone, one repeated down the column, and a missing one.
        "valid_from": datetime(2026, 1, 1, 10, 30, 0, 123456, tzinfo=lisbon),
        "valid_to": None if number % 3 else NOW,
        "asserted_at": NOW + timedelta(microseconds=number),
        "metadata": {"rule": "figure", "flag": True, "one": 1, "nested": [number]},
        "job_id": "job-1",
        "created_at": NOW,
        "updated_at": NOW,
        "status_changed_at": NOW,
    }
    return {**row, **changes}


def test_inserted_rows_are_stored_as_sqlalchemys_own_insert_stores_them(store: Store) -> None:
    bulk = [wide_memory_row(n) for n in range(1, 7)]
    by_statement = [wide_memory_row(n, tenant_id="t2") for n in range(1, 7)]
    with store.write() as connection:
        tables.insert_rows(connection, tables.memories, bulk, ignore=False)
        connection.execute(tables.memories.insert(), by_statement)

    with store.read() as connection:
        # The driver's own values, before any type converts them back.
        raw = connection.exec_driver_sql("SELECT * FROM memories ORDER BY id").all()
    stored: dict[str, list[list[Any]]] = {"t1": [], "t2": []}
    tenant_at = list(tables.memories.c.keys()).index("tenant_id")
    for row in raw:
        values = list(row)
        stored[values.pop(tenant_at)].append(values)
    assert len(stored["t1"]) == 6
    assert stored["t1"] == stored["t2"]


def test_every_column_of_the_store_has_a_type_for_copy() -> None:
    from memsync.runtime.storage.schema import metadata

    found = {
        tables._copy_type(column.type)
        for table in metadata.tables.values()
        for column in table.columns
    }
    assert {"uuid", "jsonb", "timestamptz", "varchar", "text", "int4", "float8"} <= found
    with pytest.raises(TypeError, match="no COPY type"):
        tables._copy_type(sa.LargeBinary())


def test_picked_columns_are_the_named_ones_in_the_asked_order_whatever_the_select_order(
    store: Store,
) -> None:
    with store.write() as connection:
        tables.insert_rows(connection, tables.memory_versions, version_rows(range(3)), ignore=False)
    versions = tables.memory_versions
    with store.read() as connection:
        rows = connection.execute(
            sa.select(versions.c.version, versions.c.changed_at, versions.c.subject_id).order_by(
                versions.c.subject_id
            )
        ).all()
        nothing = connection.execute(sa.select(versions).where(versions.c.version == "none")).all()

    assert tables.picked(rows, ["subject_id", "version"]) == [(f"s{n}", f"v{n}") for n in range(3)]
    assert tables.picked(nothing, ["subject_id", "version"]) == []
