"""Suite-wide fixtures: the database every storage test runs on.

``pytest --db=sqlite`` (the default), ``pytest --db=postgresql`` or ``pytest --db=citus``.
The PostgreSQL run creates a throwaway database for the session on the server named by
``MEMSYNC_TEST_POSTGRES_ADMIN_URL`` (default: the local cluster) and drops it at the
end, so nothing depends on state left by an earlier run. The Citus run uses the
database ``scripts/citus start`` makes on a local coordinator and two workers
(``MEMSYNC_TEST_CITUS_URL``, default: that script's URL): it drops memsync's tables
there first, then migrates, which distributes them. Each test gets an empty, migrated
store: a copy of a migrated template file on SQLite, truncated tables on PostgreSQL
and Citus. A test marked ``postgresql_only`` runs on both of those.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from memsync.runtime.storage import Store, metadata, upgrade

# Every run ends with the list of skipped tests and their reasons (tests/skip_report.py).
pytest_plugins = ["tests.skip_report"]

DEFAULT_POSTGRES_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_CITUS_URL = "postgresql+psycopg://postgres@127.0.0.1:9700/memsync"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        choices=("sqlite", "postgresql", "citus"),
        default="sqlite",
        help="database backend for storage, ingest and API tests",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    backend = config.getoption("--db")
    if backend != "citus":
        skip = pytest.mark.skip(reason="runs with --db=citus (as CI does)")
        for item in items:
            if "citus_only" in item.keywords:
                item.add_marker(skip)
    if backend != "sqlite":
        return
    skip = pytest.mark.skip(reason="runs with --db=postgresql (as make test and CI do)")
    for item in items:
        if "postgresql_only" in item.keywords:
            item.add_marker(skip)


@dataclass(frozen=True)
class Database:
    """Where a test's store lives; ``new_url()`` gives a fresh empty store's URL."""

    backend: str
    template: str

    @property
    def is_postgresql(self) -> bool:
        """PostgreSQL itself, or Citus (which is PostgreSQL, distributed)."""
        return self.backend in ("postgresql", "citus")

    def new_url(self, directory: Path) -> str:
        if self.backend == "sqlite":
            target = directory / f"store-{uuid.uuid4().hex[:8]}.db"
            shutil.copyfile(self.template, target)
            return f"sqlite:///{target}"
        _truncate_all(self.template)
        return self.template


def _truncate_all(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            names = ", ".join(table.name for table in reversed(metadata.sorted_tables))
            connection.exec_driver_sql(f"TRUNCATE {names} CASCADE")
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Database]:
    backend = str(request.config.getoption("--db"))
    if backend == "citus":
        yield _citus_database()
        return
    if backend == "sqlite":
        template = tmp_path_factory.mktemp("template") / "template.db"
        store = Store.from_url(f"sqlite:///{template}")
        upgrade(store)
        store.dispose()
        yield Database("sqlite", str(template))
        return

    admin_url = os.environ.get("MEMSYNC_TEST_POSTGRES_ADMIN_URL", DEFAULT_POSTGRES_ADMIN_URL)
    name = f"memsync_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
    url = sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    store = Store.from_url(url)
    upgrade(store)
    store.dispose()
    try:
        yield Database("postgresql", url)
    finally:
        with admin.connect() as connection:
            connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


def _citus_database() -> Database:
    url = os.environ.get("MEMSYNC_TEST_CITUS_URL", DEFAULT_CITUS_URL)
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            names = sa.inspect(connection).get_table_names()
            if names:
                connection.exec_driver_sql(f"DROP TABLE {', '.join(names)} CASCADE")
    finally:
        engine.dispose()
    store = Store.from_url(url)
    upgrade(store)
    store.dispose()
    return Database("citus", url)


@pytest.fixture
def store_url(database: Database, tmp_path: Path) -> str:
    """The URL of an empty, migrated store of the backend under test."""
    return database.new_url(tmp_path)


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    store = Store.from_url(store_url)
    yield store
    store.dispose()
