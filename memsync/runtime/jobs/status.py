"""The states a job goes through and how it ended: plain enums with no SQL, so the
command line can offer them as choices without loading the queue."""

from __future__ import annotations

import enum

__all__ = ["JobOutcome", "JobStatus"]


class JobStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class JobOutcome(enum.StrEnum):
    """How a finished job ended, for people: ``partial`` completed but did part of its
    work (a sync that stored part of its window); ``needs_attention`` failed on an error
    retrying cannot fix (refused credentials, a missing resource, a bad configuration)."""

    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"
    NEEDS_ATTENTION = "needs_attention"
