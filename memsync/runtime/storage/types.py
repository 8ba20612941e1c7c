"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

from memsync.clock import utc

__all__ = ["JSONDocument", "UTCDateTime", "identifier"]


class UTCDateTime(sa.TypeDecorator[datetime]):
    """An aware datetime stored as UTC.

    PostgreSQL keeps ``timestamptz`` natively; SQLite has no time zone type, so values
    are normalised to UTC on the way in and get their UTC ``tzinfo`` back on the way
    out. Either way an aware datetime survives a round trip as the same instant.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        aware = utc(value)
        return aware.replace(tzinfo=None) if dialect.name == "sqlite" else aware

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else utc(value)

    def result_processor(self, dialect: Dialect, coltype: object) -> Any:
        # PostgreSQL: every session of a store runs at time zone UTC (the engine sees to
        # it at connect, ``engine.sessions_in_utc``), so psycopg hands ``timestamptz``
        # back aware, with ``datetime.UTC`` already: converting it again was a Python
        # call a value, about 1.5 µs, and a page of memories reads hundreds.
        if dialect.name == "postgresql":
            return None
        return super().result_processor(dialect, coltype)


class _JSONDocument(sa.TypeDecorator[Any]):
    """JSONB on PostgreSQL (indexable, compact); JSON text elsewhere.

    A decorator choosing its type per dialect rather than ``JSON().with_variant(JSONB)``:
    a variant is built with the schema, and building JSONB imports SQLAlchemy's
    PostgreSQL dialect, which costs a command over a SQLite store about a sixth of the
    time of importing SQLAlchemy itself (docs/benchmarks.md, "CLI start-up"). Here
    JSONB is built when a PostgreSQL store first uses the column, and that store's
    engine has imported the dialect already.
    """

    impl = sa.JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name == "postgresql":
            from sqlalchemy.dialects.postgresql import JSONB

            return dialect.type_descriptor(JSONB(none_as_null=True))
        return dialect.type_descriptor(sa.JSON())


JSONDocument: sa.types.TypeEngine[Any] = _JSONDocument()


def identifier(length: int) -> sa.types.TypeEngine[str]:
    """A string compared byte by byte: tenant, subject, label and key columns.

    PostgreSQL would otherwise compare these with the database's linguistic collation
    (``strcoll`` per comparison, measurably slower on every index insert); byte order
    is also what SQLite does, so both databases sort identifiers the same way.
    """
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")
