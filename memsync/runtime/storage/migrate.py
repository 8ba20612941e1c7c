"""Schema migrations (Alembic), run from code: ``memsync db upgrade`` and tests."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from memsync.runtime.storage.engine import Store

__all__ = ["current_revision", "downgrade", "head_revision", "upgrade"]

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def _alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def upgrade(store: Store, target: str = "head") -> None:
    """Bring the schema to ``target``. Running it again at head changes nothing."""
    config = _alembic_config()
    with store.write() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, target)


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
