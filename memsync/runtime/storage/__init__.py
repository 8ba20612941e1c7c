"""Storage: the schema, engines for SQLite and PostgreSQL, and migrations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memsync.runtime.storage.engine import (
    Store,
    create_store_engine,
    is_store_unavailable,
    lost_a_node,
    normalise_store_url,
)
from memsync.runtime.storage.migrate import (
    SchemaState,
    current_revision,
    head_revision,
    schema_state,
    upgrade,
)

if TYPE_CHECKING:
    from memsync.runtime.storage.schema import metadata

__all__ = [
    "SchemaState",
    "Store",
    "create_store_engine",
    "current_revision",
    "head_revision",
    "is_store_unavailable",
    "lost_a_node",
    "metadata",
    "normalise_store_url",
    "schema_state",
    "upgrade",
]


def __getattr__(name: str) -> Any:
    # Naming the metadata builds every table (memsync.runtime.storage.schema): only
    # what asks for it (DDL, Alembic, the tests) pays for that.
    if name == "metadata":
        from memsync.runtime.storage.schema import metadata

        return metadata
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
