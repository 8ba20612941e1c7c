"""Ingest orders the versions of a record by the source's own update time, not by
arrival, when the connector says it (provenance ``source_updated_at``): a version that
arrives after a newer one (a re-read that read before a pushed edit) stores nothing."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.episode import SOURCE_UPDATED_AT, EpisodeDraft, IngestStatus
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store

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
