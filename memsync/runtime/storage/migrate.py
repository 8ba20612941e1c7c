"""Schema migrations (Alembic), run from code: ``memsync db upgrade`` and tests.

Every command that opens the store brings its schema to head first. When it is there
already (nearly always), that costs one query and Alembic is not imported: its import
is a fair part of a short command's start-up (docs/benchmarks.md, "CLI start-up").
"""

from __future__ import annotations

import ast
import enum
import logging
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from memsync.runtime.storage.citus import (
    DISTRIBUTION_COLUMN,
    distribute_tables,
    distributing_new_tables,
)
from memsync.runtime.storage.engine import Store

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import Connection

__all__ = [
    "SchemaState",
    "current_revision",
    "distribute",
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
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


def upgrade(store: Store, target: str = "head") -> list[str]:
    """Bring the schema to ``target``. Running it again at head changes nothing (and,
    when the store says it is at this code's head, reads one row and imports nothing).

    Returns what the migrations that ran had to say about the data they changed (see
    :func:`note`), in order; an upgrade with nothing to do returns ``[]``.
    """
    if target == "head" and _at_scripted_head(store):
        return []
    from alembic import command

    config = _alembic_config()
    notes: list[str] = []
    with store.write() as connection, distributing_new_tables(connection):
        config.attributes["connection"] = connection
        config.attributes[_NOTES] = notes
        command.upgrade(config, target)
        notes.extend(_distributed(connection))
    return notes


def distribute(store: Store) -> list[str]:
    """On a Citus coordinator, distribute every tenant table that is not yet (a schema
    made before Citus was installed, or distributed by hand only in part); what
    ``memsync db upgrade`` runs after the migrations. Repeats change nothing; off Citus
    it does nothing. Returns what it did, as :func:`upgrade` does."""
    with store.write() as connection:
        return _distributed(connection)


def _distributed(connection: Connection) -> list[str]:
    done = distribute_tables(connection)
    if not done:
        return []
    message = f"distributed by {DISTRIBUTION_COLUMN} on Citus: {', '.join(done)}"
    log.info(message)
    return [message]


def note(message: str) -> None:
    """Called by a migration: report what it did to the data (counts, not values). The
    message is logged and returned by :func:`upgrade`, which ``memsync db upgrade``
    prints."""
    from alembic import op

    log.info(message)
    config = op.get_context().config
    if config is not None:
        config.attributes.setdefault(_NOTES, []).append(message)


def downgrade(store: Store, target: str) -> None:
    """Take the schema back to ``target`` (a revision id); data in dropped columns is lost."""
    from alembic import command

    config = _alembic_config()
    with store.write() as connection, distributing_new_tables(connection):
        config.attributes["connection"] = connection
        command.downgrade(config, target)


def head_revision() -> str | None:
    return _revisions()[0]


@cache
def _revisions() -> tuple[str | None, frozenset[str]]:
    """This code's head and every revision it knows (the scripts are read once)."""
    from alembic.script import ScriptDirectory

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


_REVISION_LINE = re.compile(r"^(revision|down_revision)\b[^=\n]*=(.+)$", re.MULTILINE)


@cache
def scripted_head() -> str | None:
    """This code's head revision as the migration scripts' ``revision`` and
    ``down_revision`` lines say, read without Alembic; ``None`` if they do not make one
    line of history with one head (then Alembic decides). Equal to
    :func:`head_revision` (a test holds them equal)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        lines = dict(_REVISION_LINE.findall(script.read_text(encoding="utf-8")))
        try:
            revision = ast.literal_eval(lines["revision"].strip())
            parent = ast.literal_eval(lines.get("down_revision", "None").strip())
        except (KeyError, ValueError, SyntaxError):
            return None
        if not isinstance(revision, str) or not (parent is None or isinstance(parent, str)):
            return None  # a merge point: Alembic reads those
        revisions.add(revision)
        if parent is not None:
            parents.add(parent)
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 and parents <= revisions else None


def _at_scripted_head(store: Store) -> bool:
    head = scripted_head()
    if head is None:
        return False
    with store.read() as connection:
        if not sa.inspect(connection).has_table("alembic_version"):
            return False
        stored = connection.exec_driver_sql("SELECT version_num FROM alembic_version")
        return stored.scalars().all() == [head]


def current_revision(store: Store) -> str | None:
    from alembic.runtime.migration import MigrationContext

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
