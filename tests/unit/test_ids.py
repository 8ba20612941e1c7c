from __future__ import annotations

import os
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync import ids
from memsync.ids import random_uuids


@given(st.integers(min_value=-3, max_value=300))
def test_random_uuids_are_as_many_distinct_version_4_ids_as_asked(count: int) -> None:
    drawn = random_uuids(count)

    assert len(drawn) == max(count, 0)
    assert len(set(drawn)) == len(drawn)
    assert all(drawn_id.version == 4 for drawn_id in drawn)
    assert all(drawn_id.variant == uuid.RFC_4122 for drawn_id in drawn)


def test_a_batch_of_ids_is_one_read_of_the_random_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[int] = []
    read = os.urandom

    def counted(size: int) -> bytes:
        reads.append(size)
        return read(size)

    monkeypatch.setattr(ids.os, "urandom", counted)

    drawn = random_uuids(1_000)

    assert reads == [16_000]
    assert len(set(drawn)) == 1_000


def test_the_ids_are_the_random_bytes_with_uuid4s_version_and_variant_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ids.os, "urandom", lambda size: bytes(range(size)))

    first, second = random_uuids(2)

    # What uuid.uuid4() makes of the same 16 bytes a call.
    assert first == uuid.UUID(bytes=bytes(range(16)), version=4)
    assert second == uuid.UUID(bytes=bytes(range(16, 32)), version=4)
    assert first != second
