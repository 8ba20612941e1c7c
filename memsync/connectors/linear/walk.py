"""Walking a window oldest first through a list that answers newest first.

Linear's lists, ordered by ``updatedAt``, hand out the newest records first, and a
page that does not hold a whole window says nothing about the window's oldest part. A
run cut short while paging such a window from its top has read its end, not its
beginning, so no checkpoint could move, and a window larger than one run's budget would
never complete. :class:`WindowWalk` decides instead which sub-window to ask for next,
oldest first, from what each answer showed (as the Slack connector walks a channel's
history): it asks for the whole window first (one request when it fits one page); a
page that does not hold its sub-window still holds the newest part of it completely
(everything updated after the page's oldest record), which is kept as read, and a
shorter sub-window, about as long as that page lasted, is asked for at the bottom. A
sub-window read to its end moves the walk's *position* (everything before it has been
read) and lets the next sub-window grow.

Pure: no I/O, no clock; the connector asks and reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

__all__ = ["SubWindow", "WindowWalk"]

# How much longer the next sub-window may be after one that was under half full, and
# after an empty one (a quiet stretch is crossed in few requests).
_GROWTH = 2
_EMPTY_GROWTH = 8


@dataclass(frozen=True, slots=True)
class SubWindow:
    """Records updated in ``[start, end]``, both ends included."""

    start: datetime
    end: datetime


@dataclass(slots=True)
class WindowWalk:
    """Which sub-window of ``[start, end]`` to ask for next, oldest first.

    ``unread`` holds the parts not read yet, oldest first; :attr:`position` is the start
    of the oldest: every record updated before it has been handed out, and a read
    starting there finds every record not handed out yet. Repeats: an instant on the
    boundary of two sub-windows is asked for twice (both ends are included), so a
    record may be read twice; never none.
    """

    page_size: int
    unread: list[SubWindow]
    span: timedelta
    _asked: SubWindow | None = field(default=None)

    @classmethod
    def over(cls, start: datetime, end: datetime, page_size: int) -> WindowWalk:
        """A walk over ``[start, end]`` that first asks for all of it."""
        return cls(page_size, [SubWindow(start, end)], end - start)

    @property
    def done(self) -> bool:
        return not self.unread

    @property
    def position(self) -> datetime:
        """Where a read must start to find every record not handed out yet."""
        return self.unread[0].start

    def next(self) -> SubWindow:
        """The sub-window to ask for: at the bottom of what is unread, ``span`` long."""
        oldest = self.unread[0]
        self._asked = SubWindow(oldest.start, min(oldest.start + self.span, oldest.end))
        return self._asked

    def read_to_end(self, records: int) -> None:
        """The asked sub-window was read to its end and held ``records``."""
        asked = self._take()
        oldest = self.unread.pop(0)
        if asked.end < oldest.end:
            self.unread.insert(0, SubWindow(asked.end, oldest.end))
        if records == 0:
            # A quiet stretch: grow fast, or halve the distance to what is known to
            # hold records (the part above), whichever is further.
            self.span = max(self.span * _EMPTY_GROWTH, (oldest.end - asked.end) / 2)
        elif records < self.page_size // 2:
            self.span *= _GROWTH

    def page_overflowed(self, oldest_on_page: datetime) -> bool:
        """The first page of the asked sub-window was full and there is more; its records
        hold everything updated after ``oldest_on_page`` in the sub-window. Returns
        whether the walk narrowed: ``False`` when the page lies within one instant at the
        sub-window's end, which no shorter sub-window can split (page through it
        instead, then call :meth:`read_to_end`)."""
        asked = self._asked
        if asked is None:
            raise RuntimeError("page_overflowed() before next()")
        if oldest_on_page >= asked.end:
            return False
        self._asked = None
        bottom = SubWindow(asked.start, max(oldest_on_page, asked.start))
        oldest = self.unread.pop(0)
        rest = [SubWindow(asked.end, oldest.end)] if asked.end < oldest.end else []
        self.unread[0:0] = [bottom, *rest]
        self.span = max(asked.end - oldest_on_page, timedelta(microseconds=1))
        return True

    def _take(self) -> SubWindow:
        asked, self._asked = self._asked, None
        if asked is None:
            raise RuntimeError("a page was reported before next()")
        return asked
