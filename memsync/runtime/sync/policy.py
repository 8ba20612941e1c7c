"""The decisions of a sync run, as pure functions of time, config and counts.

Nothing here reads the clock or the database: the runner passes ``now``, the stored
cursor and the counts in, so every rule is tested without a store or a sleep.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from memsync.connectors import Cursor, RateLimitExhausted, StopRun, Window
from memsync.stopping import StopRequested

__all__ = [
    "BackfillStatus",
    "Holder",
    "RunKind",
    "RunStatus",
    "StreamStatus",
    "checkpoint_position",
    "describe_error",
    "earliest_start",
    "incremental_window",
    "is_stale",
    "needs_attention",
    "plan_slices",
    "retry_at",
    "status_after",
]


class RunKind(enum.StrEnum):
    """An ``incremental`` run reads from the cursor; a ``backfill`` re-reads a range."""

    INCREMENTAL = "incremental"
    BACKFILL = "backfill"


class RunStatus(enum.StrEnum):
    """How a run ended (``running`` while it has not)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"


class StreamStatus(enum.StrEnum):
    """How a run ended for one stream it read: ``succeeded`` (read to its end),
    ``partial`` (cut short after committing some of it) or ``failed`` (cut short with
    nothing of it committed)."""

    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"


class BackfillStatus(enum.StrEnum):
    """A backfill is ``open`` until its last slice is read (``finished``), or until a
    backfill of another range replaces it (``abandoned``)."""

    OPEN = "open"
    FINISHED = "finished"
    ABANDONED = "abandoned"


def incremental_window(
    cursor: Cursor | None, overlap: timedelta, configured_start: datetime | None, now: datetime
) -> Window:
    """``[cursor - overlap, now]``; a first run starts at ``configured_start`` (``None``:
    from the beginning).

    A cursor ahead of ``now`` (another host's clock ran ahead) still gives a valid
    window: its start is clamped to ``now``.
    """
    start = configured_start if cursor is None else cursor.position - overlap
    if start is not None and start > now:
        start = now
    return Window(start=start, end=now)


def earliest_start(windows: list[Window]) -> datetime | None:
    """Where the earliest of ``windows`` starts (``None``: one reads from the beginning):
    the start of the window a run of several streams records."""
    starts = [window.start for window in windows]
    if not starts or any(start is None for start in starts):
        return None
    return min(start for start in starts if start is not None)


def checkpoint_position(
    *, committed_high: datetime | None, window: Window, ordered: bool, complete: bool
) -> datetime | None:
    """Where a stream's checkpoint may move after a commit, or ``None`` for "not yet".

    - A window read to its end (``complete``) is covered up to its end, the run start.
    - Mid-run, only an ordered stream (:class:`~memsync.connectors.Stream`) may
      checkpoint, at the highest committed position: every record before it was
      yielded, hence committed, earlier. Records tied at that position are read again
      because the next window starts at or before it (both ends of a window are
      inclusive).
    - Otherwise a record with an earlier position could still be on its way, so the
      checkpoint waits for the end of the window.

    The result never lies past ``window.end``; the store never moves a checkpoint
    backwards.
    """
    if complete:
        return window.end
    if ordered and committed_high is not None:
        return min(committed_high, window.end)
    return None


def status_after(
    error: BaseException | None, committed: int, *, progressed: bool = False
) -> RunStatus:
    """The status of a run that ended with ``error`` (``None``: read everything).

    :class:`StopRun` is ``failed`` (nothing will change until a person acts). A run its
    process stopped (:class:`~memsync.stopping.StopRequested`) is ``partial`` whatever
    it committed: nothing failed, it was cut short. Any other error that cut the run
    short is ``partial`` when some episodes were committed or a read moved on
    (``progressed``: a connector's :class:`~memsync.connectors.Progress` committed, as
    in a re-read of old records that finds nothing to store), else ``failed``. Skipped
    records do not make a run partial: each is counted with its reason, and retrying
    would skip it again.
    """
    if error is None:
        return RunStatus.SUCCEEDED
    if isinstance(error, StopRequested):
        return RunStatus.PARTIAL
    if isinstance(error, StopRun) or (committed == 0 and not progressed):
        return RunStatus.FAILED
    return RunStatus.PARTIAL


def needs_attention(error: BaseException | None) -> bool:
    """Whether the run's error is one only a person can fix (:class:`StopRun`: refused
    credentials, a resource that does not exist, a configuration the source rejects)."""
    return isinstance(error, StopRun)


def retry_at(error: BaseException | None, now: datetime) -> datetime | None:
    """When to try again after a rate limit the source announced the reset of, else
    ``None`` (a worker schedules the next attempt then, rather than sleeping)."""
    if isinstance(error, RateLimitExhausted) and error.retry_after is not None:
        return now + timedelta(seconds=error.retry_after)
    return None


def describe_error(error: BaseException, *, progress: str | None = None) -> str:
    """The run record's ``error`` text: the kind of failure, then the message, then where
    the stream it stopped in stands (``progress``, what its connector last said), so a
    run cut short says how far it got and how the next one goes on."""
    if isinstance(error, RateLimitExhausted):
        kind = "rate limit exhausted"
    elif isinstance(error, StopRequested):
        kind = "interrupted"
    elif isinstance(error, StopRun):
        kind = "stopped"
    else:
        kind = type(error).__name__
    described = f"{kind}: {error}"
    return described if progress is None else f"{described} [{progress}]"


def plan_slices(
    since: datetime, until: datetime, length: timedelta
) -> list[tuple[datetime, datetime]]:
    """Consecutive ``[start, end]`` slices covering ``[since, until]``; the last may be
    shorter. Neighbours share their boundary, so a record exactly on it is read twice
    (a duplicate), never zero times."""
    if length <= timedelta(0):
        raise ValueError("a backfill slice must be a positive duration")
    if since >= until:
        raise ValueError(f"backfill range is empty: {since.isoformat()} .. {until.isoformat()}")
    slices: list[tuple[datetime, datetime]] = []
    start = since
    while start < until:
        end = min(start + length, until)
        slices.append((start, end))
        start = end
    return slices


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a connector's run: for deciding whether that run is still alive."""

    host: str
    pid: int
    heartbeat_at: datetime


def is_stale(
    holder: Holder,
    *,
    now: datetime,
    lease: timedelta,
    this_host: str,
    pid_alive: Callable[[int], bool],
) -> bool:
    """Whether a ``running`` run was abandoned by a process that died.

    Stale when its heartbeat is older than ``lease`` (any host), or when it ran on this
    host and its process no longer exists (a killed ``memsync sync`` is recovered at
    once instead of after the lease).
    """
    if now - holder.heartbeat_at > lease:
        return True
    return holder.host == this_host and not pid_alive(holder.pid)
