"""A connector's ``Progress`` (where its read stands) against a real store: committed with
what was read before it and the stream's checkpoint, handed to the next read, kept at
the stored position when no record moved it, and ignored by a backfill."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from memsync.clock import FakeClock
from memsync.connectors import Cursor, Deletion, Progress, RateLimitExhausted, Window
from memsync.connectors.fake import FakeConnector, FakeRecord
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunStatus
from tests.integration.test_sync_runner import T0, config, records, runner, stored_keys


class SaysWhereItIs(FakeConnector):
    """The fake connector, saying after each record that the read resumes after it."""

    def fetch(
        self, window: Window, cursor: Cursor | None
    ) -> Iterator[FakeRecord | Deletion | Progress]:
        for item in super().fetch(window, cursor):
            yield item
            if isinstance(item, FakeRecord):
                yield Progress(f"after:{item.id}", f"read up to {item.id}")


class OnlySaysWhereItIs(FakeConnector):
    """A re-read that finds nothing to store, says so twice, then hits a rate limit."""

    def fetch(
        self, window: Window, cursor: Cursor | None
    ) -> Iterator[FakeRecord | Deletion | Progress]:
        self.fetches.append((window, cursor))
        yield Progress("half-way", "re-read half-way")
        yield Progress("three quarters", "re-read three quarters of the way")
        raise RateLimitExhausted("HTTP 429", attempts=1, waited=0, retry_after=60)


def test_a_progress_is_committed_with_the_checkpoint_and_the_next_read_gets_it(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    connector = SaysWhereItIs(config(), records(10))
    connector.fail_at(
        "r0006", RateLimitExhausted("HTTP 429", attempts=1, waited=0, retry_after=None)
    )
    sync = runner(store, clock, batch_size=100)

    partial = sync.sync(connector)

    assert partial.status is RunStatus.PARTIAL
    assert partial.created == 6  # each Progress committed what came before it
    assert partial.error is not None
    assert partial.error.endswith("[records: read up to r0005]")
    checkpoint = sync.repository.cursor("default", "src")
    assert checkpoint == Cursor(T0 + timedelta(minutes=5), "after:r0005", "read up to r0005")

    clock.advance(timedelta(hours=1))
    completed = sync.sync(connector)

    assert completed.status is RunStatus.SUCCEEDED
    assert connector.fetches[-1][1] == checkpoint
    assert len(stored_keys(store)) == 10
    # At the end of the stream: the run start, with what the read said last.
    assert sync.repository.cursor("default", "src") == Cursor(
        clock.now(), "after:r0009", "read up to r0009"
    )


def test_a_progress_without_records_keeps_the_position_and_the_run_is_partial(
    store: Store,
) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    sync = runner(store, clock)
    assert sync.sync(FakeConnector(config(), records(3))).status is RunStatus.SUCCEEDED
    stored_at = clock.now()
    clock.advance(timedelta(hours=1))

    run = sync.sync(OnlySaysWhereItIs(config(), records(3)))

    assert run.status is RunStatus.PARTIAL
    assert run.created + run.duplicates == 0
    assert sync.repository.cursor("default", "src") == Cursor(
        stored_at, "three quarters", "re-read three quarters of the way"
    )


def test_a_backfill_ignores_progress(store: Store) -> None:
    clock = FakeClock(T0 + timedelta(days=1))
    sync = runner(store, clock)

    run = sync.backfill(SaysWhereItIs(config(), records(5)), since=T0)

    assert run.status is RunStatus.SUCCEEDED
    assert run.created == 5
    assert sync.repository.cursor("default", "src") is None
