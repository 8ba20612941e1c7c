"""The replayed migrations produce exactly the schema the models declare."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from memsync.runtime.storage import Base, Store, current_revision, head_revision, upgrade


def test_migrations_at_head_match_the_models(store: Store) -> None:
    with store.read() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_upgrade_is_idempotent(store: Store) -> None:
    upgrade(store)
    upgrade(store)
    assert current_revision(store) == head_revision()
