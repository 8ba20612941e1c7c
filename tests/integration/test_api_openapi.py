"""The OpenAPI document describes every response body: no route answers a bare dict."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from memsync.runtime.app.config import ApiKey, ApiSettings
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
                if schema.get("type") == "array":
                    # A list Statewave answers bare (GET /v1/resolutions): its items'.
                    schema = schema.get("items", {})
                if not _resolved(schema, components).get("properties"):
                    undescribed.append(f"{method.upper()} {path} {status}: {schema}")

    assert len(document["paths"]) >= 15
    assert undescribed == []


KEY = "k-ops-0123456789"


def _keyed_app(store: Store) -> TestClient:
    api = ApiSettings(keys=[ApiKey(name="ops", key=KEY, tenants=["acme"])], max_body_bytes=1024)
    return TestClient(build_app(store, api))


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
    ]


def _url(path: str) -> str:
    # Every path parameter is an id; an unknown one exercises the 404 a route documents.
    return re.sub(r"\{[^}]+\}", str(uuid.uuid4()), path)


def test_errors_are_the_envelope_and_authenticated_routes_declare_the_api_key(
    store: Store,
) -> None:
    document = _keyed_app(store).get("/openapi.json").json()
    scheme = document["components"]["securitySchemes"]["ApiKeyAuth"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "X-API-Key")
    assert "HTTPValidationError" not in document["components"]["schemas"]

    for method, path, operation in _operations(document):
        errors = {s: r for s, r in operation["responses"].items() if s[0] in "45"}
        for status, response in errors.items():
            schema = response["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (path, status)
        if path in ("/v1/health", "/healthz", "/readyz"):
            assert "security" not in operation
            continue
        if path == "/v1/webhooks/{connector_name}":
            # A vendor sends no API key: the delivery's signature authenticates it.
            assert "security" not in operation
            assert {"401", "404", "413"} <= errors.keys()
            continue
        assert operation["security"] == [{"ApiKeyAuth": []}], (method, path)
        # The key is the scheme, not a parameter; the tenant is a header parameter, and
        # so is the caller the read policy decides for, on the routes that read.
        headers = [p["name"] for p in operation.get("parameters", []) if p["in"] == "header"]
        assert headers in (
            ["x-tenant-id"],
            ["x-tenant-id", "x-caller-id", "x-caller-type"],
        ), (method, path)
        assert {"401", "403", "422", "503"} <= errors.keys(), (method, path)
        assert ("413" in errors) == ("requestBody" in operation), (method, path)


def test_every_status_a_route_answers_to_probes_is_documented(store: Store) -> None:
    client = _keyed_app(store)
    document = client.get("/openapi.json").json()
    key = {"X-API-Key": KEY}
    probes: list[tuple[str, dict[str, str], bytes | None]] = [
        ("no key", {}, b"{}"),
        ("unknown key", {"X-API-Key": "nope"}, b"{}"),
        ("another tenant", {**key, "X-Tenant-ID": "globex"}, b"{}"),
        ("bad tenant id", {**key, "X-Tenant-ID": "!!"}, b"{}"),
        ("empty body", key, b"{}"),
        ("oversized body", key, b'{"x": "' + b"a" * 2000 + b'"}'),
    ]
    undocumented = []
    seen: set[int] = set()
    for method, path, operation in _operations(document):
        for name, headers, body in probes:
            sent = body if "requestBody" in operation else None
            response = client.request(
                method.upper(),
                _url(path),
                headers={**headers, "Content-Type": "application/json"},
                content=sent,
            )
            seen.add(response.status_code)
            if str(response.status_code) not in operation["responses"]:
                undocumented.append(f"{method.upper()} {path} ({name}): {response.status_code}")
    assert undocumented == []
    assert {401, 403, 404, 413, 422} <= seen  # the probes reached every kind of refusal


def test_an_unreachable_store_answers_503_with_retry_after_as_documented(tmp_path: Path) -> None:
    gone = Store.from_url(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}")
    client = TestClient(build_app(gone), base_url=LOOPBACK)
    document = client.get("/openapi.json").json()

    response = client.get("/v1/subjects")
    scraped = client.get("/metrics")

    assert response.status_code == 503
    assert "503" in document["paths"]["/v1/subjects"]["get"]["responses"]
    assert response.json()["error"]["code"] == "store_unavailable"
    assert int(response.headers["Retry-After"]) > 0
    # The process's own metrics are still served, saying the store is away.
    assert scraped.status_code == 200
    assert "memsync_store_up 0.0" in scraped.text


def test_a_connectors_state_documents_its_webhook_deliveries_and_push_gap(store: Store) -> None:
    document = TestClient(build_app(store), base_url=LOOPBACK).get("/openapi.json").json()
    components = document["components"]["schemas"]
    operation = document["paths"]["/v1/connectors/{name}/state"]["get"]
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]

    webhook = _resolved(schema, components)["properties"]["webhook"]
    [described, none] = webhook["anyOf"]
    state = _resolved(described, components)
    gap = state["properties"]["push_gap"]["anyOf"][0]

    assert none == {"type": "null"}
    assert {"stored", "duplicate", "revised", "ignored", "refused"} <= state["properties"].keys()
    assert {"last_delivery_at", "last_refusal", "push_gap_after_seconds"} <= state[
        "properties"
    ].keys()
    assert {"last_accepted_at", "first_found_at", "runs", "new_records"} <= (
        _resolved(gap, components)["properties"].keys()
    )
    assert "push gap" in state["description"]
