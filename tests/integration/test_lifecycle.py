"""A record's life in the store: moved between subjects, deleted, re-created, compiled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import partial

import pytest

from memsync.clock import FakeClock
from memsync.compile.types import MemoryStatus, SupersessionRule
from memsync.episode import EpisodeDraft, IngestStatus, KeyScope, Tombstone
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService, delete_subject_episodes
from memsync.runtime.reading import ContextReader, EpisodeRepository, MemoryRepository
from memsync.runtime.reading.inspector import inspect_subject
from memsync.runtime.storage import Store

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def ticket(
    key: str,
    text: str,
    subject: str,
    day: int = 0,
    *,
    source: str = "zendesk",
    type: str = "zendesk.ticket",
    field: str = "subject",
) -> EpisodeDraft:
    return EpisodeDraft(
        subject_id=subject,
        source=source,
        type=type,
        payload={field: text},
        idempotency_key=key,
        occurred_at=START + timedelta(days=day),
    )


note = partial(ticket, source="chat", type="message", field="text")


def active(store: Store, subject: str) -> set[str]:
    return {memory.content for memory in MemoryRepository(store).memories("t1", subject)}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START + timedelta(days=30))


def compiled_after(
    ingest: IngestService, compiler: CompileService, drafts: list[EpisodeDraft]
) -> None:
    ingest.ingest("t1", drafts)
    for subject in compiler.subjects_with_uncompiled("t1"):
        compiler.compile("t1", subject)


def bundle_text(store: Store, clock: FakeClock, subject: str) -> str:
    reader = ContextReader(EpisodeRepository(store), MemoryRepository(store))
    return reader.bundle("t1", subject, "what do we know?", 2000).assembled_context


INVOICE = "Invoice 1234 is charged twice"


def test_a_moved_record_leaves_its_old_subject_and_is_derived_under_the_new_one(
    store: Store, clock: FakeClock, ingest: IngestService, compiler: CompileService
) -> None:
    compiled_after(ingest, compiler, [ticket("z:1", INVOICE, "org:100")])
    assert INVOICE in bundle_text(store, clock, "org:100")

    [moved] = ingest.ingest("t1", [ticket("z:1", INVOICE, "org:200")])
    # Only the new subject has something to compile; compiling it cleans the old one.
    assert compiler.subjects_with_uncompiled("t1") == ["org:200"]
    result = compiler.compile("t1", "org:200")

    assert (moved.status, result.memories_tombstoned) == (IngestStatus.REVISED, 1)
    assert active(store, "org:100") == set()
    assert INVOICE not in bundle_text(store, clock, "org:100")
    assert any(INVOICE in content for content in active(store, "org:200"))
    assert INVOICE in bundle_text(store, clock, "org:200")
    memories = MemoryRepository(store)
    (left,) = memories.memories("t1", "org:100", statuses=[MemoryStatus.TOMBSTONED])
    assert left.status_rule is SupersessionRule.SOURCE_MOVED
    (record,) = memories.supersessions("t1", "org:100")
    assert (record.rule, record.loser_memory_id, record.winner_memory_id) == (
        SupersessionRule.SOURCE_MOVED,
        left.id,
        None,
    )
    assert record.loser_episode_ids == [str(moved.episode_id)]
    assert compiler.compile("t1", "org:100").episodes_compiled == 0


def test_a_record_moved_back_brings_its_memories_back(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    compiled_after(ingest, compiler, [ticket("z:1", INVOICE, "org:100")])
    before = active(store, "org:100")
    compiled_after(ingest, compiler, [ticket("z:1", INVOICE, "org:200")])

    compiled_after(ingest, compiler, [ticket("z:1", INVOICE, "org:100")])

    assert active(store, "org:100") == before
    assert active(store, "org:200") == set()


def test_a_deleted_record_retires_what_only_it_supported(
    store: Store, clock: FakeClock, ingest: IngestService, compiler: CompileService
) -> None:
    shared = "We refund within 30 days of purchase"
    compiled_after(
        ingest,
        compiler,
        [
            ticket("z:1", INVOICE, "org:100"),
            note("n:1", shared, "org:100"),
            note("n:2", shared, "org:100"),
        ],
    )

    [gone] = ingest.tombstone("t1", [Tombstone("z:1")])
    assert len(ingest.tombstone("t1", [Tombstone("z:1"), Tombstone("n:1")])) == 1
    assert ingest.tombstone("t1", [Tombstone("z:1")]) == []  # a repeat changes nothing
    result = compiler.compile("t1", "org:100")

    assert result.memories_tombstoned == 1
    assert not any(INVOICE in content for content in active(store, "org:100"))
    assert shared in active(store, "org:100")  # n:2 still says it
    text = bundle_text(store, clock, "org:100")
    assert INVOICE not in text
    memories = MemoryRepository(store)
    assert memories.search("t1", "org:100", kind=None, text="invoice", limit=10) == []
    assert memories.count_by_subject("t1", ["org:100"]) == {
        "org:100": len(active(store, "org:100"))
    }
    (record,) = [
        r
        for r in memories.supersessions("t1", "org:100")
        if r.rule == SupersessionRule.SOURCE_DELETED
    ]
    assert record.loser_episode_ids == [str(gone.episode_id)]
    report = inspect_subject(EpisodeRepository(store), memories, "t1", "org:100")
    (shown,) = report.memories[MemoryStatus.TOMBSTONED]
    assert shown.status_rule is SupersessionRule.SOURCE_DELETED
    assert SupersessionRule.SOURCE_DELETED in {r.rule for r in report.supersessions}
    assert [e.deleted_at for e in report.episodes if e.id == gone.episode_id] == [clock.now()]
    episode = EpisodeRepository(store).get_many("t1", [gone.episode_id])[gone.episode_id]
    assert (episode.revision, episode.deleted_at, episode.payload) == (
        2,
        clock.now(),
        {"subject": INVOICE},
    )


def test_a_record_deleted_then_re_created_is_revised_and_its_memories_come_back(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    compiled_after(ingest, compiler, [ticket("z:1", INVOICE, "org:100")])
    before = active(store, "org:100")
    ingest.tombstone("t1", [Tombstone("z:1")])
    compiler.compile("t1", "org:100")

    [back] = ingest.ingest("t1", [ticket("z:1", INVOICE, "org:100")])
    compiler.compile("t1", "org:100")

    assert (back.status, back.revision) == (IngestStatus.REVISED, 3)
    assert active(store, "org:100") == before
    [deleted] = [
        r for r in EpisodeRepository(store).revisions("t1", back.episode_id) if r.deleted_at
    ]
    assert deleted.revision == 2


def test_a_tombstone_with_children_covers_every_key_below_its_own(
    store: Store, ingest: IngestService
) -> None:
    ingest.ingest(
        "t1",
        [
            ticket("z:1", INVOICE, "org:100"),
            note("z:1:comment:5", "me too", "org:100"),
            note("z:10", "another ticket", "org:100"),
        ],
    )

    outcomes = ingest.tombstone("t1", [Tombstone("z:1", with_children=True)])

    assert len(outcomes) == 2
    assert ingest.live_keys("t1", KeyScope("z:")) == ["z:10"]


def test_deleting_a_subject_also_forgets_revisions_filed_under_it_by_records_that_moved(
    store: Store, ingest: IngestService
) -> None:
    [filed] = ingest.ingest("t1", [ticket("z:1", "Invoice 1234 is charged twice", "org:100")])
    ingest.ingest("t1", [ticket("z:1", "Invoice 1234 is charged twice", "org:200")])

    with store.write() as connection:
        deleted = delete_subject_episodes(connection, "t1", "org:100")

    assert deleted == 0
    assert EpisodeRepository(store).revisions("t1", filed.episode_id) == []


def berlin_then_madrid(ingest: IngestService, compiler: CompileService) -> None:
    """Ana says she is in Berlin, then in Madrid (m:2), which wins: compiled."""
    drafts = [
        note("m:1", "I'm in Berlin", "user:ana", 0),
        note("m:2", "I'm in Madrid", "user:ana", 1),
    ]
    compiled_after(ingest, compiler, drafts)


def test_a_statement_beaten_by_a_deleted_one_is_active_again_and_in_the_bundle(
    store: Store, clock: FakeClock, ingest: IngestService, compiler: CompileService
) -> None:
    berlin_then_madrid(ingest, compiler)
    assert active(store, "user:ana") >= {"Currently in Madrid"}
    assert "Currently in Berlin" not in active(store, "user:ana")

    clock.advance(timedelta(hours=1))
    ingest.tombstone("t1", [Tombstone("m:2")])
    result = compiler.compile("t1", "user:ana")

    assert result.memories_tombstoned == 2  # the claim and the message's summary
    assert "Currently in Berlin" in active(store, "user:ana")
    assert "Currently in Madrid" not in active(store, "user:ana")
    text = bundle_text(store, clock, "user:ana")
    assert "Berlin" in text
    assert "Madrid" not in text
    memories = MemoryRepository(store)
    berlin, madrid = (
        next(m for m in memories.memories("t1", "user:ana", statuses=None) if m.content == content)
        for content in ("Currently in Berlin", "Currently in Madrid")
    )
    assert berlin.status_rule is SupersessionRule.WINNER_RETIRED
    assert madrid.status is MemoryStatus.TOMBSTONED
    # Nothing deleted: the first decision, the retirement and the return are all kept.
    history = [
        (record.rule, record.winner_memory_id, record.loser_memory_id)
        for record in memories.supersessions("t1", "user:ana")
        if record.claim_key == "location.current"
    ]
    assert history[0] == (SupersessionRule.CLAIM_CONTRADICTION, madrid.id, berlin.id)
    assert set(history[1:]) == {
        (SupersessionRule.SOURCE_DELETED, None, madrid.id),
        (SupersessionRule.WINNER_RETIRED, madrid.id, berlin.id),
    }
    report = inspect_subject(EpisodeRepository(store), memories, "t1", "user:ana")
    assert {m.content: m.status_rule for m in report.memories[MemoryStatus.ACTIVE]}[
        "Currently in Berlin"
    ] is SupersessionRule.WINNER_RETIRED
    assert compiler.compile("t1", "user:ana").episodes_compiled == 0


def test_a_winner_moved_to_another_subject_gives_its_old_subject_back_to_the_loser(
    store: Store, clock: FakeClock, ingest: IngestService, compiler: CompileService
) -> None:
    berlin_then_madrid(ingest, compiler)

    compiled_after(ingest, compiler, [note("m:2", "I'm in Madrid", "user:bo", 2)])

    assert "Currently in Berlin" in active(store, "user:ana")
    assert "Currently in Madrid" in active(store, "user:bo")
    assert "Berlin" in bundle_text(store, clock, "user:ana")
    assert "Madrid" not in bundle_text(store, clock, "user:ana")


def test_an_open_conflict_closes_when_one_side_is_deleted_and_opens_again_when_it_returns(
    store: Store, clock: FakeClock, ingest: IngestService, compiler: CompileService
) -> None:
    old, new = (
        "Stripe charges 3.5% + 35¢ per transaction",
        "Stripe charges 2.9% + 30¢ per transaction",
    )
    compiled_after(ingest, compiler, [note("m:1", old, "org:1", 0), note("m:2", new, "org:1", 1)])
    memories = MemoryRepository(store)
    (conflict,) = memories.conflicts("t1", "org:1")
    assert "not asserting either" in bundle_text(store, clock, "org:1")

    ingest.tombstone("t1", [Tombstone("m:2")])
    compiler.compile("t1", "org:1")

    assert memories.conflicts("t1", "org:1") == []
    (closed,) = memories.conflicts("t1", "org:1", status=None)
    assert (closed.conflict.id, closed.chosen_memory_id) == (conflict.conflict.id, None)
    text = bundle_text(store, clock, "org:1")
    assert old in text
    assert new not in text

    compiled_after(ingest, compiler, [note("m:2", new, "org:1", 3)])

    (reopened,) = memories.conflicts("t1", "org:1")
    assert reopened.conflict.id == conflict.conflict.id


def test_an_edit_that_asserts_the_same_at_the_same_time_keeps_supporting_it(
    store: Store, ingest: IngestService, compiler: CompileService
) -> None:
    shared = "We refund within 30 days of purchase"
    compiled_after(
        ingest, compiler, [note("n:1", shared, "org:100", 0), note("n:2", shared, "org:100", 1)]
    )
    # An edited message keeps its time (Slack's ts): the new revision asserts the same
    # memory at the same moment, which changes nothing but which revision supports it.
    compiled_after(ingest, compiler, [note("n:1", f"{shared}!", "org:100", 0)])

    ingest.tombstone("t1", [Tombstone("n:2")])
    compiler.compile("t1", "org:100")

    assert shared in active(store, "org:100")


def test_a_claim_that_flip_flopped_is_decided_again_from_what_is_left_of_its_history(
    store: Store, clock: FakeClock, ingest: IngestService, compiler: CompileService
) -> None:
    # Records of Berlin and Madrid beating each other in turn: the walk over them must
    # end, and each deletion leaves what the remaining messages say.
    for day, (key, city) in enumerate(
        [("m:1", "Berlin"), ("m:2", "Madrid"), ("m:3", "Berlin"), ("m:4", "Madrid")]
    ):
        clock.advance(timedelta(hours=1))
        compiled_after(ingest, compiler, [note(key, f"I'm in {city}", "user:ana", day)])
    assert "Currently in Madrid" in active(store, "user:ana")

    for deleted, expected in [("m:4", "Berlin"), ("m:3", "Madrid"), ("m:2", "Berlin")]:
        clock.advance(timedelta(hours=1))
        ingest.tombstone("t1", [Tombstone(deleted)])
        compiler.compile("t1", "user:ana")

        current = {c for c in active(store, "user:ana") if c.startswith("Currently in")}
        assert current == {f"Currently in {expected}"}, deleted
