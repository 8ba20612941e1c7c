"""Retrying one request: waits come from the source's headers, within a cap.

The wait before the next attempt is, in order of preference: the error's own
``retry_after`` (which connectors fill from ``Retry-After``, seconds or an HTTP date,
or from a rate-limit reset header via :func:`retry_after_from_headers`), else an
exponential backoff. Retrying stops at ``max_attempts`` requests or when the next wait
would push the total past ``max_wait``, whichever comes first; the last error is then
re-raised (rate limits as :class:`RateLimitExhausted`). Every retry is logged (logger
``memsync.connectors``, event ``request retried``) with the request, the attempt, the
wait and the reason.

Waits go through an injected :class:`~memsync.stopping.Sleeper` (the process's stop
event), so a worker stopping on SIGTERM is not held by a wait of minutes: a stop
requested during a wait, or before an attempt, raises
:class:`~memsync.stopping.StopRequested` at once. Sleeper and clock are injected, so
tests never wait for real. There is no jitter: one connector instance makes one
request at a time, and deterministic waits keep tests and run records reproducible.

Observing requests: the runtime counts every attempt's outcome and every rate-limit
wait (its metrics) without connectors knowing: it runs a sync inside
:func:`observing_requests` with a :class:`RequestObserver`, and every :class:`Retrier`
working in that thread reports to it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Protocol, TypeVar

from memsync.clock import Clock, SystemClock
from memsync.connectors.errors import RateLimited, RateLimitExhausted, RetryableError
from memsync.retry import RetryPolicy
from memsync.stopping import Sleeper, StopEvent, StopRequested

__all__ = [
    "RequestObserver",
    "RequestOutcome",
    "Retrier",
    "RetryPolicy",
    "observing_requests",
    "retry_after_from_headers",
]


class RequestOutcome(enum.StrEnum):
    """How one attempt at a source request ended."""

    OK = "ok"
    RATE_LIMITED = "rate_limited"
    #: A transient failure (a 5xx, a timeout, a reset connection): retried.
    TRANSIENT_ERROR = "transient_error"
    #: Anything retrying cannot fix (refused credentials, not found, a bad response).
    ERROR = "error"


class RequestObserver(Protocol):
    """Told about every request attempt and rate-limit wait of the connectors working
    in the thread that installed it (see :func:`observing_requests`)."""

    def request_finished(self, outcome: RequestOutcome) -> None:
        """One attempt ended with ``outcome``."""

    def rate_limit_waited(self, seconds: float) -> None:
        """The source rate limited a request and ``seconds`` were spent waiting."""


log = logging.getLogger("memsync.connectors")

_observer: ContextVar[RequestObserver | None] = ContextVar("request_observer", default=None)


@contextmanager
def observing_requests(observer: RequestObserver) -> Iterator[None]:
    """Report every request attempt made in this thread (and its context) to
    ``observer`` until the block ends. Nested blocks: the innermost observer is told."""
    token = _observer.set(observer)
    try:
        yield
    finally:
        _observer.reset(token)


T = TypeVar("T")

# Epoch-second values beyond this are absolute timestamps, not deltas: ten years of
# seconds is larger than any sane "wait this long", and smaller than any current epoch.
_ABSOLUTE_EPOCH_THRESHOLD = 10 * 365 * 86_400
# Epoch values beyond this are in milliseconds (about the year 5138 in seconds).
_ABSOLUTE_EPOCH_MILLIS_THRESHOLD = 10**11
# Budgets a source counts apart, each with its own remaining and reset headers (Linear:
# requests and query complexity).
_BUDGETS = ("requests", "complexity")


def retry_after_from_headers(headers: Mapping[str, str], now: datetime) -> float | None:
    """Seconds to wait according to the response headers, or ``None`` if they do not say.

    Reads ``Retry-After`` (delta seconds or an HTTP date), then the rate-limit reset
    headers: ``ratelimit-reset`` (delta seconds, IETF draft and Zendesk), and
    ``x-ratelimit-reset`` / ``x-rate-limit-reset`` (epoch seconds as GitHub sends, delta
    seconds, or an ISO 8601 time as Jira Cloud sends, ``2026-01-05T10:31Z``), then a
    per-budget reset (``x-ratelimit-requests-reset``, ``x-ratelimit-complexity-reset``:
    Linear's, in epoch milliseconds) of a budget whose ``…-remaining`` is 0, the latest
    if both ran out. Negative results (a reset already past) become 0. Header names are
    matched case-insensitively.
    """
    lowered = {name.lower(): value.strip() for name, value in headers.items()}
    retry_after = lowered.get("retry-after")
    if retry_after:
        seconds = _seconds_or_date(retry_after, now)
        if seconds is not None:
            return seconds
    for name in ("ratelimit-reset", "x-ratelimit-reset", "x-rate-limit-reset"):
        value = lowered.get(name)
        if value is None:
            continue
        try:
            number = float(value)
        except ValueError:
            moment = _iso_time(value)
            if moment is None:
                continue
            return max((moment - now).total_seconds(), 0.0)
        if number > _ABSOLUTE_EPOCH_THRESHOLD:
            number -= now.timestamp()
        return max(number, 0.0)
    return _budget_reset(lowered, now)


def _budget_reset(lowered: Mapping[str, str], now: datetime) -> float | None:
    waits = []
    for budget in _BUDGETS:
        reset = lowered.get(f"x-ratelimit-{budget}-reset")
        if reset is None or lowered.get(f"x-ratelimit-{budget}-remaining") not in ("0", "0.0"):
            continue
        try:
            number = float(reset)
        except ValueError:
            continue
        seconds = number / 1000 if number > _ABSOLUTE_EPOCH_MILLIS_THRESHOLD else number
        waits.append(max(seconds - now.timestamp(), 0.0))
    return max(waits) if waits else None


def _iso_time(value: str) -> datetime | None:
    try:
        # Python 3.11 reads "Z" and a time without seconds ("…T10:31Z").
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _seconds_or_date(value: str, now: datetime) -> float | None:
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    # Only an HTTP date needs the email package (a fair share of a short command's
    # start-up when imported with this module).
    from email.utils import parsedate_to_datetime

    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max((moment - now).total_seconds(), 0.0)


class Retrier:
    """Runs a callable until it succeeds, the caps are reached, or it fails for good.

    Only :class:`RetryableError` (and so :class:`RateLimited`) is retried; every other
    exception passes straight through. ``sleeper`` defaults to a stop event nothing
    stops (plain waits) and ``clock`` to the wall clock; the runtime hands in its
    process's stop event, tests a :class:`~memsync.stopping.FakeSleeper`. ``waits``
    records every wait taken in full, in order, for assertions and run records.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        sleeper: Sleeper | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.policy = policy
        self.clock: Clock = clock or SystemClock()
        self.sleeper: Sleeper = sleeper or StopEvent()
        self.waits: list[float] = []

    def call(self, attempt: Callable[[], T], *, what: str) -> T:
        """Return ``attempt()``'s result, retrying transient failures within the caps.

        ``what`` describes the request in error messages (e.g. ``GET /api/v2/…``).
        Raises :class:`RateLimitExhausted` when the last failure was a rate limit,
        otherwise re-raises the last :class:`RetryableError` with the attempt count.
        Raises :class:`~memsync.stopping.StopRequested` when a stop is requested before
        an attempt or during a wait: no further attempt is made.
        """
        waited = 0.0
        attempts = 0
        cap = self.policy.max_wait.total_seconds()
        observer = _observer.get()
        while True:
            if self.sleeper.stop_requested:
                raise StopRequested(f"{what}: not sent, the process is stopping")
            attempts += 1
            try:
                result = attempt()
            except RetryableError as error:
                rate_limited = isinstance(error, RateLimited)
                if observer is not None:
                    observer.request_finished(
                        RequestOutcome.RATE_LIMITED
                        if rate_limited
                        else RequestOutcome.TRANSIENT_ERROR
                    )
                wait = (
                    error.retry_after
                    if error.retry_after is not None
                    else self.policy.delay(attempts).total_seconds()
                )
                if attempts >= self.policy.max_attempts or waited + wait > cap:
                    raise self._give_up(error, what, attempts, waited, wait) from error
                self._wait(error, what, attempts, wait, rate_limited, observer)
                waited += wait
            except Exception:
                if observer is not None:
                    observer.request_finished(RequestOutcome.ERROR)
                raise
            else:
                if observer is not None:
                    observer.request_finished(RequestOutcome.OK)
                return result

    def _wait(
        self,
        error: RetryableError,
        what: str,
        attempt: int,
        seconds: float,
        rate_limited: bool,
        observer: RequestObserver | None,
    ) -> None:
        """Wait ``seconds`` before the next attempt; :class:`StopRequested` if a stop
        cuts the wait short (the time spent until then is still reported)."""
        reason = "rate limited" if rate_limited else "transient error"
        log.warning(
            "request retried",
            extra={
                "request": what,
                "attempt": attempt,
                "wait_seconds": seconds,
                "reason": reason,
                "error": str(error),
            },
        )
        started = self.clock.now()
        stopped = self.sleeper.wait(seconds)
        spent = seconds if not stopped else (self.clock.now() - started).total_seconds()
        if observer is not None and rate_limited:
            observer.rate_limit_waited(spent)
        if stopped:
            raise StopRequested(
                f"{what}: stopped {spent:.1f}s into a {seconds:g}s wait after attempt "
                f"{attempt} ({reason}); the process is stopping"
            ) from error
        self.waits.append(seconds)

    @staticmethod
    def _give_up(
        error: RetryableError, what: str, attempts: int, waited: float, next_wait: float
    ) -> Exception:
        summary = (
            f"{what}: gave up after {attempts} attempt(s) and {waited:g}s of waiting "
            f"(next wait would be {next_wait:g}s): {error}"
        )
        if isinstance(error, RateLimited):
            return RateLimitExhausted(
                summary, attempts=attempts, waited=waited, retry_after=error.retry_after
            )
        return RetryableError(summary, retry_after=error.retry_after)
