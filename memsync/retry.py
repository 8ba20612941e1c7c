"""How often something is tried and how long it waits between tries.

One policy type serves both places memsync retries: a connector's request (the
:class:`~memsync.connectors.retry.Retrier` sleeps between attempts, within ``max_wait``)
and a job (the queue sets the job's ``run_after`` instead of sleeping, so only the
attempts and the delays apply).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Caps and exponential backoff.

    ``max_attempts`` counts tries, the first included. Without a wait given by the
    other side (a ``Retry-After``), the wait after failed attempt *n* is
    ``base_delay * 2**(n-1)``, at most ``max_delay``. ``max_wait`` caps the sum of the
    waits a caller sleeps through for one request.
    """

    max_attempts: int = 5
    base_delay: timedelta = timedelta(seconds=1)
    max_delay: timedelta = timedelta(minutes=1)
    max_wait: timedelta = timedelta(minutes=10)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, not {self.max_attempts}")

    def delay(self, attempt: int) -> timedelta:
        """The wait after failed attempt number ``attempt`` (1-based)."""
        delay: timedelta = self.base_delay * (2 ** max(attempt - 1, 0))
        return min(delay, self.max_delay)
