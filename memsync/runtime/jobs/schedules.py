"""Schedules: triggers from the configuration that only ever enqueue jobs.

A schedule is a crontab line (read in its time zone) or ``every 15m``, whose ticks are
counted from the Unix epoch so every replica computes the same fire times. Which
schedules exist (the nightly compile, one sync per connector) is the application's
choice, and so is what a tick of each job kind enqueues: it registers one
:data:`TickAction` per kind with the :class:`ScheduleFirer`.

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
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger

from memsync.clock import Clock, SystemClock, utc
from memsync.runtime.jobs.queue import JobQueue
from memsync.schedule import parse_schedule
from memsync.stopping import Sleeper

__all__ = ["Schedule", "ScheduleFirer", "Scheduler", "TickAction", "enqueue_target", "fire_key"]


logger = logging.getLogger("memsync.scheduler")


@dataclass(frozen=True, slots=True)
class Schedule:
    """A configured schedule: its stable id, the job kind it enqueues, and when.

    ``expression`` is a crontab line (read in ``timezone``) or ``every <duration>``.
    ``target`` is the (tenant, target) a tick enqueues a job for, when the schedule
    has one (a connector's sync); a schedule without one leaves the targets to its
    kind's :data:`TickAction` (the nightly compile finds them in the store).
    """

    id: str
    job_kind: str
    expression: str
    timezone: str = "UTC"
    target: tuple[str, str] | None = None

    def trigger(self) -> BaseTrigger:
        """When it fires; ``ValueError`` for a manual schedule, which never does."""
        spec = parse_schedule(self.expression)
        if spec.kind == "manual":
            raise ValueError(f"schedule {self.id!r} is manual: it never fires")
        return spec.trigger(self.timezone)

    def next_fire_time(self, now: datetime) -> datetime | None:
        """The first scheduled fire time after ``now`` (None: it never fires again)."""
        moment = self.trigger().get_next_fire_time(None, now + timedelta(microseconds=1))
        return utc(moment) if moment is not None else None

    def latest_fire_time(self, now: datetime, lookback: timedelta) -> datetime | None:
        """The last scheduled fire time in ``(now - lookback, now]``, or None."""
        trigger = self.trigger()
        latest = None
        moment = trigger.get_next_fire_time(None, now - lookback)
        while moment is not None and moment <= now:
            latest = moment
            moment = trigger.get_next_fire_time(moment, moment + timedelta(microseconds=1))
        return utc(latest) if latest is not None else None


def fire_key(schedule_id: str, fire_time: datetime) -> str:
    return f"{schedule_id}@{utc(fire_time).isoformat()}"


TickAction = Callable[["Schedule", datetime, str, str], int]
"""Enqueues the jobs of one tick: ``(schedule, now, trigger, dedup_key)`` → how many
are new. It must pass ``dedup_key`` on to every job it enqueues, so that a tick fired
again enqueues nothing new."""


def enqueue_target(queue: JobQueue) -> TickAction:
    """The tick action of a schedule that names its target: one job of its kind."""

    def enqueue(schedule: Schedule, now: datetime, trigger: str, dedup_key: str) -> int:
        if schedule.target is None:
            raise ValueError(
                f"schedule {schedule.id!r}: cannot enqueue jobs of kind "
                f"{schedule.job_kind!r} without a target"
            )
        return queue.enqueue_many(
            schedule.job_kind, [schedule.target], now=now, trigger=trigger, dedup_key=dedup_key
        )

    return enqueue


class ScheduleFirer:
    """Turns one tick of a schedule into jobs, through the action of its job kind."""

    def __init__(self, actions: Mapping[str, TickAction]) -> None:
        self._actions = dict(actions)

    def fire(self, schedule: Schedule, fire_time: datetime, *, now: datetime) -> int:
        """Enqueue the jobs of ``schedule``'s tick at ``fire_time``; return how many are new.

        Repeats: firing the same (schedule, fire time) again, from this process or
        another replica, at the same moment or later, enqueues nothing new for the
        targets it already enqueued. Conflicts: a target with a pending job of the
        same kind coalesces into it (the tick is stamped on that job), so a connector
        whose sync is still waiting does not queue a second one. A kind no action is
        registered for raises ``ValueError``.
        """
        action = self._actions.get(schedule.job_kind)
        if action is None:
            raise ValueError(
                f"schedule {schedule.id!r}: no worker runs jobs of kind {schedule.job_kind!r}"
            )
        key = fire_key(schedule.id, fire_time)
        return action(schedule, now, f"schedule:{schedule.id}", key)


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
            logger.exception(
                "schedule firing failed",
                extra={"schedule": schedule.id, "fire_time": fire_time.isoformat()},
            )
            return
        logger.info(
            "schedule fired",
            extra={"schedule": schedule.id, "fire_time": fire_time.isoformat(), "jobs": created},
        )

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
        """Stop firing; a firing in progress (a few inserts) is finished first."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=True)

    def run(self, stop: Sleeper) -> None:
        """:meth:`start`, fire until a stop is requested on ``stop``, :meth:`shutdown`."""
        self.start()
        try:
            stop.wait(math.inf)
        finally:
            self.shutdown()
