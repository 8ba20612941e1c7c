"""One episode per idempotency key within a tenant, wherever the record is filed.

The key index used to be unique per (tenant, subject, key), so a record whose subject
template used a field that changed (a Zendesk ticket moved to another organisation, a
reassigned issue) was created a second time under its new subject, and the stale copy
stayed under the old one. The index is now unique per (tenant, key), and a revision
keeps the subject it was filed under.

Existing duplicates of one key are folded into one episode: the most recently written
copy is kept as the record, and every other copy, with its own earlier revisions,
becomes an earlier revision of it, in the order they were written and each with its
old subject. The provenance of memories derived from a folded copy now names the kept
episode, and the kept episode is marked revised but not compiled, so the next compile
of its subject re-derives it there and retires what the old subjects derived from the
copies (see docs/concepts.md, "Moves"). The migration reports how many keys it
folded.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

from memsync.runtime.storage.migrate import note
from memsync.runtime.storage.types import JSONDocument, UTCDateTime, identifier

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_CONTENT = ("source", "content_hash", "payload", "metadata", "provenance", "occurred_at")

_episodes = sa.table(
    "episodes",
    sa.column("tenant_id"),
    sa.column("id", sa.Uuid),
    sa.column("subject_id"),
    sa.column("idempotency_key"),
    sa.column("source"),
    sa.column("content_hash"),
    *(sa.column(name, JSONDocument) for name in ("payload", "metadata", "provenance")),
    sa.column("revision", sa.Integer),
    sa.column("compiled_revision", sa.Integer),
    *(sa.column(name, UTCDateTime) for name in ("occurred_at", "created_at", "revised_at")),
)
_revisions = sa.table(
    "episode_revisions",
    sa.column("tenant_id"),
    sa.column("episode_id", sa.Uuid),
    sa.column("revision", sa.Integer),
    sa.column("subject_id"),
    sa.column("source"),
    sa.column("content_hash"),
    *(sa.column(name, JSONDocument) for name in ("payload", "metadata", "provenance")),
    *(sa.column(name, UTCDateTime) for name in ("occurred_at", "recorded_at", "replaced_at")),
)
_memory_sources = sa.table(
    "memory_sources",
    sa.column("tenant_id"),
    sa.column("episode_id", sa.Uuid),
)


def _version(
    row: Any, subject_id: str, written: datetime, order: tuple[Any, ...]
) -> dict[str, Any]:
    return {
        "subject_id": subject_id,
        "written": written,
        "order": order,
        **{name: getattr(row, name) for name in _CONTENT},
    }


def _fold(tenant_id: str, copies: Sequence[Any], archived: Sequence[Any]) -> dict[str, Any]:
    """The plan for one key's copies: which is kept, and its whole history in order."""
    written = {copy.id: copy.revised_at or copy.created_at for copy in copies}
    kept = max(copies, key=lambda copy: (written[copy.id], copy.revision, str(copy.id)))
    subject_of = {copy.id: copy.subject_id for copy in copies}
    versions = [
        _version(row, subject_of[row.episode_id], row.recorded_at, (0, row.revision))
        for row in archived
    ]
    versions.extend(
        _version(copy, copy.subject_id, written[copy.id], (1, copy.revision))
        for copy in copies
        if copy.id != kept.id
    )
    versions.sort(key=lambda version: (version["written"], version["order"]))
    history = [
        {
            "tenant_id": tenant_id,
            "episode_id": kept.id,
            "revision": number,
            "subject_id": version["subject_id"],
            **{name: version[name] for name in _CONTENT},
            "recorded_at": version["written"],
            # Replaced by whichever write of the key came next.
            "replaced_at": (
                versions[number]["written"] if number < len(versions) else written[kept.id]
            ),
        }
        for number, version in enumerate(versions, start=1)
    ]
    return {
        "kept": kept.id,
        "folded": [copy.id for copy in copies if copy.id != kept.id],
        "history": history,
        "revision": len(history) + 1,
        "created_at": min(copy.created_at for copy in copies),
        "revised_at": written[kept.id],
    }


def _fold_duplicates() -> tuple[int, int, int]:
    """Fold every key's copies into one episode; return (keys, copies folded,
    provenance rows that now name the kept episode)."""
    connection = op.get_bind()
    duplicated = (
        sa.select(_episodes.c.tenant_id, _episodes.c.idempotency_key)
        .where(_episodes.c.idempotency_key.is_not(None))
        .group_by(_episodes.c.tenant_id, _episodes.c.idempotency_key)
        .having(sa.func.count() > 1)
        .subquery()
    )
    copies = list(
        connection.execute(
            sa.select(_episodes).join(
                duplicated,
                sa.and_(
                    _episodes.c.tenant_id == duplicated.c.tenant_id,
                    _episodes.c.idempotency_key == duplicated.c.idempotency_key,
                ),
            )
        )
    )
    if not copies:
        return 0, 0, 0
    groups: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for copy in copies:
        groups[(copy.tenant_id, copy.idempotency_key)].append(copy)
    archived: dict[uuid.UUID, list[Any]] = defaultdict(list)
    for start in range(0, len(copies), 1000):
        ids = [copy.id for copy in copies[start : start + 1000]]
        for row in connection.execute(
            sa.select(_revisions).where(_revisions.c.episode_id.in_(ids))
        ):
            archived[row.episode_id].append(row)

    plans = [
        (tenant_id, _fold(tenant_id, group, [r for c in group for r in archived[c.id]]))
        for (tenant_id, _), group in sorted(groups.items())
    ]
    every_copy = [(copy.tenant_id, copy.id) for copy in copies]
    connection.execute(
        _revisions.delete().where(
            _revisions.c.tenant_id == sa.bindparam("b_tenant"),
            _revisions.c.episode_id == sa.bindparam("b_id"),
        ),
        [{"b_tenant": tenant, "b_id": ident} for tenant, ident in every_copy],
    )
    connection.execute(_revisions.insert(), [row for _, plan in plans for row in plan["history"]])
    connection.execute(
        _episodes.update()
        .where(
            _episodes.c.tenant_id == sa.bindparam("b_tenant"),
            _episodes.c.id == sa.bindparam("b_id"),
        )
        .values(
            revision=sa.bindparam("revision"),
            # Uncompiled at its new revision, but not new: the compile of its subject
            # then looks for memories elsewhere that cite it.
            compiled_revision=sa.bindparam("compiled"),
            created_at=sa.bindparam("created_at"),
            revised_at=sa.bindparam("revised_at"),
        ),
        [
            {
                "b_tenant": tenant,
                "b_id": plan["kept"],
                "revision": plan["revision"],
                "compiled": plan["revision"] - 1,
                "created_at": plan["created_at"],
                "revised_at": plan["revised_at"],
            }
            for tenant, plan in plans
        ],
    )
    folded_ids = [(tenant, folded) for tenant, plan in plans for folded in plan["folded"]]
    repointed = sum(
        connection.execute(
            sa.select(sa.func.count()).where(
                _memory_sources.c.tenant_id == tenant, _memory_sources.c.episode_id == folded
            )
        ).scalar_one()
        for tenant, folded in folded_ids
    )
    connection.execute(
        _memory_sources.update()
        .where(
            _memory_sources.c.tenant_id == sa.bindparam("b_tenant"),
            _memory_sources.c.episode_id == sa.bindparam("b_folded"),
        )
        .values(episode_id=sa.bindparam("kept")),
        [
            {"b_tenant": tenant, "b_folded": folded, "kept": plan["kept"]}
            for tenant, plan in plans
            for folded in plan["folded"]
        ],
    )
    connection.execute(
        _episodes.delete().where(
            _episodes.c.tenant_id == sa.bindparam("b_tenant"),
            _episodes.c.id == sa.bindparam("b_id"),
        ),
        [{"b_tenant": tenant, "b_id": folded} for tenant, folded in folded_ids],
    )
    return len(plans), len(folded_ids), repointed


def upgrade() -> None:
    with op.batch_alter_table("episode_revisions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("subject_id", identifier(255), nullable=True))
    # Until now an episode never changed subject: its revisions were filed where it is.
    op.execute(
        "UPDATE episode_revisions SET subject_id = (SELECT e.subject_id FROM episodes AS e "
        "WHERE e.tenant_id = episode_revisions.tenant_id AND e.id = episode_revisions.episode_id)"
    )
    keys, folded, repointed = _fold_duplicates()
    with op.batch_alter_table("episode_revisions", schema=None) as batch_op:
        batch_op.alter_column("subject_id", existing_type=identifier(255), nullable=False)
    op.drop_index("uq_episodes_idempotency_key", table_name="episodes")
    op.create_index(
        "uq_episodes_idempotency_key",
        "episodes",
        ["tenant_id", "idempotency_key"],
        unique=True,
        sqlite_where=sa.text("idempotency_key IS NOT NULL"),
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    if keys:
        note(
            f"0010 one record per key: {keys} keys were stored under more than one subject; "
            f"{folded} copies became earlier revisions of the newest copy, and {repointed} "
            "memory provenance rows now name it"
        )


def downgrade() -> None:
    # Folded copies stay folded: one record per key is also valid under the old index.
    op.drop_index("uq_episodes_idempotency_key", table_name="episodes")
    op.create_index(
        "uq_episodes_idempotency_key",
        "episodes",
        ["tenant_id", "subject_id", "idempotency_key"],
        unique=True,
        sqlite_where=sa.text("idempotency_key IS NOT NULL"),
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    with op.batch_alter_table("episode_revisions", schema=None) as batch_op:
        batch_op.drop_column("subject_id")
