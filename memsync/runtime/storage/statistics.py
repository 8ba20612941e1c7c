"""Planner statistics after bulk loads (PostgreSQL).

A table that grew from empty inside one process still looks tiny to PostgreSQL's
planner until autovacuum analyses it, and plans made in that state stick: a key lookup
probes the wrong index, and the cached plan of a foreign-key check scans the whole
referenced table for every inserted row. PostgreSQL's own advice for bulk loads is to
run ANALYZE afterwards; this does so, early once and then every so often, counted per
process. ANALYZE also invalidates cached plans on the table in every session.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import Executor

from memsync.runtime.storage.engine import Store

__all__ = ["ANALYZE_EVERY", "FIRST_ANALYZE_AFTER", "StatisticsRefresher"]

log = logging.getLogger("memsync.storage")

# The first ANALYZE comes early: once the planner has seen that keys are unique it
# keeps the key index as the table grows (n_distinct is stored as a fraction).
FIRST_ANALYZE_AFTER = 1_000
ANALYZE_EVERY = 50_000


class StatisticsRefresher:
    """Counts rows a process added to some tables and ANALYZEs them past a threshold.

    A no-op on SQLite. Thread-safe; at most one thread runs the ANALYZE for a crossing.
    """

    def __init__(
        self,
        store: Store,
        tables: Sequence[str],
        *,
        first_after: int = FIRST_ANALYZE_AFTER,
        every: int = ANALYZE_EVERY,
    ) -> None:
        self._store = store
        self._tables = tuple(tables)
        self._first_after = first_after
        self._every = every
        self._added = 0
        self._analyzed = False
        self._lock = threading.Lock()

    def added(self, rows: int, *, run_in: Executor | None = None) -> None:
        """Record ``rows`` new rows; analyse when the running count crosses the threshold.

        With ``run_in`` the ANALYZE is handed to that executor and this returns at once:
        a caller with more to write goes on while the database analyses (ANALYZE takes
        no lock that writes wait for), and waits for it when it shuts the executor down.
        A failure there is logged, not raised: the rows were committed before it.
        """
        if not self.count(rows):
            return
        if run_in is None:
            self.analyze()
        else:
            run_in.submit(self.analyze_or_log)

    def count(self, rows: int) -> bool:
        """Record ``rows`` new rows without touching the database; whether the running
        count crossed the threshold, so that the caller must now :meth:`analyze` (a
        caller on an event loop does so on a thread). Exactly one call is told so for
        each crossing."""
        if not self._store.is_postgresql or rows <= 0:
            return False
        with self._lock:
            self._added += rows
            if self._added < (self._every if self._analyzed else self._first_after):
                return False
            self._added = 0
            self._analyzed = True
        return True

    def analyze(self, *, exclude: Sequence[str] = ()) -> None:
        """ANALYZE the tables (but ``exclude``, which the caller analysed itself) now, in
        a transaction of its own."""
        statement = self._statement(exclude)
        if statement is None:
            return
        with self._store.write() as connection:
            connection.exec_driver_sql(statement)

    def analyze_or_log(self, *, exclude: Sequence[str] = ()) -> None:
        """:meth:`analyze`, logging a failure instead of raising it: for an executor,
        after the rows were committed."""
        try:
            self.analyze(exclude=exclude)
        except Exception:
            log.exception(
                "planner statistics not refreshed", extra={"statement": self._statement(exclude)}
            )

    def _statement(self, exclude: Sequence[str]) -> str | None:
        tables = [table for table in self._tables if table not in exclude]
        return "ANALYZE " + ", ".join(tables) if tables else None
