"""Suite-wide options: which database the storage tests run on.

``pytest --db=sqlite`` (the default) or ``pytest --db=postgresql``. The PostgreSQL run
creates a throwaway database per session on the server named by
``MEMSYNC_TEST_POSTGRES_ADMIN_URL`` and drops it at the end, so nothing depends on
state left by an earlier run.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="database backend for storage, ingest and API tests",
    )


@pytest.fixture(scope="session")
def db_backend(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--db"))
