"""What a connector's webhook deliveries became, and whether its webhook went quiet.

Every delivery to a configured connector is counted in ``webhook_deliveries`` by one
upsert (stored, duplicate, revised, ignored, refused, and when the last of each
arrived); ``memsync state show``, ``GET /v1/connectors/{name}/state`` and the admin
page read it back. A webhook that breaks is not seen in its own counts (nothing
arrives to be counted), so it is seen beside the scheduled re-reads: a connector whose
re-reads keep finding new records while no delivery arrives has a *push gap*
(:func:`push_gap`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store
from memsync.runtime.sync.policy import RunKind

__all__ = [
    "ACCEPTED",
    "PushGap",
    "ReadsSince",
    "WebhookDeliveries",
    "WebhookState",
    "push_gap",
]

STORED = frozenset({"stored", "revised"})
"""Outcomes of a delivery that changed the store."""
ACCEPTED = STORED | {"duplicate"}
"""Outcomes of a delivery that carried records the connector reads: the webhook works."""
IGNORED = frozenset({"ignored", "reply"})
"""Outcomes of a delivery with nothing to store: an event the connector does not read,
or a vendor's handshake (Slack's ``url_verification``)."""
_COUNTED = ("stored", "duplicate", "revised")

_runs = tables.sync_runs
# The deliveries' table is named where deliveries are counted or read: a command that
# reads a connector's state without a webhook (and ``runs list``) builds none of it.


@dataclass(frozen=True, slots=True)
class ReadsSince:
    """The scheduled re-reads (incremental and full-refresh runs; backfills read old
    ranges and do not count) that found new or changed records after the connector's
    last accepted delivery, or, before its first one, after its first run (which read
    the history no webhook had pushed)."""

    runs: int
    new_records: int
    """Episodes those runs created or revised."""
    first_at: datetime
    """When the first of them started."""


@dataclass(frozen=True, slots=True)
class PushGap:
    """The connector's webhook looks broken: re-reads have been finding what it should
    have pushed for longer than ``push_gap_after``."""

    last_accepted_at: datetime | None
    """The last delivery that carried records (None: none ever did)."""
    first_found_at: datetime
    """When the first re-read that found new records since then started."""
    runs: int
    new_records: int


def push_gap(
    last_accepted_at: datetime | None,
    reads: ReadsSince | None,
    *,
    now: datetime,
    after: timedelta,
) -> PushGap | None:
    """The push gap, if there is one: a re-read found new records at least ``after``
    ago and no delivery with records was accepted since it started.

    Measured from the first finding re-read, not from the last delivery: a quiet source
    sends nothing and its re-reads find nothing, which is no gap, and a delivery that
    arrives a little after the re-read that found its record clears the gap before it is
    flagged. Any later accepted delivery clears it (``reads`` then counts no run).
    """
    if reads is None or reads.runs == 0 or now - reads.first_at < after:
        return None
    return PushGap(last_accepted_at, reads.first_at, reads.runs, reads.new_records)


@dataclass(frozen=True, slots=True)
class WebhookState:
    """A connector's webhook as ``state show`` reports it: deliveries counted by outcome
    since the connector was configured (or last forgotten), when the last of each kind
    arrived, the kind and HTTP status of the last refusal (its message, which can quote
    the body, is only in the server log), and the push gap if there is one."""

    stored: int
    duplicate: int
    revised: int
    ignored: int
    refused: int
    last_delivery_at: datetime | None
    last_accepted_at: datetime | None
    """The last delivery that carried records (stored, revised or duplicate)."""
    last_stored_at: datetime | None
    """The last delivery that stored or revised an episode."""
    last_refused_at: datetime | None
    last_refusal: str | None
    """e.g. ``bad_signature``, ``stale``, ``malformed``, ``unprocessable``."""
    last_refusal_status: int | None
    push_gap_after_seconds: float
    push_gap: PushGap | None

    @property
    def total(self) -> int:
        """Every delivery counted, whatever became of it."""
        return self.stored + self.duplicate + self.revised + self.ignored + self.refused


class WebhookDeliveries:
    """Reads and writes ``webhook_deliveries``; reads ``sync_runs`` for the push gap."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def record(
        self, tenant_id: str, connector: str, outcome: str, status: int, now: datetime
    ) -> None:
        """Count one delivery of ``outcome`` (answered ``status``) in one statement.

        Repeats: every call counts, a redelivery too (its outcome says ``duplicate``).
        Concurrent deliveries each add their count (the upsert increments in the row);
        a moment only replaces an earlier one, so deliveries finishing out of order keep
        the latest.
        """
        deliveries = tables.webhook_deliveries
        accepted, stored = outcome in ACCEPTED, outcome in STORED
        refused = not accepted and outcome not in IGNORED
        row = {
            "tenant_id": tenant_id,
            "connector": connector,
            **{name: int(outcome == name) for name in _COUNTED},
            "ignored": int(outcome in IGNORED),
            "refused": int(refused),
            "last_delivery_at": now,
            "last_accepted_at": now if accepted else None,
            "last_stored_at": now if stored else None,
            "last_refused_at": now if refused else None,
            "last_refusal": outcome if refused else None,
            "last_refusal_status": status if refused else None,
        }
        insert = tables.upsert(deliveries, postgresql=self._store.is_postgresql).values(**row)
        new = insert.excluded
        refusal_is_newer = _is_newer(new.last_refused_at, deliveries.c.last_refused_at)
        counters = (*_COUNTED, "ignored", "refused")
        update: dict[str, sa.ColumnElement[object]] = {
            name: deliveries.c[name] + new[name] for name in counters
        }
        for moment in ("last_delivery_at", "last_accepted_at", "last_stored_at"):
            update[moment] = _latest(new[moment], deliveries.c[moment])
        for column in ("last_refused_at", "last_refusal", "last_refusal_status"):
            update[column] = sa.case((refusal_is_newer, new[column]), else_=deliveries.c[column])
        with self._store.write() as connection:
            connection.execute(
                insert.on_conflict_do_update(
                    index_elements=[deliveries.c.tenant_id, deliveries.c.connector],
                    set_=update,
                )
            )

    def states(
        self, tenant_id: str, push_gap_after: Mapping[str, timedelta], now: datetime
    ) -> dict[str, WebhookState]:
        """The webhook state of each connector named in ``push_gap_after`` (its own
        threshold), in two statements whatever their number; a connector no delivery
        reached yet has zero counts."""
        if not push_gap_after:
            return {}
        deliveries = tables.webhook_deliveries
        names = sorted(push_gap_after)
        with self._store.read() as connection:
            rows = {
                row.connector: row
                for row in connection.execute(
                    sa.select(deliveries).where(
                        deliveries.c.tenant_id == tenant_id, deliveries.c.connector.in_(names)
                    )
                )
            }
            reads = _reads_since_accepted(connection, tenant_id, names)
        states = {}
        for name in names:
            row = rows.get(name)
            accepted = row.last_accepted_at if row is not None else None
            gap = push_gap(accepted, reads.get(name), now=now, after=push_gap_after[name])
            states[name] = WebhookState(
                stored=row.stored if row is not None else 0,
                duplicate=row.duplicate if row is not None else 0,
                revised=row.revised if row is not None else 0,
                ignored=row.ignored if row is not None else 0,
                refused=row.refused if row is not None else 0,
                last_delivery_at=row.last_delivery_at if row is not None else None,
                last_accepted_at=accepted,
                last_stored_at=row.last_stored_at if row is not None else None,
                last_refused_at=row.last_refused_at if row is not None else None,
                last_refusal=row.last_refusal if row is not None else None,
                last_refusal_status=row.last_refusal_status if row is not None else None,
                push_gap_after_seconds=push_gap_after[name].total_seconds(),
                push_gap=gap,
            )
        return states

    @staticmethod
    def forget(connection: Connection, tenant_id: str, connector: str) -> int:
        """Delete the connector's counts in the caller's transaction (forgetting the
        connector); return how many rows went (0 or 1)."""
        deliveries = tables.webhook_deliveries
        deleted = connection.execute(
            deliveries.delete().where(
                deliveries.c.tenant_id == tenant_id, deliveries.c.connector == connector
            )
        )
        return int(deleted.rowcount)


def _is_newer(
    new: sa.ColumnElement[datetime], kept: sa.ColumnElement[datetime]
) -> sa.ColumnElement[bool]:
    return sa.and_(new.is_not(None), sa.or_(kept.is_(None), new >= kept))


def _latest(
    new: sa.ColumnElement[datetime], kept: sa.ColumnElement[datetime]
) -> sa.ColumnElement[object]:
    # GREATEST and SQLite's max() disagree on NULL: spelled out so both keep a moment.
    return sa.case((_is_newer(new, kept), new), else_=kept)


def _reads_since_accepted(
    connection: Connection, tenant_id: str, connectors: list[str]
) -> dict[str, ReadsSince]:
    """Per connector, the re-reads that found new records after its last accepted
    delivery (before the first one: after its first run); one grouped statement."""
    deliveries = tables.webhook_deliveries
    first_run = _runs.alias("first_run")
    first_started = (
        sa.select(sa.func.min(first_run.c.started_at))
        .where(
            first_run.c.tenant_id == _runs.c.tenant_id,
            first_run.c.connector == _runs.c.connector,
            first_run.c.kind != RunKind.BACKFILL.value,
        )
        .scalar_subquery()
    )
    since = sa.func.coalesce(deliveries.c.last_accepted_at, first_started)
    found = _runs.c.created + _runs.c.revised
    query = (
        sa.select(
            _runs.c.connector,
            sa.func.count().label("runs"),
            sa.func.sum(found).label("new_records"),
            sa.func.min(_runs.c.started_at).label("first_at"),
        )
        .select_from(
            _runs.outerjoin(
                deliveries,
                sa.and_(
                    deliveries.c.tenant_id == _runs.c.tenant_id,
                    deliveries.c.connector == _runs.c.connector,
                ),
            )
        )
        .where(
            _runs.c.tenant_id == tenant_id,
            _runs.c.connector.in_(connectors),
            _runs.c.kind != RunKind.BACKFILL.value,
            found > 0,
            _runs.c.started_at > since,
        )
        .group_by(_runs.c.connector)
    )
    return {
        row.connector: ReadsSince(row.runs, int(row.new_records), row.first_at)
        for row in connection.execute(query)
    }
