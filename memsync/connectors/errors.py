"""Errors a connector raises, grouped by what the sync runner should do about them.

============================  ===============================================================
error                         what the runner does
============================  ===============================================================
:class:`SkipRecord`           skips one record, counts it under ``skipped`` with the reason,
                              and carries on with the next record
:class:`RetryableError`       a transient failure the retry helper could not outlast (or
                              that a connector chose not to retry): the run ends ``partial``
                              if anything was committed, otherwise ``failed``; the next
                              scheduled run tries again from the committed cursor
:class:`RateLimitExhausted`   the source kept rate limiting beyond the retry cap: the run
                              ends ``partial`` with the reason; the cursor keeps what was
                              committed
:class:`StopRun`              fatal until a person acts (bad credentials, bad config, the
                              account or resource does not exist): the run ends ``failed``
============================  ===============================================================

:class:`RateLimited` is a :class:`RetryableError` raised by one attempt; the retry helper
turns a run of them that exceeds its cap into :class:`RateLimitExhausted`.

``fetch`` is a generator, so an error it raises ends that fetch: only errors raised while
mapping one record (``idempotency_key``, ``to_episode`` and its hooks) can be
:class:`SkipRecord`.
"""

from __future__ import annotations

__all__ = [
    "ConnectorConfigError",
    "ConnectorDefinitionError",
    "ConnectorError",
    "RateLimitExhausted",
    "RateLimited",
    "RetryableError",
    "SkipRecord",
    "StopRun",
]


class ConnectorError(Exception):
    """Base class of every error a connector raises while running."""


class RetryableError(ConnectorError):
    """A transient failure: trying again later may succeed.

    ``retry_after`` is the number of seconds the source asked us to wait, if it said.
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimited(RetryableError):
    """One request was rate limited (HTTP 429 or a source-specific equivalent)."""


class RateLimitExhausted(ConnectorError):
    """The source kept rate limiting past the retry cap; the run ends partial.

    ``attempts`` is how many requests were made and ``waited`` how many seconds were
    spent waiting in total; ``retry_after`` is the last wait the source asked for.
    """

    def __init__(
        self, message: str, *, attempts: int, waited: float, retry_after: float | None
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.waited = waited
        self.retry_after = retry_after


class SkipRecord(ConnectorError):
    """This one record cannot become an episode; skip it and record ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class StopRun(ConnectorError):
    """A fatal condition (auth, config, not found): stop the run; retrying will not help."""


class ConnectorDefinitionError(Exception):
    """A connector class or entry point is unusable (refused when the registry loads)."""


class ConnectorConfigError(ValueError):
    """Connector configuration is invalid. ``problems`` lists one message per mistake."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
