"""The per-connector token bucket that rate-limits webhook deliveries, on a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memsync.clock import FakeClock
from memsync.runtime.app.webhooks import DeliveryRates

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def test_a_burst_is_taken_at_once_then_the_rate_refills_it() -> None:
    clock = FakeClock(T0)
    rates = DeliveryRates(clock)

    burst = [rates.take("gh", 2.0, 3) for _ in range(3)]
    over = rates.take("gh", 2.0, 3)
    clock.advance(timedelta(seconds=0.5))  # one token at two a second
    refilled = rates.take("gh", 2.0, 3)
    again = rates.take("gh", 2.0, 3)

    assert burst == [None, None, None]
    assert over == 0.5
    assert refilled is None
    assert again == 0.5


def test_a_refusal_takes_nothing_and_the_bucket_never_exceeds_its_burst() -> None:
    clock = FakeClock(T0)
    rates = DeliveryRates(clock)
    assert rates.take("gh", 1.0, 1) is None
    assert rates.take("gh", 1.0, 1) == 1.0
    assert rates.take("gh", 1.0, 1) == 1.0  # the refusal did not dig the bucket deeper

    clock.advance(timedelta(hours=1))

    assert [rates.take("gh", 1.0, 1) for _ in range(2)] == [None, 1.0]


def test_connectors_have_buckets_of_their_own_and_new_limits_a_fresh_one() -> None:
    rates = DeliveryRates(FakeClock(T0))
    assert rates.take("gh", 1.0, 1) is None

    assert rates.take("slack", 1.0, 1) is None
    assert rates.take("gh", 1.0, 1) is not None
    assert rates.take("gh", 5.0, 2) is None  # reloaded with other limits
