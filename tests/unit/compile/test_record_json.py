"""Records encoded without validating are byte for byte what their JSON models write."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from memsync.compile.bundle import MemoryJson, dump_json
from memsync.compile.types import MemoryKind, MemoryStatus, StoredMemory, SupersessionRule

texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
moments = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
claims = st.none() | st.tuples(texts, texts)


@st.composite
def stored_memories(draw: st.DrawFn) -> StoredMemory:
    claim = draw(claims)
    valid_from = draw(moments)
    return StoredMemory(
        id=draw(st.uuids()),
        subject_id=draw(texts),
        memory_key=draw(texts),
        kind=draw(st.sampled_from(list(MemoryKind))),
        content=draw(texts),
        claim_key=None if claim is None else claim[0],
        claim_value=None if claim is None else claim[1],
        valid_from=valid_from,
        valid_to=draw(st.none() | st.just(valid_from + timedelta(days=3))),
        status=draw(st.sampled_from(list(MemoryStatus))),
        source_episode_ids=tuple(draw(st.lists(st.uuids(), max_size=3))),
        created_at=draw(moments),
        confidence=draw(st.floats(min_value=0, max_value=1)),
        asserted_at=draw(st.none() | moments),
        negated=draw(st.booleans()),
        explicit_change=draw(st.booleans()),
        status_rule=draw(st.none() | st.sampled_from(list(SupersessionRule))),
        metadata=draw(st.dictionaries(texts, json_values, max_size=4)),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(stored_memories(), max_size=4))
def test_memories_encoded_unvalidated_are_what_the_model_writes(
    memories: list[StoredMemory],
) -> None:
    validated = TypeAdapter(list[MemoryJson]).dump_json(
        [MemoryJson.model_validate(memory) for memory in memories]
    )

    assert dump_json([MemoryJson.values_of(memory) for memory in memories]) == validated


def test_only_records_have_values() -> None:
    with pytest.raises(TypeError, match="MemoryJson takes the values of a record"):
        MemoryJson.values_of({"id": str(uuid.uuid4())})
