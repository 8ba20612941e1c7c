"""The times memsync can compute with, and the checks every given time passes.

A person or a client gives times in many places: a checkpoint (``state reset --to``,
``POST /v1/connectors/{name}/state/reset``), a backfill's ``--since``/``--until``, a
connector's ``start``, a schedule's interval, an overlap, a slice. Their ranges are
defined here, against what the code derives from them (a window starts at
``checkpoint - overlap``; a slice ends at ``start + slice``), with the checks the API,
the CLI and the runner share, so a bad value is refused where it is given, naming the
field and the range, instead of overflowing later in a run, a job or a request (see
docs/sync.md, "The times a sync may begin at"). The ``as_of`` and ``valid_at`` of a
read need only be moments UTC can hold (the API's ``Moment``, :func:`parse_time`): the
read path does no arithmetic on them.

Where a sync may begin (a checkpoint, a backfill, a ``start``) lies in
``[SOURCE_FLOOR, now]``: no service memsync reads holds data from before 1990 (Slack,
GitHub and Zendesk all began after 2005), and a time in the future would give empty
windows until it arrives. Such a time is refused, never clamped: a clamp would quietly
read something the person did not ask for. (A file can be stamped older, as
reproducible builds stamp 1980: a first sync without ``start`` reads a workspace from
the beginning anyway.)

Nothing here reads the clock: ``now`` is an argument.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

__all__ = [
    "MAX_BACKFILL_SLICES",
    "MAX_OVERLAP",
    "MAX_SLICE",
    "MAX_STEP",
    "SOURCE_FLOOR",
    "TimeOutOfRange",
    "check_backfill",
    "check_source_time",
    "check_step",
    "parse_time",
    "source_time_problem",
]

SOURCE_FLOOR = datetime(1990, 1, 1, tzinfo=UTC)
"""The earliest time a sync may begin at: before any source memsync reads holds data."""
MAX_OVERLAP = timedelta(days=366)
"""The longest overlap: a window reaching back more than a year re-reads a year."""
MAX_SLICE = timedelta(days=36_525)
"""The longest backfill slice: a century, so one slice may cover the whole range from
the floor to now, and its end (start + slice) never leaves the calendar."""
MAX_STEP = timedelta(days=366)
"""The longest ``every <duration>`` interval (a longer one never fires in practice)."""
MAX_BACKFILL_SLICES = 20_000
"""The most slices one backfill plans: 1990 to 2026 in daily slices is about 13,200.
Planning is one bounded insert, done in well under a second, so a signal during it is
honoured as soon as it ends."""


class TimeOutOfRange(ValueError):
    """A given time (or duration) lies outside the range memsync computes with.

    ``field`` names what was given (``to``, ``--since``, ``start``); the message names
    the field, the value and the range. The API answers 422, the CLI exits 2.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _shown(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


def _in_utc(field: str, value: datetime) -> datetime:
    """``value`` in UTC (naive: taken as UTC); refused when that overflows the calendar."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise TimeOutOfRange(
            field, f"{field} {value.isoformat()} lies outside the years 1 to 9999 in UTC"
        ) from None


def source_time_problem(moment: datetime, *, now: datetime, overlap: timedelta) -> str | None:
    """Why a sync cannot begin at ``moment`` (aware) and reach back ``overlap`` from it,
    or ``None``: it must lie in ``[SOURCE_FLOOR, now]``."""
    if moment < SOURCE_FLOOR:
        return f"is before {_shown(SOURCE_FLOOR)}, earlier than any source holds data"
    if moment > now:
        return f"is in the future (now is {_shown(now)})"
    if overlap > MAX_OVERLAP:
        return f"cannot reach back an overlap of {overlap} (at most {MAX_OVERLAP.days} days)"
    return None


def check_source_time(
    field: str, value: datetime, *, now: datetime, overlap: timedelta = timedelta(0)
) -> datetime:
    """``value`` in UTC when a sync may begin there (a checkpoint, a backfill's ends, a
    connector's ``start``), else :class:`TimeOutOfRange` naming ``field`` and the range
    ``[SOURCE_FLOOR, now]``. Never clamps."""
    moment = _in_utc(field, value)
    problem = source_time_problem(moment, now=now, overlap=overlap)
    if problem is not None:
        raise TimeOutOfRange(
            field,
            f"{field} {_shown(moment)} {problem}; give a time from {_shown(SOURCE_FLOOR)} "
            f"to now ({_shown(now)})",
        )
    return moment


def check_step(field: str, value: timedelta, longest: timedelta) -> timedelta:
    """``value`` when it is a positive duration of at most ``longest``, else
    :class:`TimeOutOfRange` naming ``field`` and the range."""
    if not timedelta(0) < value <= longest:
        raise TimeOutOfRange(
            field, f"{field} must be longer than 0s and at most {longest.days} days, not {value}"
        )
    return value


def check_backfill(
    since: datetime, until: datetime | None, slice_length: timedelta, *, now: datetime
) -> tuple[datetime, datetime | None]:
    """A backfill's ``since`` and ``until`` (``None``: now) in UTC when both lie in
    ``[SOURCE_FLOOR, now]``, ``since`` before the end, and the range makes at most
    :data:`MAX_BACKFILL_SLICES` slices of ``slice_length``; else
    :class:`TimeOutOfRange` naming the field."""
    check_step("--slice", slice_length, MAX_SLICE)
    start = check_source_time("--since", since, now=now)
    end = None if until is None else check_source_time("--until", until, now=now)
    if start >= (end or now):
        raise TimeOutOfRange(
            "--since",
            f"--since {_shown(start)} is not before the end of the backfill ({_shown(end or now)})",
        )
    slices = -(-((end or now) - start) // slice_length)
    if slices > MAX_BACKFILL_SLICES:
        raise TimeOutOfRange(
            "--slice",
            f"--since {_shown(start)} in slices of {slice_length} makes {slices:,} slices "
            f"(at most {MAX_BACKFILL_SLICES:,}): give a longer --slice or a later --since",
        )
    return start, end


def parse_time(text: str, field: str) -> datetime:
    """A date (midnight UTC) or an ISO 8601 datetime (naive: UTC) as written on a command
    line or in a file, in UTC; ``ValueError`` (:class:`TimeOutOfRange` when it is a
    time but not one UTC can hold) naming ``field`` otherwise."""
    value = text.strip()
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), time(0), tzinfo=UTC)
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{field} '{text}' is not a date (e.g. 2026-01-31 or 2026-01-31T12:00:00Z)"
        ) from None
    return _in_utc(field, moment)
