"""The sync runner: windows and overlap, cursors and checkpoints, batching through the
one ingest path, run records, backfills, and the one-run-per-connector lock.

See docs/sync.md for the rules; :class:`SyncRunner` is the entry point.
"""

from __future__ import annotations

from memsync.runtime.sync.policy import RunKind, RunStatus
from memsync.runtime.sync.records import RunInterrupted, RunRecord, Tally
from memsync.runtime.sync.repository import RunInProgress, RunLost, SyncRepository
from memsync.runtime.sync.runner import DEFAULT_LEASE, DEFAULT_SLICE, SyncRunner, pid_alive

__all__ = [
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
