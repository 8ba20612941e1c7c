"""The API fuzzed from its own OpenAPI document with schemathesis (issue #15).

Bounded: a fixed seed and a few examples per operation, so it runs in well under a
minute. It fails on any 5xx, on a response whose body does not match its declared
schema, and on a status code the document does not declare. It runs on PostgreSQL
(where NUL characters and out-of-range integers once answered 500) as part of the
normal suite; ``pytest --db=postgresql`` is what ``make test`` and CI run.
"""

from __future__ import annotations

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from memsync.runtime.storage import Store
from tests.helpers import build_app

pytestmark = pytest.mark.postgresql_only


@pytest.fixture
def api(store: Store) -> FastAPI:
    return build_app(store)


def _unconnected_app() -> FastAPI:
    # The document does not depend on the store; each call goes to ``api`` instead.
    return build_app(Store.from_url("sqlite://"))


schema = schemathesis.openapi.from_asgi(
    "/openapi.json", _unconnected_app(), headers={"host": "127.0.0.1"}
)


@schema.parametrize()
@settings(
    max_examples=12,
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_no_input_gets_a_5xx_or_an_undeclared_answer(case: schemathesis.Case, api: FastAPI) -> None:
    case.call_and_validate(
        app=api,
        headers={"host": "127.0.0.1"},
        checks=[not_a_server_error, response_schema_conformance, status_code_conformance],
    )
