"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
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


# JSONB on PostgreSQL (indexable, compact); JSON text elsewhere.
JSONDocument: sa.types.TypeEngine[Any] = sa.JSON().with_variant(
    postgresql.JSONB(none_as_null=True), "postgresql"
)


def identifier(length: int) -> sa.types.TypeEngine[str]:
    """A string compared byte by byte: tenant, subject, label and key columns.

    PostgreSQL would otherwise compare these with the database's linguistic collation
    (``strcoll`` per comparison, measurably slower on every index insert); byte order
    is also what SQLite does, so both databases sort identifiers the same way.
    """
    return sa.String(length).with_variant(sa.String(length, collation="C"), "postgresql")
