from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from memsync.clock import FakeClock
from memsync.connectors import (
    RateLimited,
    RateLimitExhausted,
    RequestOutcome,
    Retrier,
    RetryableError,
    RetryPolicy,
    StopRun,
    observing_requests,
    retry_after_from_headers,
)
from memsync.stopping import FakeSleeper, StopRequested

NOW = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "93"}, 93.0),
        ({"retry-after": "Mon, 01 Jan 2024 12:00:30 GMT"}, 30.0),
        ({"retry-after": "Mon, 01 Jan 2024 11:00:00 GMT"}, 0.0),
        ({"ratelimit-reset": "41"}, 41.0),
        ({"x-ratelimit-reset": str(int(NOW.timestamp()) + 120)}, 120.0),
        ({"x-rate-limit-remaining": "0"}, None),
        ({"retry-after": "later", "ratelimit-reset": "5"}, 5.0),
        # Jira Cloud's X-RateLimit-Reset is an ISO 8601 time to the minute.
        ({"X-RateLimit-Reset": "2024-01-01T12:10Z"}, 600.0),
        ({"x-ratelimit-reset": "2024-01-01T11:59Z"}, 0.0),
        ({"x-ratelimit-reset": "soon"}, None),
    ],
)
def test_wait_comes_from_retry_after_or_reset_headers(
    headers: dict[str, str], expected: float | None
) -> None:
    assert retry_after_from_headers(headers, NOW) == expected


class Flaky:
    """Fails with the given errors in turn, then returns "ok"."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def _retrier(
    policy: RetryPolicy | None = None, sleeper: FakeSleeper | None = None
) -> tuple[Retrier, list[float]]:
    sleeper = sleeper or FakeSleeper(FakeClock(NOW))
    retrier = Retrier(policy or RetryPolicy(), sleeper=sleeper, clock=sleeper.clock)
    return retrier, sleeper.waits


def test_server_wait_is_honoured_then_success() -> None:
    retrier, slept = _retrier()
    flaky = Flaky(RateLimited("429", retry_after=93))
    assert retrier.call(flaky, what="test") == "ok"
    assert slept == [93]
    assert flaky.calls == 2


def test_without_a_server_wait_backoff_is_exponential_and_capped() -> None:
    retrier, slept = _retrier(
        RetryPolicy(max_attempts=6, base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=5))
    )
    flaky = Flaky(*(RetryableError("503") for _ in range(5)))
    assert retrier.call(flaky, what="test") == "ok"
    assert slept == [1, 2, 4, 5, 5]


def test_rate_limit_past_the_attempt_cap_is_exhausted() -> None:
    retrier, slept = _retrier(RetryPolicy(max_attempts=3))
    flaky = Flaky(*(RateLimited("429", retry_after=1) for _ in range(5)))
    with pytest.raises(RateLimitExhausted) as caught:
        retrier.call(flaky, what="zendesk 'zd'")
    assert (caught.value.attempts, caught.value.waited, flaky.calls) == (3, 2.0, 3)
    assert slept == [1, 1]
    assert str(caught.value).startswith("zendesk 'zd': gave up after 3 attempt(s)")


def test_a_wait_beyond_the_total_cap_is_not_taken() -> None:
    retrier, slept = _retrier(RetryPolicy(max_wait=timedelta(seconds=60)))
    with pytest.raises(RateLimitExhausted) as caught:
        retrier.call(Flaky(RateLimited("429", retry_after=93)), what="test")
    assert slept == []
    assert caught.value.retry_after == 93


def test_transient_errors_past_the_cap_stay_retryable() -> None:
    retrier, _ = _retrier(RetryPolicy(max_attempts=2))
    with pytest.raises(RetryableError, match="gave up after 2 attempt"):
        retrier.call(Flaky(RetryableError("503"), RetryableError("503")), what="test")


def test_fatal_errors_are_never_retried() -> None:
    retrier, slept = _retrier()
    flaky = Flaky(StopRun("401"))
    with pytest.raises(StopRun):
        retrier.call(flaky, what="test")
    assert (flaky.calls, slept) == (1, [])


class RecordingObserver:
    def __init__(self) -> None:
        self.outcomes: list[RequestOutcome] = []
        self.waits: list[float] = []

    def request_finished(self, outcome: RequestOutcome) -> None:
        self.outcomes.append(outcome)

    def rate_limit_waited(self, seconds: float) -> None:
        self.waits.append(seconds)


def test_an_observer_is_told_every_attempt_and_only_rate_limit_waits() -> None:
    retrier, slept = _retrier(
        RetryPolicy(max_attempts=5, base_delay=timedelta(seconds=1), max_delay=timedelta(seconds=1))
    )
    observer = RecordingObserver()
    flaky = Flaky(RateLimited("429", retry_after=93), RetryableError("503"))

    with observing_requests(observer):
        assert retrier.call(flaky, what="test") == "ok"
        with pytest.raises(StopRun):
            retrier.call(Flaky(StopRun("401")), what="test")
    retrier.call(Flaky(), what="outside the block")

    assert observer.outcomes == [
        RequestOutcome.RATE_LIMITED,
        RequestOutcome.TRANSIENT_ERROR,
        RequestOutcome.OK,
        RequestOutcome.ERROR,
    ]
    assert slept == [93, 1]
    assert observer.waits == [93]  # the backoff after a 503 is not a rate limit


def test_a_rate_limit_wait_not_taken_is_not_reported() -> None:
    retrier, _ = _retrier(RetryPolicy(max_wait=timedelta(seconds=60)))
    observer = RecordingObserver()
    with observing_requests(observer), pytest.raises(RateLimitExhausted):
        retrier.call(Flaky(RateLimited("429", retry_after=93)), what="test")
    assert (observer.outcomes, observer.waits) == ([RequestOutcome.RATE_LIMITED], [])


def test_every_retry_is_logged_with_its_wait_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    retrier, _ = _retrier()
    flaky = Flaky(RateLimited("429 slow down", retry_after=93), RetryableError("503"))

    with caplog.at_level(logging.WARNING, logger="memsync.connectors"):
        assert retrier.call(flaky, what="GET /issues") == "ok"

    retried = [record for record in caplog.records if record.getMessage() == "request retried"]
    fields = ("request", "attempt", "wait_seconds", "reason", "error")
    assert [tuple(vars(record)[name] for name in fields) for record in retried] == [
        ("GET /issues", 1, 93, "rate limited", "429 slow down"),
        ("GET /issues", 2, 2.0, "transient error", "503"),
    ]


def test_a_stop_during_a_wait_ends_the_call_at_once_without_another_attempt() -> None:
    sleeper = FakeSleeper(FakeClock(NOW), stop_during_wait=1)
    retrier, _ = _retrier(sleeper=sleeper)
    flaky = Flaky(RateLimited("429", retry_after=60))

    with pytest.raises(StopRequested, match=r"GET /issues: stopped 0.0s into a 60s wait after"):
        retrier.call(flaky, what="GET /issues")

    assert flaky.calls == 1
    assert sleeper.waits == [60]
    assert retrier.waits == []  # the wait was not taken in full
    assert sleeper.clock.now() == NOW


def test_no_request_is_sent_once_a_stop_is_requested() -> None:
    sleeper = FakeSleeper(FakeClock(NOW))
    retrier, _ = _retrier(sleeper=sleeper)
    flaky = Flaky()

    sleeper.request_stop()
    with pytest.raises(StopRequested, match="not sent"):
        retrier.call(flaky, what="GET /issues")

    assert flaky.calls == 0


def test_a_rate_limit_wait_cut_short_reports_the_time_spent_until_the_stop() -> None:
    retrier, _ = _retrier(sleeper=FakeSleeper(FakeClock(NOW), stop_during_wait=2))
    observer = RecordingObserver()
    flaky = Flaky(RateLimited("429", retry_after=5), RateLimited("429", retry_after=60))

    with observing_requests(observer), pytest.raises(StopRequested):
        retrier.call(flaky, what="test")

    # The fake's stopped wait takes no time; the full first wait counts in full.
    assert observer.waits == [5, 0.0]
