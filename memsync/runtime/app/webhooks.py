"""Pushed deliveries into the one ingest path: ``POST /v1/webhooks/{connector_name}``.

The connector's receiver verifies and parses a delivery into the connector's own
records; they are mapped by the connector's ``to_episode`` and ingested exactly as a
scheduled re-read would ingest them, so a delivery and the re-read of the same record
store one episode. Compiling follows through the usual triggers. Every delivery is
counted (``memsync_webhook_deliveries``) and every refusal logged; every delivery to a
configured connector is also counted in the store by outcome (``webhook_deliveries``:
``state show``, the admin page, the push gap).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from memsync.clock import Clock
from memsync.connectors.config import ConnectorConfig
from memsync.connectors.errors import SkipRecord
from memsync.connectors.webhooks import Refusal, WebhookDelivery, WebhookRefused
from memsync.episode import IngestStatus, JSONObject
from memsync.runtime.app.config import MissingVariables
from memsync.runtime.ingest import IngestOutcome
from memsync.runtime.sync.labels import label_rules_of, labelled_episode

if TYPE_CHECKING:
    from memsync.connectors.base import Connector
    from memsync.runtime.app.services import Services

__all__ = ["DeliveryIds", "DeliveryRates", "WebhookAnswer", "WebhookIntake"]

log = logging.getLogger("memsync.webhooks")

DELIVERY_MEMORY = timedelta(hours=1)
"""How long a delivery id is remembered: long enough for a vendor's quick retries."""

DELIVERY_CAPACITY = 10_000
"""At most this many ids are remembered; the oldest are forgotten first."""


class DeliveryIds:
    """The delivery ids seen lately, per connector: answers a redelivery fast.

    Bounded in time and in count, and per process: forgetting an id costs only the
    ingest of a delivery whose records' keys already make it store nothing.
    Thread-safe (deliveries are received on the server's thread pool).
    """

    def __init__(
        self,
        clock: Clock,
        keep_for: timedelta = DELIVERY_MEMORY,
        capacity: int = DELIVERY_CAPACITY,
    ) -> None:
        self._clock = clock
        self._keep_for = keep_for
        self._capacity = capacity
        self._seen: OrderedDict[tuple[str, str], datetime] = OrderedDict()
        self._lock = threading.Lock()

    def seen(self, connector: str, delivery_id: str) -> bool:
        """Whether ``delivery_id`` of ``connector`` was remembered and is still fresh."""
        with self._lock:
            self._forget_expired(self._clock.now())
            return (connector, delivery_id) in self._seen

    def remember(self, connector: str, delivery_id: str) -> None:
        """Remember a delivery that was stored; repeats refresh nothing (first wins)."""
        with self._lock:
            now = self._clock.now()
            self._forget_expired(now)
            self._seen.setdefault((connector, delivery_id), now + self._keep_for)
            while len(self._seen) > self._capacity:
                self._seen.popitem(last=False)

    def _forget_expired(self, now: datetime) -> None:
        # Insertion order is expiry order: every id is kept for the same time.
        while self._seen:
            oldest, expires = next(iter(self._seen.items()))
            if expires > now:
                return
            del self._seen[oldest]


class DeliveryRates:
    """A token bucket per connector: ``burst`` deliveries at once, refilled at
    ``rate`` a second on the injected clock.

    Per process: it protects this process and the store from a flood, and a delivery
    it refuses is not lost (the scheduled re-read finds its record), so buckets need
    no sharing between processes. Thread-safe. A connector whose limits changed
    (a reload) starts a full bucket under the new ones.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # connector -> (rate, burst, tokens, when they were counted)
        self._buckets: dict[str, tuple[float, int, float, datetime]] = {}
        self._lock = threading.Lock()

    def take(self, connector: str, rate: float, burst: int) -> float | None:
        """Take one delivery's token: ``None`` when there was one, else the seconds
        until there will be (nothing taken)."""
        with self._lock:
            now = self._clock.now()
            known = self._buckets.get(connector)
            if known is None or known[:2] != (rate, burst):
                tokens = float(burst)
            else:
                # A clock stepped back refills nothing, and takes nothing away.
                elapsed = max(0.0, (now - known[3]).total_seconds())
                tokens = min(float(burst), known[2] + elapsed * rate)
            if tokens < 1.0:
                self._buckets[connector] = (rate, burst, tokens, now)
                return (1.0 - tokens) / rate
            self._buckets[connector] = (rate, burst, tokens - 1.0, now)
            return None


@dataclass(frozen=True, slots=True)
class WebhookAnswer:
    """What the endpoint answers: ``body`` is a receipt, a vendor's handshake reply or
    an error text (``error`` set, for the API's error shape); ``retry_after`` the
    seconds a rate-limited vendor should wait."""

    status: int
    outcome: str
    body: JSONObject
    error: str | None = None
    retry_after: int | None = None


class WebhookIntake:
    """Receives deliveries for the configured connectors of every tenant.

    Repeats: a delivery id seen lately is a ``duplicate`` at once; past that memory, or
    under another delivery id (the scheduled re-read), the records' keys make ingest
    store nothing new. Conflicts: an edit of a record already stored is a revision, a
    deletion a tombstone, as from a re-read. Refusals store nothing: 401 for a missing
    or bad signature or a stale timestamp, 400 for a malformed body, 422 for one that
    is not a record the connector reads, 404 for an unknown connector or one with no
    ``webhook:``, 413 for a body over the API's limit (see :meth:`too_large`), 429 over
    the connector's ``webhook.rate_limit`` (checked first, before any work), 503 when
    this process lacks a variable the connector names.
    """

    def __init__(self, services: Services) -> None:
        self._services = services
        self._delivery_ids = DeliveryIds(services.clock)
        self._rates = DeliveryRates(services.clock)

    def receive(self, name: str, headers: Mapping[str, str], body: bytes) -> WebhookAnswer:
        """Verify, parse and ingest one delivery to connector ``name``."""
        config = self._webhook_config(name)
        if config is None:
            # Metrics only: a name nobody configured gets no row in the store.
            reason = f"no connector named {name!r} takes webhooks"
            return self._refused(None, "not_found", 404, reason)
        limited = self._over_rate(config)
        if limited is not None:
            # Metrics and log only: a flood of deliveries must not become a flood of
            # writes, which is what the limit is there to prevent.
            return limited
        try:
            with self._services.connector_instance(config) as connector:
                answer = self._receive(config, connector, headers, body)
        except MissingVariables as error:
            answer = self._refused(config, "unavailable", 503, str(error))
        self._record(config, answer)
        return answer

    def too_large(self, name: str, max_bytes: int) -> WebhookAnswer:
        """Count and log a delivery to ``name`` that the API refused (413) for a body
        over ``max_bytes``, before it was read; an unknown connector counts as ``''``.
        Metrics and log only, as a rate-limited delivery: it is called on the event
        loop, and a refusal that costs the sender one header must cost no write."""
        config = self._webhook_config(name)
        return self._refused(config, "too_large", 413, f"body over {max_bytes} bytes")

    def _over_rate(self, config: ConnectorConfig) -> WebhookAnswer | None:
        """A 429 if the delivery is over the connector's token bucket, else ``None``
        (and the delivery has taken its token)."""
        limits = config.webhook
        if limits is None:
            return None
        wait = self._rates.take(config.name, limits.rate_limit, limits.burst)
        if wait is None:
            return None
        reason = f"over {limits.rate_limit:g} deliveries a second (burst {limits.burst})"
        return self._refused(config, "rate_limited", 429, reason, retry_after=math.ceil(wait))

    def _record(self, config: ConnectorConfig, answer: WebhookAnswer) -> None:
        # After the delivery's own transaction: a store error here is answered as any
        # store error is (503 when it cannot be reached), and the vendor's retry finds
        # the records' keys already stored.
        self._services.webhook_deliveries.record(
            config.tenant, config.name, answer.outcome, answer.status, self._services.clock.now()
        )

    def _webhook_config(self, name: str) -> ConnectorConfig | None:
        for config in self._services.connectors:
            if config.name == name and config.webhook is not None:
                return config
        return None

    def _receive(
        self,
        config: ConnectorConfig,
        connector: Connector[Any, Any],
        headers: Mapping[str, str],
        body: bytes,
    ) -> WebhookAnswer:
        name = config.name
        receiver = connector.webhook_receiver()
        if receiver is None:
            reason = f"connector {name!r} (type {config.type}) takes no webhooks"
            return self._refused(config, "not_found", 404, reason)
        try:
            delivery: WebhookDelivery[Any] = receiver.receive(
                headers, body, self._services.clock.now()
            )
        except WebhookRefused as refused:
            refusal = refused.refusal
            return self._refused(config, refusal.value, refusal.status, str(refused))
        if delivery.reply is not None:
            return self._answered(name, "reply", delivery.reply)
        if delivery.ignored:
            return self._answered(name, "ignored", {"outcome": "ignored", "event": delivery.event})
        if delivery.delivery_id is not None and self._delivery_ids.seen(name, delivery.delivery_id):
            return self._answered(name, "duplicate", _receipt("duplicate", delivery, []))
        try:
            rules = label_rules_of(config)
            drafts = [labelled_episode(connector, record, rules) for record in delivery.records]
        except (SkipRecord, ValueError) as error:
            # SkipRecord: a subject the record cannot fill; ValueError: a hook's answer
            # to_episode refuses (a naive time). Either way no record to store, no 500.
            return self._refused(config, Refusal.UNPROCESSABLE.value, 422, str(error))
        ingest = self._services.ingest
        outcomes = ingest.ingest(config.tenant, drafts) if drafts else []
        if delivery.tombstones:
            outcomes += ingest.tombstone(config.tenant, delivery.tombstones)
        if delivery.delivery_id is not None:
            self._delivery_ids.remember(name, delivery.delivery_id)
        outcome = _summary(outcomes)
        log.info("webhook %s: %s %s", name, delivery.event, outcome)
        return self._answered(name, outcome, _receipt(outcome, delivery, outcomes))

    def _answered(self, connector: str, outcome: str, body: JSONObject) -> WebhookAnswer:
        self._services.metrics.webhook_delivery(connector, outcome)
        return WebhookAnswer(200, outcome, body)

    def _refused(
        self,
        config: ConnectorConfig | None,
        outcome: str,
        status: int,
        reason: str,
        *,
        retry_after: int | None = None,
    ) -> WebhookAnswer:
        connector = "" if config is None else config.name
        self._services.metrics.webhook_delivery(connector, outcome)
        log.warning("webhook %s refused (%s, %d): %s", connector or "?", outcome, status, reason)
        return WebhookAnswer(status, outcome, {}, error=reason, retry_after=retry_after)


def _summary(outcomes: Sequence[IngestOutcome]) -> str:
    """One word for the delivery: ``stored`` if it created an episode, ``revised`` if it
    changed or deleted one, else ``duplicate`` (a deletion of nothing stored is one)."""
    statuses = {outcome.status for outcome in outcomes}
    if IngestStatus.CREATED in statuses:
        return "stored"
    if statuses & {IngestStatus.REVISED, IngestStatus.TOMBSTONED}:
        return "revised"
    return "duplicate"


def _receipt(
    outcome: str, delivery: WebhookDelivery[Any], outcomes: Sequence[IngestOutcome]
) -> JSONObject:
    return {
        "outcome": outcome,
        "event": delivery.event,
        "delivery_id": delivery.delivery_id,
        "episodes": [
            {"id": str(o.episode_id), "status": o.status.value, "revision": o.revision}
            for o in outcomes
        ],
    }
