"""Reading API bodies: small, strict converters shared by the built-in connectors.

Every converter names the source and the field in its error, and raises
:class:`~memsync.connectors.errors.StopRun`: a body that does not have the shape the
API documents means a wrong ``base_url`` or an API change, which retrying cannot fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from memsync.connectors.errors import StopRun

__all__ = ["dig", "optional_int", "optional_str", "parse_iso_time", "required_int"]


def parse_iso_time(value: object, what: str, *, source: str) -> datetime:
    """An ISO 8601 time (``Z`` allowed) as an aware datetime; a naive one is taken as UTC."""
    if not isinstance(value, str):
        raise StopRun(f"{source}: {what} is {value!r}, expected an ISO 8601 time")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise StopRun(f"{source}: {what} {value!r} is not an ISO 8601 time") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def optional_int(value: object) -> int | None:
    """``value`` if it is an integer (``bool`` is not), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def optional_str(value: object) -> str | None:
    """``value`` if it is a non-empty string, else ``None``."""
    return value if isinstance(value, str) and value else None


def required_int(data: Mapping[str, Any], field: str, what: str, *, source: str) -> int:
    """``data[field]`` as an integer, or :class:`StopRun` naming the source and field."""
    value = optional_int(data.get(field))
    if value is None:
        raise StopRun(f"{source}: {what} has no integer '{field}': {data.get(field)!r}")
    return value


_MISSING = object()


def dig(body: object, path: str) -> Any:
    """The value at dotted ``path`` in ``body`` (``""`` is the body itself), or ``None``
    when a step is missing. A numeric step indexes a list."""
    value: object = body
    for step in path.split(".") if path else ():
        if isinstance(value, Mapping):
            value = value.get(step, _MISSING)
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return None
        if value is _MISSING:
            return None
    return value
