"""Schedules and durations as people write them in configuration.

One parser serves every schedule in memsync, a connector's ``schedule`` and
``jobs.nightly_compile`` alike: ``every <duration>``, ``manual``, or a 5-field crontab
line, which APScheduler's ``CronTrigger`` parses — the same class that later fires it,
so a schedule that validates is one the scheduler can run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Literal
from zoneinfo import ZoneInfo

from memsync.timerange import MAX_STEP

if TYPE_CHECKING:
    from apscheduler.triggers.base import BaseTrigger

__all__ = ["ScheduleSpec", "format_duration", "parse_duration", "parse_schedule"]

_DURATION_UNITS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
_DURATION_PART = re.compile(r"(\d+)([wdhms])")
_DURATION_WHOLE = re.compile(r"(?:\d+[wdhms])+")


def parse_duration(text: str, *, field: str = "duration") -> timedelta:
    """Parse ``2h``, ``30m``, ``7d``, ``1w``, ``45s`` or a sum such as ``1h30m``.

    Raises ``ValueError`` naming ``field`` and the bad value otherwise.
    """
    compact = text.strip().replace(" ", "").lower()
    if not _DURATION_WHOLE.fullmatch(compact):
        raise ValueError(f"{field} '{text}' is not a duration (e.g. 2h, 30m, 7d)")
    seconds = sum(
        int(amount) * _DURATION_UNITS[unit] for amount, unit in _DURATION_PART.findall(compact)
    )
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """Render a duration the way :func:`parse_duration` reads it (``1h30m``; ``0s``)."""
    remaining = int(value.total_seconds())
    parts: list[str] = []
    for unit, size in _DURATION_UNITS.items():
        amount, remaining = divmod(remaining, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or "0s"


# Interval schedules tick at epoch + k * interval, whoever computes them, so every
# replica of a scheduler agrees on the fire times.
_INTERVAL_ORIGIN = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A validated schedule: a 5-field cron expression, a fixed interval, or ``manual``
    (never scheduled: only ``memsync sync``, backfills and API calls run it).

    ``expression`` is the text as configured; ``interval`` is set only for ``every …``.
    """

    kind: Literal["cron", "interval", "manual"]
    expression: str
    interval: timedelta | None = None

    def __str__(self) -> str:
        return self.expression

    def trigger(self, timezone: str = "UTC") -> BaseTrigger:
        """The APScheduler trigger that fires this schedule; a cron line is read in
        ``timezone``. Raises ``ValueError`` for ``manual``, which never fires."""
        if self.kind == "manual":
            raise ValueError("a manual schedule never fires")
        from apscheduler.triggers.cron import CronTrigger
        from apscheduler.triggers.interval import IntervalTrigger

        if self.interval is not None:
            return IntervalTrigger(
                seconds=int(self.interval.total_seconds()),
                start_date=_INTERVAL_ORIGIN,
                timezone=ZoneInfo("UTC"),
            )
        return CronTrigger.from_crontab(self.expression, timezone=ZoneInfo(timezone))


def parse_schedule(text: str) -> ScheduleSpec:
    """Parse ``every 15m`` (any :func:`parse_duration` value), a 5-field crontab line
    (minute hour day month weekday, e.g. ``0 3 * * *``), or ``manual``.

    Raises ``ValueError`` saying what is wrong and what is expected.
    """
    expression = " ".join(text.split())
    lowered = expression.lower()
    if lowered == "manual":
        return ScheduleSpec(kind="manual", expression=lowered)
    if lowered.startswith("every "):
        interval = parse_duration(lowered.removeprefix("every "), field="schedule interval")
        if not timedelta(0) < interval <= MAX_STEP:
            raise ValueError(
                f"schedule '{text}' must be a positive interval of at most {MAX_STEP.days} days"
            )
        return ScheduleSpec(kind="interval", expression=expression, interval=interval)
    if len(lowered.split(" ")) != 5:
        raise ValueError(
            f"schedule '{text}' is neither 'every <duration>' (e.g. every 15m), a "
            "5-field crontab line (e.g. '0 3 * * *') nor 'manual'"
        )
    # Only a crontab line needs APScheduler (its import is a fair part of a short
    # command's start-up).
    from apscheduler.triggers.cron import CronTrigger

    try:
        CronTrigger.from_crontab(lowered, timezone=ZoneInfo("UTC"))
    except ValueError as error:
        raise ValueError(
            f"schedule '{text}' is not a valid crontab line "
            f"(minute hour day month weekday, e.g. '0 3 * * *'): {error}"
        ) from None
    return ScheduleSpec(kind="cron", expression=expression)
