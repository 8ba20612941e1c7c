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
from memsync.runtime.reading.episodes import EpisodeRepository
from memsync.runtime.storage import (
    SchemaState,
    Store,
    current_revision,
    head_revision,
    metadata,
    schema_state,
    upgrade,
)
from memsync.runtime.storage.migrate import downgrade, scripted_head
from memsync.runtime.storage.schema import PARTIAL_CONDITION
from memsync.runtime.storage.types import JSONDocument, UTCDateTime


def test_migrations_at_head_match_the_models(store: Store) -> None:
    with store.read() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, metadata)
    assert differences == []


def _stored_index_definition(connection: sa.Connection, name: str) -> str:
    if connection.dialect.name == "postgresql":
        query = "SELECT indexdef FROM pg_indexes WHERE indexname = :name"
    else:
        query = "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :name"
    return str(connection.execute(sa.text(query), {"name": name}).scalar_one())


def test_partial_indexes_have_their_condition_in_the_models_and_in_the_store(
    store: Store,
) -> None:
    # The models give a partial index its database's ``<dialect>_where`` when a store
    # opens, not when they are built (schema.state_partial_conditions); comparing
    # with Alembic does not look at conditions, so this does.
    partial = [
        index
        for table in metadata.tables.values()
        for index in table.indexes
        if PARTIAL_CONDITION in index.info
    ]
    assert partial
    with store.read() as connection:
        for index in partial:
            assert index.name is not None
            condition = index.info[PARTIAL_CONDITION].text
            declared = str(sa.schema.CreateIndex(index).compile(dialect=connection.dialect))
            assert declared.endswith(f"WHERE {condition}"), declared
            assert " WHERE " in _stored_index_definition(connection, index.name)


def test_upgrade_is_idempotent(store: Store) -> None:
    upgrade(store)
    upgrade(store)
    assert current_revision(store) == head_revision()


def test_the_head_read_from_the_scripts_is_alembics(store: Store) -> None:
    # A command skips Alembic when the store is at this head, so it must be the head.
    assert scripted_head() == head_revision()


def test_upgrade_migrates_a_store_left_behind_the_head(store: Store) -> None:
    downgrade(store, "0004")
    upgrade(store)
    assert current_revision(store) == head_revision()
    assert schema_state(store) is SchemaState.CURRENT


def test_schema_state_is_current_at_head_behind_before_it_and_ahead_past_it(
    store: Store,
) -> None:
    assert schema_state(store) is SchemaState.CURRENT
    downgrade(store, "0004")
    assert schema_state(store) is SchemaState.BEHIND
    downgrade(store, "base")
    assert schema_state(store) is SchemaState.BEHIND

    upgrade(store)
    with store.write() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = '9999_newer'"))
    try:
        assert schema_state(store) is SchemaState.AHEAD
    finally:
        with store.write() as connection:
            connection.execute(
                sa.text("UPDATE alembic_version SET version_num = :head"),
                {"head": head_revision()},
            )


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
    """The content hash as revisions before 0009 computed it."""
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
    """An episode row as revisions 0001-0008 wrote it, its hash taken the old way."""
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
                created_at=written if revision == 1 else written - timedelta(days=1),
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


def test_0009_rehashes_stored_payloads_canonically_and_creates_no_revision(
    store: Store,
) -> None:
    downgrade(store, "0008")
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


_OLD_MEMORIES = sa.table(
    "memories",
    *(sa.column(name) for name in ("tenant_id", "subject_id", "memory_key", "kind", "content")),
    *(sa.column(name) for name in ("claim_key", "claim_value", "confidence", "status")),
    *(sa.column(name) for name in ("negated", "explicit_change", "status_rule", "job_id")),
    sa.column("id", sa.Uuid),
    sa.column("metadata", JSONDocument),
    *(sa.column(name, UTCDateTime) for name in ("valid_from", "valid_to", "asserted_at")),
    *(sa.column(name, UTCDateTime) for name in ("created_at", "updated_at", "status_changed_at")),
)
_OLD_SOURCES = sa.table(
    "memory_sources",
    *(sa.column(name) for name in ("tenant_id", "subject_id", "episode_revision")),
    sa.column("memory_id", sa.Uuid),
    sa.column("episode_id", sa.Uuid),
    sa.column("added_at", UTCDateTime),
)


def insert_old_memory(store: Store, subject: str, episode_id: uuid.UUID) -> uuid.UUID:
    """An active memory derived from one episode, as revision 0008 stored it."""
    memory_id = uuid.uuid4()
    with store.write() as connection:
        connection.execute(
            _OLD_MEMORIES.insert().values(
                tenant_id="t1",
                id=memory_id,
                subject_id=subject,
                memory_key=uuid.uuid4().hex,
                kind="fact",
                content="The ticket is about invoices",
                claim_key=None,
                claim_value=None,
                confidence=0.8,
                negated=False,
                explicit_change=False,
                status="active",
                status_rule=None,
                valid_from=T0,
                valid_to=None,
                asserted_at=T0,
                metadata={},
                job_id="j",
                created_at=T0,
                updated_at=T0,
                status_changed_at=T0,
            )
        )
        connection.execute(
            _OLD_SOURCES.insert().values(
                tenant_id="t1",
                memory_id=memory_id,
                episode_id=episode_id,
                subject_id=subject,
                episode_revision=1,
                added_at=T0,
            )
        )
    return memory_id


def test_0010_folds_copies_of_one_key_into_the_newest_and_keeps_them_as_revisions(
    store: Store,
) -> None:
    downgrade(store, "0009")
    first = {"title": "Invoice is wrong"}
    older = insert_old_episode(
        store, "org:100", "ticket:9", {"title": "Invoice wrong"}, revision=2, written=T0
    )
    insert_old_revision(store, older, 1, first, recorded=T0 - timedelta(days=1), replaced=T0)
    insert_old_memory(store, "org:100", older)
    newest = insert_old_episode(
        store, "org:200", "ticket:9", {"title": "Invoice wrong"}, written=T0 + timedelta(hours=1)
    )
    other_tenant = insert_old_episode(
        store, "org:300", "ticket:9", {"title": "Elsewhere"}, tenant="t2"
    )
    single = insert_old_episode(store, "org:100", "ticket:10", {"title": "Alone"})

    notes = upgrade(store)

    assert (
        "0010 one record per key: 1 keys were stored under more than one subject; 1 copies "
        "became earlier revisions of the newest copy, and 1 memory provenance rows now name it"
    ) in notes
    repository = EpisodeRepository(store)
    stored = repository.get_many("t1", [older, newest, single])
    assert set(stored) == {newest, single}
    record = stored[newest]
    assert (record.subject_id, record.revision, record.compiled_revision) == ("org:200", 3, 2)
    assert record.created_at == T0 - timedelta(days=1)
    history = repository.revisions("t1", newest)
    assert [(r.revision, r.subject_id, r.payload) for r in history] == [
        (1, "org:100", first),
        (2, "org:100", {"title": "Invoice wrong"}),
    ]
    assert [r.replaced_at for r in history] == [T0, T0 + timedelta(hours=1)]
    assert repository.get_many("t2", [other_tenant])[other_tenant].revision == 1
    with store.read() as connection:
        cited = connection.execute(sa.text("SELECT episode_id FROM memory_sources")).scalar_one()
    assert str(cited).replace("-", "") == newest.hex

    service = IngestService(store)
    [again] = service.ingest(
        "t1",
        [
            EpisodeDraft(
                subject_id="org:200",
                source="test",
                type="note",
                payload={"title": "Invoice wrong"},
                idempotency_key="ticket:9",
            )
        ],
    )
    assert (again.status, again.episode_id, again.revision) == (
        IngestStatus.DUPLICATE,
        newest,
        3,
    )


def test_0011_provenance_names_the_revision_its_episode_was_last_compiled_at(
    store: Store,
) -> None:
    downgrade(store, "0010")
    recompiled = insert_old_episode(
        store, "ana", "k1", {"title": "v2"}, revision=2, compiled_revision=2
    )
    waiting = insert_old_episode(
        store, "ana", "k2", {"title": "v2"}, revision=2, compiled_revision=1
    )
    insert_old_memory(store, "ana", recompiled)
    insert_old_memory(store, "ana", waiting)

    notes = upgrade(store)

    with store.read() as connection:
        revisions = {
            str(episode).replace("-", ""): revision
            for episode, revision in connection.execute(
                sa.text("SELECT episode_id, episode_revision FROM memory_sources")
            )
        }
    assert revisions == {recompiled.hex: 2, waiting.hex: 1}
    assert (
        "0011 tombstones: 1 memory provenance rows now name the revision their episode was "
        "last compiled at"
    ) in notes


def test_jobs_finished_before_0008_get_the_outcome_their_status_implies(store: Store) -> None:
    from memsync.runtime.jobs import JobOutcome, JobQueue, JobStatus

    downgrade(store, "0007")
    moment = datetime(2026, 1, 1, tzinfo=UTC)
    old_jobs = sa.table(
        "jobs",
        *(sa.column(name) for name in ("tenant_id", "id", "kind", "target", "status")),
        *(sa.column(name) for name in ("trigger", "attempts", "max_attempts")),
        *(sa.column(name) for name in ("run_after", "queued_at")),
    )
    ids = {status: uuid.uuid4() for status in ("completed", "failed", "pending")}
    with store.write() as connection:
        for status, job_id in ids.items():
            connection.execute(
                old_jobs.insert().values(
                    tenant_id="t1",
                    id=job_id.hex if store.engine.dialect.name == "sqlite" else job_id,
                    kind="compile",
                    target=f"subject-{status}",
                    status=status,
                    trigger="manual",
                    attempts=1,
                    max_attempts=5,
                    run_after=moment,
                    queued_at=moment,
                )
            )

    upgrade(store)

    queue = JobQueue(store)
    outcomes = {status: queue.get("t1", job_id) for status, job_id in ids.items()}
    assert {status: job.outcome for status, job in outcomes.items() if job} == {
        JobStatus.COMPLETED.value: JobOutcome.SUCCEEDED,
        JobStatus.FAILED.value: JobOutcome.FAILED,
        JobStatus.PENDING.value: None,
    }


_OLD_CURSORS = sa.table(
    "connector_cursors",
    sa.column("tenant_id"),
    sa.column("connector"),
    sa.column("position", UTCDateTime()),
    sa.column("cursor", JSONDocument),
    sa.column("run_id", sa.Uuid()),
    sa.column("updated_at", UTCDateTime()),
)


def insert_run(store: Store, connector: str, status: str, window_end: datetime) -> uuid.UUID:
    from memsync.runtime.storage import tables

    run_id = uuid.uuid4()
    with store.write() as connection:
        connection.execute(
            tables.sync_runs.insert().values(
                tenant_id="default",
                id=run_id,
                connector=connector,
                connector_type="github",
                kind="incremental",
                window_start=None,
                window_end=window_end,
                status=status,
                fetched=0,
                created=0,
                duplicates=0,
                revised=0,
                skipped=0,
                errors=0,
                skipped_reasons=[],
                host="h",
                pid=1,
                started_at=window_end,
                heartbeat_at=window_end,
            )
        )
    return run_id


def test_0012_a_connector_cursor_becomes_the_checkpoint_every_stream_starts_from(
    store: Store,
) -> None:
    from memsync.runtime.sync import SyncRepository

    downgrade(store, "0011")
    t = datetime(2026, 1, 1, tzinfo=UTC)
    insert_run(store, "gh", "succeeded", t)
    succeeded = insert_run(store, "gh", "succeeded", t + timedelta(hours=1))
    insert_run(store, "gh", "partial", t + timedelta(hours=2))
    cursor_at = t + timedelta(hours=2, minutes=30)
    with store.write() as connection:
        connection.execute(
            _OLD_CURSORS.insert().values(
                tenant_id="default",
                connector="gh",
                position=cursor_at,
                cursor={"position": cursor_at.isoformat(), "token": None},
                run_id=None,
                updated_at=cursor_at,
            )
        )

    notes = upgrade(store)

    state = SyncRepository(store).state(
        "default", "gh", t + timedelta(hours=3), ["acme/api:issues"]
    )
    [issues] = state.streams
    assert issues.cursor is not None
    assert issues.cursor.position == cursor_at
    # The lag is measured from the end of the last succeeded run, as before streams.
    assert (issues.last_success_at, issues.last_success_run_id) == (
        t + timedelta(hours=1),
        succeeded,
    )
    assert state.lag_seconds == 2 * 3600
    assert any("0012 sync streams: 1 connector cursors carried over" in note for note in notes)


def test_0012_downgrade_keeps_the_earliest_checkpoint_of_each_connector(store: Store) -> None:
    from memsync.connectors import Cursor
    from memsync.runtime.sync import SyncRepository

    repository = SyncRepository(store)
    t = datetime(2026, 1, 1, tzinfo=UTC)
    for stream, hours in (("issues", 5), ("comments", 2), ("events", 9)):
        repository.reset_checkpoints(
            "default", "gh", stream=stream, to=t + timedelta(hours=hours), now=t
        )

    downgrade(store, "0011")

    with store.read() as connection:
        rows = connection.execute(sa.select(_OLD_CURSORS.c.position, _OLD_CURSORS.c.cursor)).all()
    assert [(row.position, Cursor.from_json(row.cursor)) for row in rows] == [
        (t + timedelta(hours=2), Cursor(position=t + timedelta(hours=2)))
    ]
    upgrade(store)


def test_0022_adds_webhook_deliveries_to_a_store_of_0021_and_its_downgrade_drops_them(
    store: Store,
) -> None:
    from memsync.runtime.sync.webhook_deliveries import WebhookDeliveries

    downgrade(store, "0021")
    with store.read() as connection:
        assert "webhook_deliveries" not in sa.inspect(connection).get_table_names()

    upgrade(store)
    deliveries = WebhookDeliveries(store)
    deliveries.record("default", "gh", "stored", 200, T0)
    deliveries.record("default", "gh", "stored", 200, T0 + timedelta(seconds=1))
    [state] = deliveries.states("default", {"gh": timedelta(hours=1)}, T0).values()
    assert (state.stored, state.last_stored_at) == (2, T0 + timedelta(seconds=1))

    downgrade(store, "0021")
    with store.read() as connection:
        assert "webhook_deliveries" not in sa.inspect(connection).get_table_names()
    upgrade(store)
