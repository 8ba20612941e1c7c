"""Ingest orders the versions of a record by the source's own update time, not by
arrival, when the connector says it (provenance ``source_updated_at``): a version that
arrives after a newer one (a re-read that read before a pushed edit) stores nothing,
and neither does one the source had before a dated deletion (``Tombstone.deleted_at``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.episode import SOURCE_UPDATED_AT, EpisodeDraft, IngestStatus, KeyScope, Tombstone
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store, tables

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def version(key: str, minute: int | None, title: str) -> EpisodeDraft:
    provenance: dict[str, object] = {"connector": "gh", "connector_type": "github"}
    if minute is not None:
        provenance[SOURCE_UPDATED_AT] = (T0 + timedelta(minutes=minute)).isoformat()
    return EpisodeDraft(
        subject_id="repo:acme/api",
        source="github",
        type="github.issue",
        payload={"title": title},
        idempotency_key=key,
        provenance=provenance,
    )


@settings(
    max_examples=24,  # every order of four versions, about
    derandomize=True,  # the same orders on both databases
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.permutations(range(4)))
def test_whatever_the_arrival_order_the_newest_version_is_current(
    store: Store, arrival: list[int]
) -> None:
    tenant, key = f"order-{uuid.uuid4().hex[:8]}", "github:acme:api:issue:1:opened"
    ingest = IngestService(store, FakeClock(T0))

    outcomes = [
        ingest.ingest(tenant, [version(key, minute, f"v{minute}")], with_stored=True)[0]
        for minute in arrival
    ]

    # The last outcome carries the episode as it stands after every arrival.
    assert outcomes[-1].stored is not None
    assert outcomes[-1].stored["payload"] == {"title": "v3"}
    # What was stored, in arrival order, only ever moved forward in source time.
    stored = [
        minute
        for minute, outcome in zip(arrival, outcomes, strict=True)
        if outcome.status is not IngestStatus.DUPLICATE
    ]
    assert stored == sorted(stored)


def test_equal_or_unknown_times_keep_arrival_order(store: Store) -> None:
    tenant = f"order-{uuid.uuid4().hex[:8]}"
    ingest = IngestService(store, FakeClock(T0))
    key = "github:acme:api:issue:2:opened"

    statuses = [
        ingest.ingest(tenant, [draft])[0].status
        for draft in (
            version(key, 5, "first"),
            version(key, 5, "same time, later arrival"),
            version(key, None, "no time"),
            version(key, 1, "older than nothing known"),
        )
    ]

    assert statuses == [
        IngestStatus.CREATED,
        IngestStatus.REVISED,
        IngestStatus.REVISED,
        IngestStatus.REVISED,
    ]


def current(store: Store, tenant: str, key: str) -> tuple[object, bool]:
    """The stored payload of ``key`` and whether it is deleted."""
    episodes = tables.episodes
    with store.engine.connect() as connection:
        row = connection.execute(
            sa.select(episodes.c.payload, episodes.c.deleted_at).where(
                episodes.c.tenant_id == tenant, episodes.c.idempotency_key == key
            )
        ).one()
    return row.payload, row.deleted_at is not None


VERSION_MINUTES = (0, 2, 4, 6)


@settings(
    max_examples=40,
    derandomize=True,  # the same orders on both databases
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    arrival=st.permutations(VERSION_MINUTES),
    # Between, on and after the versions' times: a tie is the deletion's.
    deleted_minute=st.integers(min_value=0, max_value=7),
    # After the first version: a deletion of a record never stored is not remembered.
    deletion_arrives=st.integers(min_value=1, max_value=len(VERSION_MINUTES)),
)
def test_whatever_the_arrival_order_a_dated_deletion_holds_against_older_versions(
    store: Store, arrival: list[int], deleted_minute: int, deletion_arrives: int
) -> None:
    tenant, key = f"order-{uuid.uuid4().hex[:8]}", "github:acme:api:issue:3:opened"
    ingest = IngestService(store, FakeClock(T0))
    deletion = Tombstone(key, deleted_at=T0 + timedelta(minutes=deleted_minute))

    for position, minute in enumerate(arrival):
        if position == deletion_arrives:
            ingest.tombstone(tenant, [deletion])
        ingest.ingest(tenant, [version(key, minute, f"v{minute}")])
    if deletion_arrives == len(arrival):
        ingest.tombstone(tenant, [deletion])

    payload, deleted = current(store, tenant, key)
    newest = max(VERSION_MINUTES)
    # As if the source's events had arrived in the source's order.
    assert deleted is (deleted_minute >= newest)
    if not deleted:
        assert payload == {"title": f"v{newest}"}
        assert ingest.live_keys(tenant, KeyScope(key)) == [key]


def test_a_version_after_the_deletion_is_the_record_re_created(store: Store) -> None:
    tenant, key = f"order-{uuid.uuid4().hex[:8]}", "github:acme:api:issue:4:opened"
    ingest = IngestService(store, FakeClock(T0))
    ingest.ingest(tenant, [version(key, 1, "v1")])

    [gone] = ingest.tombstone(tenant, [Tombstone(key, deleted_at=T0 + timedelta(minutes=2))])
    late = ingest.ingest(tenant, [version(key, 2, "read as it was deleted")])[0]
    back = ingest.ingest(tenant, [version(key, 3, "re-created")])[0]

    assert gone.status is IngestStatus.TOMBSTONED
    assert (late.status, back.status) == (IngestStatus.DUPLICATE, IngestStatus.REVISED)
    assert current(store, tenant, key) == ({"title": "re-created"}, False)
    # An undated deletion keeps arrival order, as before tombstones carried a time.
    ingest.tombstone(tenant, [Tombstone(key)])
    again = ingest.ingest(tenant, [version(key, 3, "read again")])[0]
    assert again.status is IngestStatus.REVISED


def test_a_dated_deletion_of_the_parent_covers_its_children_unless_newer(store: Store) -> None:
    tenant, parent = f"order-{uuid.uuid4().hex[:8]}", "github:acme:api:issue:5"
    ingest = IngestService(store, FakeClock(T0))
    ingest.ingest(
        tenant,
        [
            version(f"{parent}:opened", 1, "issue"),
            version(f"{parent}:comment:1", 2, "old comment"),
            version(f"{parent}:comment:2", 9, "written after the deletion"),
        ],
    )

    ingest.tombstone(
        tenant, [Tombstone(parent, with_children=True, deleted_at=T0 + timedelta(minutes=5))]
    )

    assert ingest.live_keys(tenant, KeyScope(parent)) == [f"{parent}:comment:2"]
    assert ingest.ingest(tenant, [version(f"{parent}:comment:1", 3, "edit")])[0].status is (
        IngestStatus.DUPLICATE
    )
