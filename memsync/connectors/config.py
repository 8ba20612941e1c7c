"""Connector configuration: the pydantic models at the edge and the small value types
they validate into (durations, schedules, subject templates).

Every validation message starts with the field it is about, so the registry can print
"connector 'gh' in config/memsync.yaml: overlap 'soon' is not a duration (e.g. 2h, 30m,
7d)" without guessing.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    field_validator,
)
from pydantic_core import PydanticCustomError

from memsync.clock import utc

__all__ = [
    "ConnectorConfig",
    "Duration",
    "RetrySettings",
    "Schedule",
    "ScheduleSpec",
    "SubjectTemplate",
    "SubjectTemplateError",
    "SubjectTemplateField",
    "format_duration",
    "parse_duration",
    "parse_schedule",
]

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


def _validate_duration(value: object, info: object) -> timedelta:
    field = getattr(info, "field_name", None) or "duration"
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        try:
            return parse_duration(value, field=field)
        except ValueError as error:
            raise PydanticCustomError("duration", str(error)) from None
    raise PydanticCustomError(
        "duration", "{field} {value!r} is not a duration (e.g. 2h, 30m, 7d)", {"field": field}
    )


Duration = Annotated[
    timedelta,
    PlainValidator(_validate_duration),
    PlainSerializer(format_duration, return_type=str),
]
"""A ``timedelta`` written in config as ``2h``, ``30m``, ``7d``."""


# --- schedules -----------------------------------------------------------------------------

_CRON_FIELDS: tuple[tuple[str, int, int], ...] = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
_CRON_NAMES = re.compile(
    r"jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec|mon|tue|wed|thu|fri|sat|sun"
)
_CRON_ITEM = re.compile(r"(\*|\d+|[a-z]{3})(?:-(\d+|[a-z]{3}))?(?:/(\d+))?")


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A validated schedule: a 5-field cron expression, a fixed interval, or ``manual``
    (never scheduled: only ``memsync sync``, backfills and API calls run it).

    ``expression`` is the text as configured; ``interval`` is set only for ``every …``.
    The runtime hands cron expressions to its scheduler as they are.
    """

    kind: Literal["cron", "interval", "manual"]
    expression: str
    interval: timedelta | None = None

    def __str__(self) -> str:
        return self.expression


def _check_cron_field(name: str, low: int, high: int, text: str) -> None:
    for item in text.split(","):
        match = _CRON_ITEM.fullmatch(item)
        if match is None:
            raise ValueError(f"schedule: {name} field '{text}' is not valid cron")
        for bound in match.group(1), match.group(2):
            if bound is None or bound == "*":
                continue
            if bound.isdigit():
                if not low <= int(bound) <= high:
                    raise ValueError(
                        f"schedule: {name} value {bound} is outside {low}-{high} in '{text}'"
                    )
            elif not _CRON_NAMES.fullmatch(bound):
                raise ValueError(f"schedule: {name} field '{text}' is not valid cron")
        if match.group(3) is not None and int(match.group(3)) == 0:
            raise ValueError(f"schedule: {name} step 0 in '{text}' never fires")


def parse_schedule(text: str) -> ScheduleSpec:
    """Parse ``every 15m`` (any :func:`parse_duration` value), a 5-field cron expression,
    or ``manual``."""
    expression = " ".join(text.split())
    lowered = expression.lower()
    if lowered == "manual":
        return ScheduleSpec(kind="manual", expression=lowered)
    if lowered.startswith("every "):
        interval = parse_duration(lowered.removeprefix("every "), field="schedule interval")
        if interval <= timedelta(0):
            raise ValueError(f"schedule '{text}' must be a positive interval")
        return ScheduleSpec(kind="interval", expression=expression, interval=interval)
    fields = lowered.split(" ")
    if len(fields) != len(_CRON_FIELDS):
        raise ValueError(
            f"schedule '{text}' is neither 'every <duration>' (e.g. every 15m), a "
            "5-field cron expression (e.g. '0 3 * * *') nor 'manual'"
        )
    for (name, low, high), value in zip(_CRON_FIELDS, fields, strict=True):
        _check_cron_field(name, low, high, value)
    return ScheduleSpec(kind="cron", expression=expression)


def _validate_schedule(value: object) -> ScheduleSpec:
    if isinstance(value, ScheduleSpec):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError("schedule", "schedule must be a string such as 'every 15m'")
    try:
        return parse_schedule(value)
    except ValueError as error:
        raise PydanticCustomError("schedule", str(error)) from None


Schedule = Annotated[
    ScheduleSpec,
    PlainValidator(_validate_schedule),
    PlainSerializer(str, return_type=str),
]
"""A :class:`ScheduleSpec` written in config as ``every 15m``, ``0 3 * * *`` or ``manual``."""


# --- subject templates ---------------------------------------------------------------------

SubjectTemplateField = str | int | float | bool | None
"""A value a record offers to a subject template."""


class SubjectTemplateError(ValueError):
    """A subject template names a field the record does not have (or has empty)."""


@dataclass(frozen=True, slots=True)
class SubjectTemplate:
    """A subject id template such as ``org:{organization_id}`` or a fixed ``team:support``.

    Only plain ``{name}`` placeholders are allowed: no format specs, conversions,
    attribute or index access, so a template can never reach into a record's internals.
    """

    text: str

    def __post_init__(self) -> None:
        if not self.text.strip():
            raise ValueError("subject must not be empty")
        try:
            parsed = list(string.Formatter().parse(self.text))
        except ValueError as error:
            raise ValueError(f"subject template '{self.text}' is malformed: {error}") from None
        for _literal, name, spec, conversion in parsed:
            if name is None:
                continue
            if not name.isidentifier() or spec or conversion:
                raise ValueError(
                    f"subject template '{self.text}': placeholder '{{{name}}}' must be a plain "
                    "field name such as {organization_id}"
                )

    @property
    def fields(self) -> frozenset[str]:
        """The record fields this template reads."""
        return frozenset(
            name for _, name, _, _ in string.Formatter().parse(self.text) if name is not None
        )

    def render(self, values: Mapping[str, SubjectTemplateField]) -> str:
        """Fill the placeholders from ``values``.

        A missing field or a ``None`` value raises :class:`SubjectTemplateError` naming
        the template and the field: an empty subject would silently merge unrelated
        records into one subject.
        """
        for name in sorted(self.fields):
            if name not in values:
                offered = ", ".join(sorted(values)) or "none"
                raise SubjectTemplateError(
                    f"subject template '{self.text}' needs field '{name}', which the record "
                    f"does not have (fields offered: {offered})"
                )
            if values[name] is None or values[name] == "":
                raise SubjectTemplateError(
                    f"subject template '{self.text}' needs field '{name}', which is empty on "
                    "this record"
                )
        return self.text.format_map({name: values[name] for name in self.fields})

    def __str__(self) -> str:
        return self.text


def _validate_subject(value: object) -> SubjectTemplate:
    if isinstance(value, SubjectTemplate):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError("subject", "subject must be a string such as 'org:{{id}}'")
    try:
        return SubjectTemplate(value)
    except ValueError as error:
        raise PydanticCustomError("subject", str(error)) from None


SubjectTemplateValue = Annotated[
    SubjectTemplate,
    PlainValidator(_validate_subject),
    PlainSerializer(str, return_type=str),
]


# --- the common config model ---------------------------------------------------------------


class RetrySettings(BaseModel):
    """How long a connector keeps retrying one request before giving up.

    ``max_attempts`` counts every request, the first included; ``max_wait`` caps the sum
    of all waits for one request. Whichever is reached first ends the retrying.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_attempts: int = Field(default=5, ge=1, le=50)
    max_wait: Duration = timedelta(minutes=10)


class ConnectorConfig(BaseModel):
    """What every connector instance is configured with; connectors subclass it.

    ``name`` identifies the instance (unique across a config file); ``type`` selects
    the connector class; ``subject`` is the template the subject id is rendered from;
    ``overlap`` is how far each window reaches back before the cursor, so a record
    updated while the previous run was reading is read again (ingest recognises it);
    ``start`` is where the first run (and a backfill) begins; ``tenant`` is the tenant
    the instance's episodes, cursor and run records belong to.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: str
    subject: SubjectTemplateValue
    schedule: Schedule = parse_schedule("every 15m")
    overlap: Duration = timedelta(hours=2)
    start: datetime | None = None
    base_url: str | None = None
    retry: RetrySettings = RetrySettings()
    # The same alphabet the API accepts in X-Tenant-ID, so a synced tenant is reachable.
    tenant: str = Field(default="default", pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")

    @field_validator("name")
    @classmethod
    def _name_is_a_slug(cls, value: str) -> str:
        # Names end up in keys, file names and URLs, so keep them to a safe alphabet.
        if not re.fullmatch(r"[a-z0-9][a-z0-9_.-]{0,63}", value):
            raise ValueError(
                f"name '{value}' must be 1-64 lowercase letters, digits, '-', '_' or '.', "
                "starting with a letter or digit"
            )
        return value

    @field_validator("start", mode="before")
    @classmethod
    def _start_is_utc(cls, value: object) -> object:
        # A bare date means midnight UTC; a naive datetime is taken to be UTC, as
        # everywhere else in memsync.
        if isinstance(value, date) and not isinstance(value, datetime):
            return datetime.combine(value, time(0), tzinfo=UTC)
        if isinstance(value, str) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value.strip()):
            return datetime.combine(date.fromisoformat(value.strip()), time(0), tzinfo=UTC)
        return value

    @field_validator("start")
    @classmethod
    def _start_aware(cls, value: datetime | None) -> datetime | None:
        return None if value is None else utc(value)

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"base_url '{value}' must start with http:// or https://")
        return value.rstrip("/")
