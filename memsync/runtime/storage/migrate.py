"""Schema migrations (Alembic), run from code: ``memsync db upgrade`` and tests."""

from __future__ import annotations

import enum
import logging
from functools import cache
from pathlib import Path

from alembic import command, op
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from memsync.runtime.storage.engine import Store

__all__ = [
    "SchemaState",
    "current_revision",
    "downgrade",
    "head_revision",
    "note",
    "schema_state",
    "upgrade",
]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_NOTES = "notes"

log = logging.getLogger("memsync.migrations")


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def upgrade(store: Store, target: str = "head") -> list[str]:
    """Bring the schema to ``target``. Running it again at head changes nothing.

    Returns what the migrations that ran had to say about the data they changed (see
    :func:`note`), in order; an upgrade with nothing to do returns ``[]``.
    """
    config = _alembic_config()
    notes: list[str] = []
    with store.write() as connection:
        config.attributes["connection"] = connection
        config.attributes[_NOTES] = notes
        command.upgrade(config, target)
    return notes


def note(message: str) -> None:
    """Called by a migration: report what it did to the data (counts, not values). The
    message is logged and returned by :func:`upgrade`, which ``memsync db upgrade``
    prints."""
    log.info(message)
    config = op.get_context().config
    if config is not None:
        config.attributes.setdefault(_NOTES, []).append(message)


def downgrade(store: Store, target: str) -> None:
    """Take the schema back to ``target`` (a revision id); data in dropped columns is lost."""
    config = _alembic_config()
    with store.write() as connection:
        config.attributes["connection"] = connection
        command.downgrade(config, target)


def head_revision() -> str | None:
    return _revisions()[0]


@cache
def _revisions() -> tuple[str | None, frozenset[str]]:
    """This code's head and every revision it knows (the scripts are read once)."""
    script = ScriptDirectory.from_config(_alembic_config())
    known = frozenset(revision.revision for revision in script.walk_revisions())
    return script.get_current_head(), known


class SchemaState(enum.StrEnum):
    """Where the store's schema stands relative to this code's migrations."""

    CURRENT = "current"
    BEHIND = "behind"
    """Empty, or missing migrations this code has: ``memsync db upgrade`` fixes it."""
    AHEAD = "ahead"
    """Migrated by a newer memsync (a rolling upgrade): a revision this code never saw."""


def current_revision(store: Store) -> str | None:
    with store.read() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def schema_state(store: Store) -> SchemaState:
    """Ask the store which revision its schema is at, and compare it with this code's.

    It really queries the store, so an unreachable one raises the driver's error
    (``sqlalchemy.exc.OperationalError``).
    """
    current = current_revision(store)
    head, known = _revisions()
    if current == head:
        return SchemaState.CURRENT
    if current is None or current in known:
        return SchemaState.BEHIND
    return SchemaState.AHEAD
