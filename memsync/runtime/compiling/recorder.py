"""Recorded LLM extractions, per tenant: what the model answered is never paid for twice."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import sqlalchemy as sa

from memsync.clock import Clock
from memsync.runtime.storage import tables
from memsync.runtime.storage.engine import Store

__all__ = ["SqlExtractionRecorder"]


class SqlExtractionRecorder:
    """An ``ExtractionRecorder`` in the ``llm_extractions`` table, scoped to one tenant.

    Each ``put`` commits on its own, before and outside the compile transaction: an
    answer the model gave is kept even when the compile that asked for it fails, so a
    retry replays it instead of paying for it twice. First record of a key wins.
    """

    def __init__(self, store: Store, tenant_id: str, clock: Clock) -> None:
        self._store = store
        self._tenant_id = tenant_id
        self._clock = clock

    def get(self, key: str) -> str | None:
        extractions = tables.llm_extractions
        query = sa.select(extractions.c.extraction).where(
            extractions.c.tenant_id == self._tenant_id, extractions.c.extraction_key == key
        )
        with self._store.read() as connection:
            found: str | None = connection.execute(query).scalar_one_or_none()
            return found

    def put(self, key: str, extraction_json: str) -> None:
        statement = tables.insert_or_ignore(
            tables.llm_extractions, postgresql=self._store.is_postgresql
        )
        with self._store.write() as connection:
            connection.execute(
                statement,
                {
                    "tenant_id": self._tenant_id,
                    "extraction_key": key,
                    "extraction": extraction_json,
                    "recorded_at": self._clock.now(),
                },
            )

    def records(self) -> Iterator[tuple[str, str]]:
        """Every (key, extraction JSON) of the tenant, by key, read in pages."""
        extractions = tables.llm_extractions
        query = (
            sa.select(extractions.c.extraction_key, extractions.c.extraction)
            .where(extractions.c.tenant_id == self._tenant_id)
            .order_by(extractions.c.extraction_key)
            .execution_options(yield_per=1_000)
        )
        with self._store.read() as connection:
            for row in connection.execute(query):
                yield row.extraction_key, row.extraction

    def put_many(self, records: Iterable[tuple[str, str]]) -> int:
        """Record each (key, extraction JSON) not recorded yet, in one transaction;
        return how many were new. Repeats: a key already recorded keeps its record."""
        extractions = tables.llm_extractions
        statement = tables.insert_or_ignore(extractions, postgresql=self._store.is_postgresql)
        count = sa.select(sa.func.count()).where(extractions.c.tenant_id == self._tenant_id)
        now = self._clock.now()
        rows = [
            {
                "tenant_id": self._tenant_id,
                "extraction_key": key,
                "extraction": extraction,
                "recorded_at": now,
            }
            for key, extraction in records
        ]
        with self._store.write() as connection:
            before = connection.execute(count).scalar_one()
            if rows:
                connection.execute(statement, rows)
            after: int = connection.execute(count).scalar_one()
        return after - before
