"""The replayed migrations produce exactly the schema the models declare."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from memsync.episode import EpisodeDraft, IngestStatus, content_hash
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Base, Store, current_revision, head_revision, upgrade
from memsync.runtime.storage.migrate import downgrade
from memsync.runtime.storage.types import JSONDocument, UTCDateTime


def test_migrations_at_head_match_the_models(store: Store) -> None:
    with store.read() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_upgrade_is_idempotent(store: Store) -> None:
    upgrade(store)
    upgrade(store)
    assert current_revision(store) == head_revision()


def test_records_written_before_0005_get_their_episode_counts(store: Store) -> None:
    downgrade(store, "0004")
    listed = {
        "winner": [str(uuid.uuid4()) for _ in range(3)],
        "loser": [str(uuid.uuid4()) for _ in range(70)],
    }
    old_table = sa.table(
        "supersessions",
        *(sa.column(name) for name in ("tenant_id", "id", "subject_id", "rule")),
        *(sa.column(name) for name in ("loser_memory_key", "job_id", "decided_at")),
        sa.column("winner_episode_ids", sa.JSON),
        sa.column("loser_episode_ids", sa.JSON),
    )
    with store.write() as connection:
        connection.execute(
            old_table.insert().values(
                tenant_id="t1",
                id=uuid.uuid4().hex if store.engine.dialect.name == "sqlite" else uuid.uuid4(),
                subject_id="ana",
                rule="lexical",
                loser_memory_key="k",
                job_id="j",
                decided_at=datetime(2026, 1, 1, tzinfo=UTC),
                winner_episode_ids=listed["winner"],
                loser_episode_ids=listed["loser"],
            )
        )

    upgrade(store)

    with store.read() as connection:
        counts = connection.execute(
            sa.text("SELECT winner_episode_count, loser_episode_count FROM supersessions")
        ).one()
    assert tuple(counts) == (3, 70)


# -- writing rows as an older revision of the schema had them -----------------------------

T0 = datetime(2026, 1, 1, tzinfo=UTC)

_OLD_EPISODES = sa.table(
    "episodes",
    *(sa.column(name) for name in ("tenant_id", "subject_id", "source", "type", "session_id")),
    *(sa.column(name) for name in ("idempotency_key", "content_hash")),
    *(sa.column(name) for name in ("revision", "compiled_revision")),
    sa.column("id", sa.Uuid),
    *(sa.column(name, JSONDocument) for name in ("payload", "metadata", "provenance")),
    *(sa.column(name, UTCDateTime) for name in ("occurred_at", "created_at", "revised_at")),
)
_OLD_REVISIONS = sa.table(
    "episode_revisions",
    *(sa.column(name) for name in ("tenant_id", "revision", "source", "content_hash")),
    sa.column("episode_id", sa.Uuid),
    *(sa.column(name, JSONDocument) for name in ("payload", "metadata", "provenance")),
    *(sa.column(name, UTCDateTime) for name in ("occurred_at", "recorded_at", "replaced_at")),
)


def old_hash(payload: dict[str, object]) -> str:
    """The content hash as revisions before 0006 computed it."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def insert_old_episode(
    store: Store,
    subject: str,
    key: str | None,
    payload: dict[str, object],
    *,
    revision: int = 1,
    compiled_revision: int = 0,
    written: datetime = T0,
    tenant: str = "t1",
) -> uuid.UUID:
    """An episode row as revisions 0001-0005 wrote it, its hash taken the old way."""
    episode_id = uuid.uuid4()
    with store.write() as connection:
        connection.execute(
            _OLD_EPISODES.insert().values(
                tenant_id=tenant,
                id=episode_id,
                subject_id=subject,
                source="test",
                type="note",
                payload=payload,
                metadata={},
                provenance={},
                session_id=None,
                idempotency_key=key,
                content_hash=old_hash(payload),
                revision=revision,
                compiled_revision=compiled_revision,
                occurred_at=T0,
                created_at=T0 if revision == 1 else T0 - timedelta(days=1),
                revised_at=written if revision > 1 else None,
            )
        )
    return episode_id


def insert_old_revision(
    store: Store,
    episode_id: uuid.UUID,
    revision: int,
    payload: dict[str, object],
    *,
    recorded: datetime,
    replaced: datetime,
    tenant: str = "t1",
) -> None:
    with store.write() as connection:
        connection.execute(
            _OLD_REVISIONS.insert().values(
                tenant_id=tenant,
                episode_id=episode_id,
                revision=revision,
                source="test",
                content_hash=old_hash(payload),
                payload=payload,
                metadata={},
                provenance={},
                occurred_at=T0,
                recorded_at=recorded,
                replaced_at=replaced,
            )
        )


def test_0006_rehashes_stored_payloads_canonically_and_creates_no_revision(
    store: Store,
) -> None:
    downgrade(store, "0005")
    episode_id = insert_old_episode(store, "ana", "k1", {"score": 1.0}, revision=2)
    insert_old_revision(
        store, episode_id, 1, {"score": 0.5e1}, recorded=T0 - timedelta(days=1), replaced=T0
    )
    plain = insert_old_episode(store, "ana", "k2", {"title": "no fractions here"})

    notes = upgrade(store)

    with store.read() as connection:
        hashes = {
            key: value
            for key, value in connection.execute(
                sa.text("SELECT idempotency_key, content_hash FROM episodes")
            )
        }
        kept = connection.execute(
            sa.text("SELECT revision, content_hash FROM episode_revisions")
        ).all()
    assert hashes == {
        "k1": content_hash({"score": 1}),
        "k2": old_hash({"title": "no fractions here"}),
    }
    assert [tuple(row) for row in kept] == [(1, content_hash({"score": 5}))]
    assert any("episodes: 2 rows read, 1 content hashes recomputed" in note for note in notes)
    assert any("episode_revisions: 1 rows read, 1 content hashes" in note for note in notes)

    [again] = IngestService(store).ingest(
        "t1",
        [
            EpisodeDraft(
                subject_id="ana",
                source="test",
                type="note",
                payload={"score": 1},
                idempotency_key="k1",
            )
        ],
    )
    assert (again.status, again.episode_id, again.revision) == (
        IngestStatus.DUPLICATE,
        episode_id,
        2,
    )
    assert plain != episode_id
