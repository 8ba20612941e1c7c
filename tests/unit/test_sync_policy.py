"""The sync runner's decisions, as pure functions: windows, checkpoints, statuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.connectors import Cursor, RateLimitExhausted, RetryableError, StopRun, Window
from memsync.runtime.sync.policy import (
    Holder,
    RunStatus,
    checkpoint_position,
    describe_error,
    earliest_start,
    incremental_window,
    is_stale,
    plan_slices,
    status_after,
)
from memsync.stopping import StopRequested

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


def test_the_first_window_starts_at_the_configured_start_or_the_beginning() -> None:
    assert incremental_window(None, HOUR, None, NOW) == Window(None, NOW)
    start = NOW - timedelta(days=30)
    assert incremental_window(None, HOUR, start, NOW) == Window(start, NOW)


def test_later_windows_reach_back_by_the_overlap_and_never_start_after_now() -> None:
    assert incremental_window(Cursor(NOW - HOUR), HOUR, None, NOW).start == NOW - 2 * HOUR
    ahead = Cursor(NOW + 5 * HOUR)  # written by a host whose clock ran ahead
    assert incremental_window(ahead, HOUR, None, NOW) == Window(NOW, NOW)


def test_a_run_of_several_streams_records_the_earliest_start_of_their_windows() -> None:
    assert earliest_start([Window(NOW - HOUR, NOW), Window(NOW - 2 * HOUR, NOW)]) == NOW - 2 * HOUR
    assert earliest_start([Window(NOW - HOUR, NOW), Window(None, NOW)]) is None


def test_a_complete_window_checkpoints_at_its_end() -> None:
    window = Window(NOW - HOUR, NOW)
    assert (
        checkpoint_position(committed_high=None, window=window, ordered=False, complete=True) == NOW
    )


def test_mid_run_only_an_ordered_connector_checkpoints_and_never_past_the_window() -> None:
    window = Window(NOW - HOUR, NOW)
    high = NOW - timedelta(minutes=10)
    assert (
        checkpoint_position(committed_high=high, window=window, ordered=True, complete=False)
        == high
    )
    assert (
        checkpoint_position(committed_high=high, window=window, ordered=False, complete=False)
        is None
    )
    future = NOW + HOUR
    assert (
        checkpoint_position(committed_high=future, window=window, ordered=True, complete=False)
        == NOW
    )


@given(positions=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1))
def test_an_ordered_checkpoint_never_skips_an_uncommitted_record(positions: list[int]) -> None:
    """Property: for sorted positions committed as a prefix, every record strictly
    before the checkpoint is in the prefix (ties are re-read by the inclusive window)."""
    ordered = sorted(NOW - timedelta(seconds=p) for p in positions)
    window = Window(None, NOW)
    for cut in range(1, len(ordered) + 1):
        committed = ordered[:cut]
        position = checkpoint_position(
            committed_high=max(committed), window=window, ordered=True, complete=False
        )
        assert position is not None
        assert all(moment in committed for moment in ordered if moment < position)


@pytest.mark.parametrize(
    ("error", "committed", "status"),
    [
        (None, 0, RunStatus.SUCCEEDED),
        (RateLimitExhausted("429", attempts=5, waited=1.0, retry_after=1.0), 3, RunStatus.PARTIAL),
        (RateLimitExhausted("429", attempts=5, waited=1.0, retry_after=1.0), 0, RunStatus.FAILED),
        (RetryableError("503"), 3, RunStatus.PARTIAL),
        (StopRun("401"), 3, RunStatus.FAILED),
        (ValueError("connector bug"), 3, RunStatus.PARTIAL),
        # A stop is no failure, committed or not: the run was cut short.
        (StopRequested("stopped 1.0s into a 60s wait"), 3, RunStatus.PARTIAL),
        (StopRequested("stopped 1.0s into a 60s wait"), 0, RunStatus.PARTIAL),
    ],
)
def test_a_run_cut_short_is_never_a_success(
    error: BaseException | None, committed: int, status: RunStatus
) -> None:
    assert status_after(error, committed) is status


def test_an_interrupted_run_says_so_first() -> None:
    described = describe_error(StopRequested("GET /issues: stopped 1.0s into a 60s wait"))
    assert described == "interrupted: GET /issues: stopped 1.0s into a 60s wait"


def test_slices_cover_the_range_and_share_their_boundaries() -> None:
    day = timedelta(days=1)
    assert plan_slices(NOW, NOW + 2 * day + HOUR, day) == [
        (NOW, NOW + day),
        (NOW + day, NOW + 2 * day),
        (NOW + 2 * day, NOW + 2 * day + HOUR),
    ]
    with pytest.raises(ValueError, match="empty"):
        plan_slices(NOW, NOW, day)


def test_a_run_is_stale_after_its_lease_or_when_its_process_on_this_host_is_gone() -> None:
    holder = Holder(host="a", pid=42, heartbeat_at=NOW)
    alive, dead = (lambda pid: True), (lambda pid: False)
    lease = timedelta(minutes=10)
    assert not is_stale(holder, now=NOW, lease=lease, this_host="a", pid_alive=alive)
    assert is_stale(holder, now=NOW, lease=lease, this_host="a", pid_alive=dead)
    assert not is_stale(holder, now=NOW, lease=lease, this_host="b", pid_alive=dead)
    later = NOW + timedelta(minutes=11)
    assert is_stale(holder, now=later, lease=lease, this_host="b", pid_alive=alive)


def test_the_sync_package_exports_what_runners_and_callers_use() -> None:
    import memsync.runtime.sync as sync

    assert sorted(sync.__all__) == [
        "DEFAULT_LEASE",
        "DEFAULT_SLICE",
        "RunInProgress",
        "RunInterrupted",
        "RunKind",
        "RunLost",
        "RunRecord",
        "RunStatus",
        "SyncRepository",
        "SyncRunner",
        "Tally",
        "pid_alive",
    ]
    assert all(hasattr(sync, name) for name in sync.__all__)
