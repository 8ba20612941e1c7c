"""Connector configuration: the pydantic models at the edge and the small value types
they validate into (durations, schedules, subject templates).

Every validation message starts with the field it is about, so the registry can print
"connector 'gh' in config/memsync.yaml: overlap 'soon' is not a duration (e.g. 2h, 30m,
7d)" without guessing.
"""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SecretStr,
    field_validator,
)
from pydantic_core import PydanticCustomError

from memsync.clock import utc
from memsync.connectors.label_rules import LabelRuleSetting
from memsync.fields import empty_list
from memsync.retry import RetryPolicy
from memsync.schedule import ScheduleSpec, format_duration, parse_duration, parse_schedule
from memsync.timerange import MAX_OVERLAP, SOURCE_FLOOR

__all__ = [
    "ConnectorConfig",
    "Duration",
    "LabelRuleSetting",
    "RetrySettings",
    "ScheduleSetting",
    "ScheduleSpec",
    "SubjectTemplate",
    "SubjectTemplateError",
    "SubjectTemplateField",
    "did_you_mean",
    "format_duration",
    "parse_duration",
    "parse_schedule",
]


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


def _validate_schedule(value: object) -> ScheduleSpec:
    if isinstance(value, ScheduleSpec):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError("schedule", "schedule must be a string such as 'every 15m'")
    try:
        return parse_schedule(value)
    except ValueError as error:
        raise PydanticCustomError("schedule", str(error)) from None


ScheduleSetting = Annotated[
    ScheduleSpec,
    PlainValidator(_validate_schedule),
    PlainSerializer(str, return_type=str),
]
"""A :class:`ScheduleSpec` written in config as ``every 15m``, ``0 3 * * *`` or ``manual``."""


def did_you_mean(
    name: str, known: list[str] | tuple[str, ...], otherwise: str = " (check the spelling)"
) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to a misspelled ``name``,
    else ``otherwise``."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else otherwise


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

    def policy(self) -> RetryPolicy:
        """The retry policy these settings ask for (default backoff: 1 s doubling, at
        most 1 min between attempts)."""
        return RetryPolicy(max_attempts=self.max_attempts, max_wait=self.max_wait)


class WebhookSettings(BaseModel):
    """Where a connector also takes pushed deliveries (``POST /v1/webhooks/{name}``):
    ``secret`` is the signing secret the vendor was given (write it as ``${VAR}``), a
    ``SecretStr`` never shown in reprs, logs or messages; ``push_gap_after`` is how long
    the scheduled re-reads may keep finding new records with no delivery accepted
    before the connector's state flags a push gap (its webhook looks broken).

    ``rate_limit`` (deliveries a second) and ``burst`` bound what one serving process
    takes for the connector (a token bucket: ``burst`` at once, refilled at
    ``rate_limit``); a delivery over it is answered 429 with ``Retry-After`` (Slack
    retries it; GitHub redelivers only by hand), and the scheduled re-read finds its
    record either way. Per process: ``serve --processes N`` takes up to N times it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: SecretStr = Field(min_length=1)
    # Four runs of the default schedule: one slow delivery is not a gap, an hour is.
    push_gap_after: Duration = timedelta(hours=1)
    rate_limit: float = Field(default=50.0, gt=0, allow_inf_nan=False)
    burst: int = Field(default=100, ge=1)

    @field_validator("push_gap_after")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("push_gap_after must be longer than 0 (e.g. 1h)")
        return value


class ConnectorConfig(BaseModel):
    """What every connector instance is configured with; connectors subclass it.

    ``name`` identifies the instance (unique across a config file); ``type`` selects
    the connector class; ``subject`` is the template the subject id is rendered from;
    ``overlap`` is how far each window reaches back before the cursor, so a record
    updated while the previous run was reading is read again (ingest recognises it);
    ``start`` is where the first run (and a backfill) begins; ``tenant`` is the tenant
    the instance's episodes, cursor and run records belong to; ``labels`` are rules
    that give its episodes sensitivity labels (every matching rule adds its labels).
    """

    # Built on first validation, not at import: each connector type's model (which
    # inherits this) is validated only when a configuration names the type, and
    # listing the types validates none.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str
    type: str
    subject: SubjectTemplateValue
    schedule: ScheduleSetting = parse_schedule("every 15m")
    overlap: Duration = timedelta(hours=2)
    start: datetime | None = None
    base_url: str | None = None
    retry: RetrySettings = RetrySettings()
    # The same alphabet the API accepts in X-Tenant-ID, so a synced tenant is reachable.
    tenant: str = Field(default="default", pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
    labels: list[LabelRuleSetting] = Field(default_factory=empty_list)

    #: Pushed deliveries (a connector type with a webhook receiver only); ``None``: the
    #: webhook endpoint answers 404 for this connector.
    webhook: WebhookSettings | None = None

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
    def _start_in_range(cls, value: datetime | None) -> datetime | None:
        # Whether it is in the future is decided when a run reads from it (nothing
        # here reads the clock); the floor and the calendar are decided now.
        if value is None:
            return None
        try:
            moment = utc(value)
        except OverflowError:
            raise ValueError(
                f"start '{value.isoformat()}' lies outside the years 1 to 9999 in UTC"
            ) from None
        if moment < SOURCE_FLOOR:
            raise ValueError(
                f"start '{moment.isoformat()}' is before {SOURCE_FLOOR.date().isoformat()}, "
                "earlier than any source holds data"
            )
        return moment

    @field_validator("overlap")
    @classmethod
    def _overlap_in_range(cls, value: timedelta) -> timedelta:
        # A window starts at checkpoint - overlap: bounded, it never leaves the calendar.
        if value > MAX_OVERLAP:
            raise ValueError(
                f"overlap '{format_duration(value)}' is longer than {MAX_OVERLAP.days} days"
            )
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url_is_http(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"base_url '{value}' must start with http:// or https://")
        return value.rstrip("/")

    def stream_names(self) -> tuple[str, ...] | None:
        """The names of the streams a connector of this configuration reads, in the
        order it reads them, when the configuration alone says them: what the built
        connector's ``streams()`` names. ``None`` (the default): only the connector
        knows, and it is built to ask. ``memsync state show`` lists a connector's
        streams through this, so a type that answers here is not imported to be shown.
        A type overrides this only where its streams follow from its fields; the
        connectors' tests hold the two answers equal."""
        return None
