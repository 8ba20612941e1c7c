"""The OpenAPI document describes every response body: no route answers a bare dict."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK, build_app


def _resolved(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    reference = schema.get("$ref")
    if reference is None:
        return schema
    resolved: dict[str, Any] = components[reference.rsplit("/", 1)[-1]]
    return resolved


def test_every_success_response_of_every_route_declares_the_fields_of_its_body(
    store: Store,
) -> None:
    document = TestClient(build_app(store), base_url=LOOPBACK).get("/openapi.json").json()
    components = document["components"]["schemas"]

    undescribed = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            successes = {
                status: response
                for status, response in operation["responses"].items()
                if status.startswith("2")
            }
            if not successes:
                undescribed.append(f"{method.upper()} {path}: no 2xx response")
            for status, response in successes.items():
                schema = response.get("content", {}).get("application/json", {}).get("schema", {})
                if not _resolved(schema, components).get("properties"):
                    undescribed.append(f"{method.upper()} {path} {status}: {schema}")

    assert len(document["paths"]) >= 15
    assert undescribed == []
