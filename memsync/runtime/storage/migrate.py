"""Schema migrations (Alembic), run from code: ``memsync db upgrade`` and tests."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command, op
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from memsync.runtime.storage.engine import Store

__all__ = ["current_revision", "downgrade", "head_revision", "note", "upgrade"]

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
    return ScriptDirectory.from_config(_alembic_config()).get_current_head()


def current_revision(store: Store) -> str | None:
    with store.read() as connection:
        return MigrationContext.configure(connection).get_current_revision()
