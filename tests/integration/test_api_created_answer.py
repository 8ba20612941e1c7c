"""A new episode's ``201`` answer is built from what its insert was given, not read back
(issue #30, part 2): it must show the episode as the store then serves it.

For any episode the API accepts, the answer to its creation and a later
``GET /v1/episodes/{id}`` agree on every field the creation answer has, as JSON values:
PostgreSQL's ``jsonb`` may reorder an object's keys and spell a number otherwise (a
float sent as ``1.290988186275339e+17`` is read back as ``129098818627533900``, the
same number), so numbers are compared as decimals.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.runtime.storage import Store
from tests.helpers import LOOPBACK, build_app

# Text a store keeps as sent: no NUL (PostgreSQL's text and jsonb refuse it, and the
# API answers 422) and no lone surrogate (not UTF-8).
_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"))
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=1 - 2**53, max_value=2**53 - 1)  # the API refuses others
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
)
_JSON = st.recursive(
    _SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_TEXT, children, max_size=3),
    max_leaves=8,
)
_OBJECTS = st.dictionaries(_TEXT, _JSON, max_size=4)
_LABELS = st.text(st.sampled_from("abcxyz-_:"), min_size=1, max_size=12)


def _values(response: Any) -> dict[str, Any]:
    """A JSON body with its numbers as decimals: one number, however it is spelt."""
    body: dict[str, Any] = json.loads(response.text, parse_float=Decimal, parse_int=Decimal)
    return body


@pytest.fixture
def client(store: Store) -> Iterator[TestClient]:
    with TestClient(build_app(store), base_url=LOOPBACK) as client:
        yield client


@st.composite
def _episodes(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {
        "subject_id": draw(_LABELS),
        "source": draw(_LABELS),
        "type": draw(_LABELS),
        "payload": draw(_OBJECTS),
    }
    if draw(st.booleans()):
        body["idempotency_key"] = f"answer-{uuid.uuid4()}"
    for optional, values in (("metadata", _OBJECTS), ("provenance", _OBJECTS)):
        if draw(st.booleans()):
            body[optional] = draw(values)
    if draw(st.booleans()):
        body["session_id"] = draw(_LABELS)
    if draw(st.booleans()):
        moment = draw(
            st.datetimes(
                min_value=datetime(1970, 1, 1),
                max_value=datetime(2100, 1, 1),
                timezones=st.just(UTC),
            )
        )
        body["occurred_at"] = moment.isoformat()
    return body


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=_episodes())
def test_a_created_answer_shows_the_episode_as_stored(
    client: TestClient, body: dict[str, Any]
) -> None:
    created = client.post("/v1/episodes", json=body)
    assert created.status_code == 201, created.text
    answer = _values(created)
    assert answer["ingest_outcome"] == "created"

    served = client.get(f"/v1/episodes/{answer['id']}")
    assert served.status_code == 200, served.text
    stored = _values(served)
    for field, value in answer.items():
        if field != "ingest_outcome":
            assert stored[field] == value, field


def test_a_batch_answer_shows_each_new_episode_as_stored(client: TestClient) -> None:
    bodies = [
        {
            "subject_id": "batch-answer",
            "source": "chat",
            "type": "message",
            "payload": {"text": f"note {i}", "zeta": i, "a": [1.5, None, {"y": True}]},
            **({"idempotency_key": f"batch-answer-{i}"} if i % 2 else {}),
        }
        for i in range(6)
    ]
    created = client.post("/v1/episodes/batch", json={"episodes": bodies})
    assert created.status_code == 201, created.text
    for answer in _values(created)["episodes"]:
        stored = _values(client.get(f"/v1/episodes/{answer['id']}"))
        assert {field: stored[field] for field in answer if field != "ingest_outcome"} == {
            field: value for field, value in answer.items() if field != "ingest_outcome"
        }
