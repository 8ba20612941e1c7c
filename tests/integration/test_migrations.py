"""The replayed migrations produce exactly the schema the models declare."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from memsync.runtime.storage import (
    Base,
    SchemaState,
    Store,
    current_revision,
    head_revision,
    schema_state,
    upgrade,
)
from memsync.runtime.storage.migrate import downgrade, scripted_head


def test_migrations_at_head_match_the_models(store: Store) -> None:
    with store.read() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


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
