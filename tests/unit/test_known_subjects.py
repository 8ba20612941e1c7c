"""What a process keeps of each subject's last compile for the next (``KnownSubjects``):
active memories only (episode summaries aside), bounded, the subject compiled least
recently dropped first.

That what is kept is used only while the subject's version is unchanged is held by the
compile tests (tests/integration/test_compile_chunking.py), against a store."""

from __future__ import annotations

import pytest

from memsync.compile.types import MemoryKind, MemoryStatus, StoredMemory
from memsync.runtime.compiling.memories import KnownMemories, KnownSubjects
from tests.unit.compile.builders import claim, run, statement


def memories(count: int) -> list[StoredMemory]:
    """``count`` active memories of one subject."""
    _, stored = run([statement(f"Fact number {n} holds", n) for n in range(count)])
    assert [m.status for m in stored] == [MemoryStatus.ACTIVE] * count
    return stored


def known(stored: list[StoredMemory], version: str = "v1") -> KnownMemories:
    return KnownMemories(version, {memory.memory_key: memory for memory in stored})


def test_a_subject_kept_is_given_back_with_its_active_memories_only() -> None:
    _, stored = run(
        [
            claim("location.current", "Berlin", 1),
            claim("location.current", "Madrid", 2),
            # Active, but read by a compile only when its candidates name it.
            statement("chat message: in Madrid now", 2, kind=MemoryKind.EPISODE_SUMMARY),
        ]
    )
    assert sorted(m.status for m in stored) == [
        MemoryStatus.ACTIVE,
        MemoryStatus.ACTIVE,
        MemoryStatus.SUPERSEDED,
    ]
    subjects = KnownSubjects(capacity=100)

    subjects.keep("t", "ana", known(stored))

    held = subjects.get("t", "ana")
    assert held is not None
    assert held.version == "v1"
    assert [m.claim_value for m in held.by_key.values()] == ["madrid"]
    assert subjects.size == 2
    assert subjects.get("t", "bob") is None
    assert subjects.get("other-tenant", "ana") is None


def test_keeping_a_subject_again_replaces_it_and_none_drops_it() -> None:
    subjects = KnownSubjects(capacity=100)
    subjects.keep("t", "ana", known(memories(2), "v1"))
    subjects.keep("t", "ana", known(memories(3), "v2"))

    held = subjects.get("t", "ana")
    assert held is not None
    assert (held.version, len(held.by_key), subjects.size) == ("v2", 3, 4)

    subjects.keep("t", "ana", None)
    assert subjects.get("t", "ana") is None
    assert subjects.size == 0


def test_the_subject_compiled_least_recently_is_dropped_first() -> None:
    # Each subject counts as its two memories plus one: three fit in 9, not four.
    subjects = KnownSubjects(capacity=9)
    for name in ("a", "b", "c"):
        subjects.keep("t", name, known(memories(2)))
    assert subjects.get("t", "a") is not None  # asked for: now the most recent

    subjects.keep("t", "d", known(memories(2)))

    held = [name for name in ("a", "b", "c", "d") if subjects.get("t", name) is not None]
    assert held == ["a", "c", "d"]
    assert subjects.size == 9


def test_a_subject_larger_than_the_bound_is_not_kept_and_nothing_is_kept_at_zero() -> None:
    subjects = KnownSubjects(capacity=4)
    subjects.keep("t", "small", known(memories(1)))
    subjects.keep("t", "large", known(memories(4)))
    subjects.keep("t", "small-then-large", known(memories(1)))
    subjects.keep("t", "small-then-large", known(memories(4)))

    assert subjects.get("t", "small") is not None
    assert subjects.get("t", "large") is None
    assert subjects.get("t", "small-then-large") is None
    assert subjects.size == 2

    none = KnownSubjects(capacity=0)
    none.keep("t", "empty", known([]))
    assert none.get("t", "empty") is None


def test_a_negative_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="capacity must be 0 or more"):
        KnownSubjects(capacity=-1)
