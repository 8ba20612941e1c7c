"""A compile's counts are its net change to the store, however its chunks got there:
what each chunk hands a job adds up to the compile's result, a conflict a chunk opened
and a later chunk closed counts in neither, and a conflict open before the compile that
a chunk closes and a later one opens again was not opened by it."""

from __future__ import annotations

import uuid

from memsync.runtime.compiling.service import _ChunkOutcome, _Tally

FIRST, SECOND = uuid.uuid4(), uuid.uuid4()


def outcome(*conflict_transitions: tuple[uuid.UUID, bool]) -> _ChunkOutcome:
    return _ChunkOutcome(
        episodes_compiled=1,
        created=(),
        transitions=(),
        conflict_transitions=conflict_transitions,
        memories_loaded=0,
    )


def tally_of(*outcomes: _ChunkOutcome) -> tuple[_Tally, list[int]]:
    """The compile's tally and what each chunk handed a job as ``conflicts_opened``."""
    tally, handed = _Tally(), []
    for chunk in outcomes:
        handed.append(tally.counts(chunk)["conflicts_opened"])
        tally.add(chunk)
    return tally, handed


def test_a_conflict_opened_and_closed_within_one_compile_is_not_counted() -> None:
    tally, handed = tally_of(
        outcome((FIRST, True)), outcome((SECOND, True)), outcome((FIRST, False))
    )

    assert tally.result("ana", "job").conflicts_opened == 1
    assert handed == [1, 1, -1]


def test_a_conflict_open_before_the_compile_closed_and_opened_again_was_not_opened_by_it() -> None:
    tally, handed = tally_of(outcome((FIRST, False)), outcome((FIRST, True)))

    assert tally.result("ana", "job").conflicts_opened == 0
    assert handed == [0, 0]
