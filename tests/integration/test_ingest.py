"""Ingest is idempotent forever, keeps edits as revisions, and isolates tenants."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft, IngestStatus
from memsync.runtime.ingest import IngestOutcome, IngestService, IngestSummary
from memsync.runtime.reading.episodes import EpisodeRecord, EpisodeRepository
from memsync.runtime.storage import Store


def draft(key: str | None, payload: dict[str, object], subject: str = "user-1") -> EpisodeDraft:
    return EpisodeDraft(
        subject_id=subject, source="test", type="note", payload=payload, idempotency_key=key
    )


def count_rows(store: Store, table: str) -> int:
    with store.read() as connection:
        return int(connection.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_same_key_twice_is_one_episode_with_the_same_id(store: Store) -> None:
    service = IngestService(store)
    [first] = service.ingest("t1", [draft("k1", {"text": "hello"})])
    [second] = service.ingest("t1", [draft("k1", {"text": "hello"})])

    assert first.status is IngestStatus.CREATED
    assert second.status is IngestStatus.DUPLICATE
    assert second.episode_id == first.episode_id
    assert count_rows(store, "episodes") == 1


def test_key_order_inside_the_payload_does_not_matter(store: Store) -> None:
    service = IngestService(store)
    service.ingest("t1", [draft("k1", {"a": 1, "b": 2})])
    [again] = service.ingest("t1", [draft("k1", {"b": 2, "a": 1})])
    assert again.status is IngestStatus.DUPLICATE


def test_numerically_equal_json_is_a_duplicate_not_a_revision(store: Store) -> None:
    service = IngestService(store)
    [first] = service.ingest("t1", [draft("k1", {"score": 1})])
    [second] = service.ingest("t1", [draft("k1", {"score": 1.0})])
    [third] = service.ingest("t1", [draft("k1", {"score": 1})])

    assert first.status is IngestStatus.CREATED
    assert (second.status, third.status) == (IngestStatus.DUPLICATE, IngestStatus.DUPLICATE)
    assert third.revision == 1
    assert count_rows(store, "episode_revisions") == 0


def test_keyless_episodes_always_insert(store: Store) -> None:
    service = IngestService(store)
    outcomes = service.ingest("t1", [draft(None, {"text": "x"}), draft(None, {"text": "x"})])
    assert [outcome.status for outcome in outcomes] == [IngestStatus.CREATED] * 2
    assert outcomes[0].episode_id != outcomes[1].episode_id
    assert count_rows(store, "episodes") == 2


def test_same_key_under_another_tenant_is_another_episode(store: Store) -> None:
    service = IngestService(store)
    [a] = service.ingest("t1", [draft("k1", {"text": "x"}, subject="alice")])
    [b] = service.ingest("t2", [draft("k1", {"text": "x"}, subject="alice")])

    assert {a.status, b.status} == {IngestStatus.CREATED}
    assert a.episode_id != b.episode_id


def test_same_key_under_another_subject_is_a_revision_that_moves_the_record(
    store: Store,
) -> None:
    clock = FakeClock(datetime(2026, 3, 1, tzinfo=UTC))
    service = IngestService(store, clock)
    [filed] = service.ingest("t1", [draft("ticket:9", {"text": "x"}, subject="org:100")])
    clock.advance(timedelta(hours=1))
    [moved] = service.ingest("t1", [draft("ticket:9", {"text": "x"}, subject="org:200")])
    [again] = service.ingest("t1", [draft("ticket:9", {"text": "x"}, subject="org:200")])

    assert (moved.status, moved.episode_id, moved.revision) == (
        IngestStatus.REVISED,
        filed.episode_id,
        2,
    )
    assert (again.status, again.revision) == (IngestStatus.DUPLICATE, 2)
    assert count_rows(store, "episodes") == 1
    repository = EpisodeRepository(store)
    assert repository.get_many("t1", [filed.episode_id])[filed.episode_id].subject_id == "org:200"
    [earlier] = repository.revisions("t1", filed.episode_id)
    assert (earlier.revision, earlier.subject_id) == (1, "org:100")
    assert [s.subject_id for s in repository.subjects("t1", limit=10, offset=0).subjects] == [
        "org:200"
    ]


def test_a_batch_that_files_one_key_under_two_subjects_ends_under_the_later(
    store: Store,
) -> None:
    service = IngestService(store)
    outcomes = service.ingest(
        "t1",
        [
            draft("k1", {"text": "x"}, subject="alice"),
            draft("k2", {"text": "y"}, subject="alice"),
            draft("k1", {"text": "x"}, subject="bob"),
        ],
    )

    assert [outcome.status for outcome in outcomes] == [
        IngestStatus.CREATED,
        IngestStatus.CREATED,
        IngestStatus.REVISED,
    ]
    with store.read() as connection:
        filed = dict(
            connection.execute(sa.text("SELECT idempotency_key, subject_id FROM episodes")).all()
        )
    assert filed == {"k1": "bob", "k2": "alice"}


def test_edited_payload_is_a_new_revision_and_the_old_one_is_kept(store: Store) -> None:
    clock = FakeClock(datetime(2026, 3, 1, tzinfo=UTC))
    service = IngestService(store, clock)
    [created] = service.ingest("t1", [draft("issue:7", {"title": "Crash on start"})])
    clock.advance(timedelta(hours=1))
    [revised] = service.ingest("t1", [draft("issue:7", {"title": "Crash on startup"})])

    assert revised.status is IngestStatus.REVISED
    assert revised.episode_id == created.episode_id
    assert revised.revision == 2

    repository = EpisodeRepository(store)
    current = repository.get_many("t1", [created.episode_id])[created.episode_id]
    assert current.payload == {"title": "Crash on startup"}
    assert current.revision == 2
    assert current.revised_at == clock.now()
    [previous] = repository.revisions("t1", created.episode_id)
    assert previous.revision == 1
    assert previous.payload == {"title": "Crash on start"}
    assert previous.replaced_at == clock.now()
    assert previous.recorded_at == clock.now() - timedelta(hours=1)


def test_revision_then_the_same_edit_again_is_a_duplicate(store: Store) -> None:
    service = IngestService(store)
    service.ingest("t1", [draft("k", {"v": 1})])
    service.ingest("t1", [draft("k", {"v": 2})])
    [again] = service.ingest("t1", [draft("k", {"v": 2})])
    assert again.status is IngestStatus.DUPLICATE
    assert again.revision == 2
    assert count_rows(store, "episode_revisions") == 1


def test_a_key_twice_in_one_batch_applies_both_in_order(store: Store) -> None:
    service = IngestService(store)
    outcomes = service.ingest(
        "t1", [draft("k", {"v": 1}), draft("k", {"v": 1}), draft("k", {"v": 2})]
    )
    assert [outcome.status for outcome in outcomes] == [
        IngestStatus.CREATED,
        IngestStatus.DUPLICATE,
        IngestStatus.REVISED,
    ]
    assert len({outcome.episode_id for outcome in outcomes}) == 1
    assert outcomes[-1].revision == 2


def test_batches_larger_than_the_batch_size_are_all_ingested(store: Store) -> None:
    service = IngestService(store, batch_size=7)
    drafts = [draft(f"k{i}", {"i": i}) for i in range(50)]
    assert IngestSummary.of(service.ingest("t1", drafts)) == IngestSummary(created=50)
    assert IngestSummary.of(service.ingest("t1", drafts)) == IngestSummary(duplicates=50)


def test_one_call_of_many_batches_answers_in_the_callers_order(store: Store) -> None:
    service = IngestService(store, batch_size=2)
    drafts = [
        draft("z", {"v": 1}),
        draft(None, {"keyless": True}),
        draft("a", {"v": 1}),
        draft("z", {"v": 2}),
        draft("m", {"v": 1}),
        draft("a", {"v": 1}),
    ]

    outcomes = service.ingest("t1", drafts)

    assert [outcome.status for outcome in outcomes] == [
        IngestStatus.CREATED,
        IngestStatus.CREATED,
        IngestStatus.CREATED,
        IngestStatus.REVISED,
        IngestStatus.CREATED,
        IngestStatus.DUPLICATE,
    ]
    assert outcomes[0].episode_id == outcomes[3].episode_id
    assert outcomes[2].episode_id == outcomes[5].episode_id


@pytest.mark.parametrize("count", [1, 10])
def test_a_call_that_fails_after_its_last_batch_stores_none_of_it(store: Store, count: int) -> None:
    service = IngestService(store, batch_size=3)

    def fail(_connection: object, _outcomes: object) -> None:
        raise RuntimeError("the store went away before the commit")

    with pytest.raises(RuntimeError, match="went away"):
        service.ingest("t1", [draft(f"k{i}", {"i": i}) for i in range(count)], before_commit=fail)
    assert count_rows(store, "episodes") == 0


def test_with_stored_every_outcome_carries_what_the_store_holds_after_the_call(
    store: Store,
) -> None:
    service = IngestService(store)
    episodes = EpisodeRepository(store)
    outcomes_and_shown: list[tuple[IngestOutcome, EpisodeRecord]] = []

    def ingest(*drafts: EpisodeDraft) -> None:
        outcomes = service.ingest("t1", drafts, with_stored=True)
        shown = episodes.get_many("t1", [outcome.episode_id for outcome in outcomes])
        outcomes_and_shown.extend((outcome, shown[outcome.episode_id]) for outcome in outcomes)

    ingest(draft("k1", {"v": 1}), draft("k2", {"v": 1}))
    ingest(draft("k1", {"v": 1}), draft("k2", {"v": 2}), draft("k3", {"v": 3}), draft(None, {}))
    ingest(draft("k2", {"v": 2}))  # one at a time, as the API sends them
    ingest(draft("k2", {"v": 3}))
    ingest(draft("k4", {"v": 4}))
    ingest(draft(None, {"v": 5}))

    assert [outcome.status for outcome, _ in outcomes_and_shown] == [
        IngestStatus.CREATED,
        IngestStatus.CREATED,
        IngestStatus.DUPLICATE,
        IngestStatus.REVISED,
        IngestStatus.CREATED,
        IngestStatus.CREATED,
        IngestStatus.DUPLICATE,
        IngestStatus.REVISED,
        IngestStatus.CREATED,
        IngestStatus.CREATED,
    ]
    for outcome, shown in outcomes_and_shown:
        assert outcome.stored is not None
        assert EpisodeRecord.from_columns(outcome.stored) == shown


def test_time_zones_survive_the_round_trip(store: Store) -> None:
    service = IngestService(store)
    lisbon_summer = timezone(timedelta(hours=1))
    occurred = datetime(2026, 7, 1, 9, 30, tzinfo=lisbon_summer)
    [outcome] = service.ingest(
        "t1",
        [
            EpisodeDraft(
                subject_id="s",
                source="test",
                type="note",
                payload={},
                idempotency_key="k",
                occurred_at=occurred,
            )
        ],
    )
    stored = EpisodeRepository(store).get_many("t1", [outcome.episode_id])[outcome.episode_id]
    assert stored.occurred_at == occurred
    assert stored.occurred_at.utcoffset() == timedelta(0)


def test_a_revision_without_occurred_at_keeps_the_stored_one(store: Store) -> None:
    service = IngestService(store)
    occurred = datetime(2025, 1, 2, tzinfo=UTC)
    first = EpisodeDraft("s", "test", "note", {"v": 1}, idempotency_key="k", occurred_at=occurred)
    [outcome] = service.ingest("t1", [first])
    service.ingest("t1", [draft("k", {"v": 2}, subject="s")])
    stored = EpisodeRepository(store).get_many("t1", [outcome.episode_id])[outcome.episode_id]
    assert stored.occurred_at == occurred


# -- the property: ingesting a list k times in any order equals ingesting it once ------

payloads = st.dictionaries(
    st.sampled_from(["title", "body", "n"]),
    st.integers(0, 3) | st.text(alphabet="ab", max_size=2),
    max_size=3,
)
keyed_drafts = st.lists(
    st.tuples(st.sampled_from(["alice", "bob"]), st.text(alphabet="xyz", min_size=1, max_size=3)),
    unique_by=lambda ref: ref[1],
    max_size=12,
).flatmap(
    lambda refs: st.tuples(
        st.just(refs), st.lists(payloads, min_size=len(refs), max_size=len(refs))
    )
)


def snapshot(store: Store, tenant_id: str) -> dict[tuple[str, str], tuple[object, ...]]:
    with store.read() as connection:
        rows = connection.execute(
            sa.text(
                "SELECT subject_id, idempotency_key, id, revision, content_hash "
                "FROM episodes WHERE tenant_id = :t"
            ),
            {"t": tenant_id},
        )
        return {(row[0], row[1]): tuple(row[2:]) for row in rows}


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(keyed_drafts, st.integers(2, 4), st.randoms(use_true_random=False))
def test_ingesting_k_times_in_any_order_equals_ingesting_once(
    store: Store,
    refs_and_payloads: tuple[list[tuple[str, str]], list[dict[str, object]]],
    times: int,
    shuffler: random.Random,
) -> None:
    refs, bodies = refs_and_payloads
    tenant_id = f"prop-{uuid.uuid4()}"
    drafts = [draft(key, body, subject) for (subject, key), body in zip(refs, bodies, strict=True)]
    service = IngestService(store, batch_size=5)

    service.ingest(tenant_id, drafts)
    once = snapshot(store, tenant_id)
    for _ in range(times - 1):
        reordered = list(drafts)
        shuffler.shuffle(reordered)
        outcomes = service.ingest(tenant_id, reordered)
        assert {outcome.status for outcome in outcomes} <= {IngestStatus.DUPLICATE}

    assert snapshot(store, tenant_id) == once
    assert len(once) == len(drafts)
