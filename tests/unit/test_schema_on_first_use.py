"""The schema builds a table when it is first named, with the tables its foreign keys
name; ``metadata`` builds them all (``memsync.runtime.storage.schema``). Each case runs
in a fresh interpreter: in this one, other tests have built every table already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from memsync.runtime.storage import schema


def in_a_fresh_interpreter(code: str) -> Any:
    """What ``code`` prints last, as JSON, run by a new Python."""
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])


BUILT = "sorted(schema._metadata.tables)"
TABLES = sorted(
    name for name, annotation in schema.__annotations__.items() if annotation == "sa.Table"
)


def referenced(name: str) -> set[str]:
    """``name`` and every table its foreign keys lead to, from the whole schema."""
    found = {name}
    for foreign_key in schema.metadata.tables[name].foreign_keys:
        found |= referenced(foreign_key.column.table.name)
    return found


def test_importing_the_storage_and_its_table_handles_builds_no_table() -> None:
    built = in_a_fresh_interpreter(f"""
        import json
        from memsync.runtime.storage import Store, schema, tables
        print(json.dumps({BUILT}))
    """)

    assert built == []


@pytest.mark.parametrize("name", ["jobs", "memory_sources", "backfill_slices", "conflict_history"])
def test_naming_a_table_builds_it_and_the_tables_it_refers_to(name: str) -> None:
    built = in_a_fresh_interpreter(f"""
        import json
        from memsync.runtime.storage import schema, tables
        tables.{name}
        print(json.dumps({BUILT}))
    """)

    assert set(built) == referenced(name)
    assert len(referenced("memory_sources")) > 1  # the case with foreign keys has some


def test_the_metadata_holds_every_table_and_names_them_alike() -> None:
    built = in_a_fresh_interpreter("""
        import json
        from memsync.runtime.storage import metadata
        print(json.dumps(sorted(metadata.tables)))
    """)

    assert built == TABLES
    assert len(TABLES) == 20
    assert all(getattr(schema, name).name == name for name in TABLES)


def test_a_table_built_after_a_store_opened_gets_its_partial_conditions() -> None:
    stated = in_a_fresh_interpreter("""
        import json
        from memsync.runtime.storage import Store, schema
        store = Store.from_url("sqlite://")
        assert not schema._metadata.tables
        index = next(i for i in schema.episodes.indexes if i.name == "ix_episodes_uncompiled")
        print(json.dumps(str(index.dialect_kwargs.get("sqlite_where"))))
    """)

    assert stated == "compiled_revision < revision"


def test_threads_naming_a_table_at_once_get_the_one_table() -> None:
    same = in_a_fresh_interpreter("""
        import json, threading
        from memsync.runtime.storage import schema
        start = threading.Barrier(8)
        seen = []
        def name_it():
            start.wait()
            seen.append(schema.memory_history)
        threads = [threading.Thread(target=name_it) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        print(json.dumps(len({id(table) for table in seen})))
    """)

    assert same == 1


def test_a_name_the_schema_does_not_have_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'episode'"):
        schema.episode  # noqa: B018
