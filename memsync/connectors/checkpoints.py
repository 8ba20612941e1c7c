"""Where a sync stands: the :class:`Window` a fetch covers and the :class:`Cursor` a
stream's checkpoint holds, with the stream names' defaults.

Apart from :mod:`.base` (which offers them to connector authors too) because the run
records, the schema and ``memsync state show`` need these and none of a connector's
contract: a command that only reads the store imports no connector machinery.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

__all__ = ["DEFAULT_STREAM", "STREAM_NAME_LENGTH", "Cursor", "Window", "require_aware"]

DEFAULT_STREAM = "records"
"""The name of the one stream of a connector that does not declare streams."""

STREAM_NAME_LENGTH = 255
"""The longest stream name (the checkpoint table's key column is this wide)."""


def require_aware(moment: datetime, what: str) -> datetime:
    """``moment`` itself; ``ValueError`` naming ``what`` if it is naive."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{what} must be an aware datetime, got naive {moment.isoformat()}")
    return moment


@dataclass(frozen=True, slots=True)
class Window:
    """The time range a fetch covers: records updated in ``[start, end]``.

    ``start`` ``None`` means "from the beginning" (a first run or a full backfill).
    Both bounds are aware datetimes; ``start`` never lies after ``end``.
    """

    start: datetime | None
    end: datetime

    def __post_init__(self) -> None:
        require_aware(self.end, "Window.end")
        if self.start is not None:
            require_aware(self.start, "Window.start")
            if self.start > self.end:
                raise ValueError(
                    f"Window.start {self.start.isoformat()} is after end {self.end.isoformat()}"
                )

    def contains(self, moment: datetime) -> bool:
        """Whether ``moment`` (aware) lies in the window, both ends included."""
        return (self.start is None or self.start <= moment) and moment <= self.end


@dataclass(frozen=True, slots=True)
class Cursor:
    """A sync checkpoint: a high-water mark plus an optional source-specific token.

    ``position`` is the latest record time the runtime has committed (aware UTC).
    ``token`` is opaque to the framework; a connector may use it to resume (e.g. a
    pagination cursor), but must still be correct when it is ``None``. Stored as JSON
    through :meth:`to_json` / :meth:`from_json`.
    """

    position: datetime
    token: str | None = None
    #: Where the stream stands within its read, for people (``state show``), as the
    #: connector last said it with a :class:`Progress`; ``None`` when it said nothing.
    note: str | None = None

    def __post_init__(self) -> None:
        require_aware(self.position, "Cursor.position")

    def to_json(self) -> dict[str, str | None]:
        """A JSON-serialisable form; :meth:`from_json` reverses it exactly."""
        stored = {"position": self.position.isoformat(), "token": self.token}
        # Only when there is one: cursors stored before notes existed stay as they were.
        return stored if self.note is None else {**stored, "note": self.note}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Cursor:
        """Rebuild a cursor stored with :meth:`to_json`; raises ``ValueError`` if malformed."""
        position, token, note = data.get("position"), data.get("token"), data.get("note")
        if not (
            isinstance(position, str)
            and (token is None or isinstance(token, str))
            and (note is None or isinstance(note, str))
        ):
            raise ValueError(f"not a stored cursor: {dict(data)!r}")
        return cls(position=datetime.fromisoformat(position), token=token, note=note)

    def advanced_to(self, position: datetime, token: str | None = None) -> Cursor:
        """Return a cursor at ``position``, or this one if it would move backwards."""
        if position <= self.position:
            return self
        return Cursor(position=position, token=token)
