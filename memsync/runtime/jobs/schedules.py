"""Schedules: triggers from the configuration that only ever enqueue jobs.

Two kinds come from the configuration: the nightly compile (``jobs.nightly_compile``,
a crontab line in ``jobs.timezone``), and one sync schedule per connector (its
``schedule``: a crontab line, or ``every 15m``, whose ticks are counted from the Unix
epoch so every replica computes the same fire times).

The decision of a tick is :meth:`ScheduleFirer.fire` (the schedule and the scheduled
fire time): a pure-ish, idempotent function of the store that tests call directly
with any time they like. The jobs of a tick carry the dedup key
``<schedule id>@<fire time, UTC ISO>``, unique per target, so any number of
scheduler replicas firing the same tick enqueue it once.

APScheduler 3 (:class:`Scheduler`) only decides *when*. Schedules are rebuilt from
the configuration at every start, with stable ids. Misfire policy: a tick missed
while no scheduler ran is coalesced into one run when a scheduler starts, if it is
within ``misfire_grace_seconds`` (older ticks are skipped; the next tick catches up
anyway, since compile takes whatever is uncompiled and a sync reads from its cursor).
A tick that is merely late while the scheduler runs is handled the same way by
APScheduler (coalesce=True).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from memsync.clock import Clock, SystemClock, utc
from memsync.connectors.config import ConnectorConfig, parse_schedule
from memsync.runtime.config import JobsSettings
from memsync.runtime.jobs.queue import COMPILE, SYNC, JobQueue
from memsync.runtime.jobs.triggers import enqueue_uncompiled
from memsync.runtime.storage.engine import Store

__all__ = [
    "NIGHTLY_COMPILE",
    "Schedule",
    "ScheduleFirer",
    "Scheduler",
    "fire_key",
    "schedules_from_settings",
    "sync_schedule_id",
]

NIGHTLY_COMPILE = "nightly-compile"
# Interval schedules tick at epoch + k * interval, whoever computes them.
_INTERVAL_ORIGIN = datetime(1970, 1, 1, tzinfo=UTC)

logger = logging.getLogger("memsync.scheduler")


@dataclass(frozen=True, slots=True)
class Schedule:
    """A configured schedule: its stable id, the job kind it enqueues, and when.

    ``expression`` is a crontab line (read in ``timezone``) or ``every <duration>``.
    ``target`` is the (tenant, connector) a sync schedule runs; a compile schedule
    has none (it compiles every subject with uncompiled episodes).
    """

    id: str
    job_kind: str
    expression: str
    timezone: str = "UTC"
    target: tuple[str, str] | None = None

    def trigger(self) -> BaseTrigger:
        spec = parse_schedule(self.expression)
        if spec.kind == "manual":
            raise ValueError(f"schedule {self.id!r} is manual: it never fires")
        if spec.interval is not None:
            return IntervalTrigger(
                seconds=int(spec.interval.total_seconds()),
                start_date=_INTERVAL_ORIGIN,
                timezone=ZoneInfo("UTC"),
            )
        return CronTrigger.from_crontab(spec.expression, timezone=ZoneInfo(self.timezone))

    def latest_fire_time(self, now: datetime, lookback: timedelta) -> datetime | None:
        """The last scheduled fire time in ``(now - lookback, now]``, or None."""
        trigger = self.trigger()
        latest = None
        moment = trigger.get_next_fire_time(None, now - lookback)
        while moment is not None and moment <= now:
            latest = moment
            moment = trigger.get_next_fire_time(moment, moment + timedelta(microseconds=1))
        return utc(latest) if latest is not None else None


def sync_schedule_id(connector: ConnectorConfig) -> str:
    return f"sync:{connector.tenant}:{connector.name}"


def schedules_from_settings(
    settings: JobsSettings, connectors: Sequence[ConnectorConfig] = ()
) -> list[Schedule]:
    """The schedules the configuration asks for: the nightly compile (if set) and one
    sync schedule per connector whose schedule is not ``manual``. Ids are stable across
    restarts and replicas."""
    schedules = []
    if settings.nightly_compile:
        schedules.append(
            Schedule(NIGHTLY_COMPILE, COMPILE, settings.nightly_compile, settings.timezone)
        )
    schedules.extend(
        Schedule(
            sync_schedule_id(connector),
            SYNC,
            str(connector.schedule),
            settings.timezone,
            target=(connector.tenant, connector.name),
        )
        for connector in connectors
        if connector.schedule.kind != "manual"
    )
    return schedules


def fire_key(schedule_id: str, fire_time: datetime) -> str:
    return f"{schedule_id}@{utc(fire_time).isoformat()}"


class ScheduleFirer:
    """Turns one tick of a schedule into jobs."""

    def __init__(self, store: Store, queue: JobQueue) -> None:
        self._store = store
        self._queue = queue

    def fire(self, schedule: Schedule, fire_time: datetime, *, now: datetime) -> int:
        """Enqueue the jobs of ``schedule``'s tick at ``fire_time``; return how many are new.

        Repeats: firing the same (schedule, fire time) again, from this process or
        another replica, at the same moment or later, enqueues nothing new for the
        targets it already enqueued. Conflicts: a target with a pending job of the
        same kind coalesces into it (the tick is stamped on that job), so a connector
        whose sync is still waiting does not queue a second one.
        """
        trigger = f"schedule:{schedule.id}"
        key = fire_key(schedule.id, fire_time)
        if schedule.job_kind == COMPILE:
            return enqueue_uncompiled(
                self._store, self._queue, now=now, trigger=trigger, dedup_key=key
            )
        if schedule.job_kind == SYNC and schedule.target is not None:
            return self._queue.enqueue_many(
                SYNC, [schedule.target], now=now, trigger=trigger, dedup_key=key
            )
        raise ValueError(
            f"schedule {schedule.id!r}: no worker runs jobs of kind {schedule.job_kind!r}"
            + (" without a target" if schedule.job_kind == SYNC else "")
        )


class Scheduler:
    """APScheduler 3 running the schedules in a background thread; it only enqueues."""

    def __init__(
        self,
        firer: ScheduleFirer,
        schedules: list[Schedule],
        *,
        misfire_grace: timedelta = timedelta(hours=1),
        clock: Clock | None = None,
    ) -> None:
        self._firer = firer
        self._schedules = schedules
        self._grace = misfire_grace
        self._clock = clock or SystemClock()
        self._scheduler = BackgroundScheduler(timezone=ZoneInfo("UTC"))

    def _fire_latest(self, schedule: Schedule) -> None:
        # APScheduler does not hand the scheduled time to the job; with coalesce=True a
        # run stands for the latest due tick, which is this one.
        now = self._clock.now()
        fire_time = schedule.latest_fire_time(now, self._grace)
        if fire_time is None:
            return
        try:
            created = self._firer.fire(schedule, fire_time, now=now)
        except Exception:
            logger.exception("schedule %s: firing %s failed", schedule.id, fire_time)
            return
        logger.info("schedule %s fired %s: %d new jobs", schedule.id, fire_time, created)

    def start(self) -> None:
        """Catch up the latest missed tick of each schedule, then start firing."""
        for schedule in self._schedules:
            self._fire_latest(schedule)
            self._scheduler.add_job(
                self._fire_latest,
                schedule.trigger(),
                args=[schedule],
                id=schedule.id,
                name=schedule.id,
                replace_existing=True,
                coalesce=True,
                max_instances=1,
                misfire_grace_time=int(self._grace.total_seconds()),
            )
        self._scheduler.start()

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)
