"""The record lifecycle as a property: whatever a source does to its records between
syncs (create, edit, move between subjects, delete, re-create), the store ends with
one episode per key, its revisions in order, and the same active memories and open
conflicts as one clean sync of the final state.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from memsync.clock import FakeClock
from memsync.compile.types import ConflictStatus, MemoryStatus
from memsync.connectors.fake import FakeConfig, FakeConnector, FakeRecord
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store, tables
from memsync.runtime.sync import SyncRepository, SyncRunner

T0 = datetime(2026, 3, 1, tzinfo=UTC)
STEP = timedelta(minutes=10)
IDS = ("r1", "r2", "r3", "r4")
GROUPS = ("a", "b")
# Each body derives a summary. "I use …" is a multi-valued claim (tools.used), so records
# share memories across ids and subjects without contradicting each other. The others
# contradict each other: "I'm in …" (location.current, recency_wins), "I live in …", an
# explicit move and a negation (location.home_city, keep_existing), and two rates (a
# fact, flag: an open conflict). A winner whose record is deleted, moved or edited away
# must hand its claim back to what it beat, as one clean sync of the rest would show.
BODIES = (
    "Note about alpha",
    "I use vim",
    "I use emacs",
    "I'm in Berlin",
    "I'm in Madrid",
    "I'm in Lisbon",
    "I live in Berlin",
    "I live in Madrid",
    "I moved to Lisbon",
    "I no longer live in Berlin",
    "Stripe charges 3.5% per transaction",
    "Stripe charges 2.9% per transaction",
)


@dataclass(frozen=True)
class Step:
    """One change at the source (``action`` on record ``id``), then a sync, and maybe a
    compile of every subject with something to compile."""

    action: str
    id: str
    group: str
    body: str
    compile_after: bool


steps = st.lists(
    st.builds(
        Step,
        st.sampled_from(("create", "edit", "move", "delete")),
        st.sampled_from(IDS),
        st.sampled_from(GROUPS),
        st.sampled_from(BODIES),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)


def _connector(tenant: str, records: list[FakeRecord]) -> FakeConnector:
    config = FakeConfig.model_validate(
        {"name": "src", "subject": "team:{group}", "overlap": "1h", "tenant": tenant}
    )
    return FakeConnector(config, records)


def _apply(source: FakeConnector, step: Step, now: datetime) -> None:
    """Change the fake source as ``step`` says; a step that makes no sense for the
    record's state (editing a record that does not exist) creates it instead, and one
    that would change nothing leaves the record as it is (a source that touches a record
    without changing it is another story: its stored time would lag a clean read's)."""
    live = {record.id: record for record in source.records}
    current = live.get(step.id)
    if step.action == "delete":
        if current is not None:
            source.delete(step.id, at=now)
        return
    if current is None:  # created, or re-created after a deletion
        updated = FakeRecord(step.id, now, step.body, {"group": step.group})
    elif step.action == "edit":
        updated = replace(current, updated_at=now, body=step.body)
    elif step.action == "move":
        updated = replace(current, updated_at=now, fields={"group": step.group})
    else:
        updated = replace(current, updated_at=now, body=step.body, fields={"group": step.group})
    if current is not None and (current.body, current.fields) == (updated.body, updated.fields):
        return
    source.records = [r for r in source.records if r.id != step.id] + [updated]


def _compile_everything(compiler: CompileService, tenant: str) -> None:
    for subject in compiler.subjects_with_uncompiled(tenant):
        compiler.compile(tenant, subject)


def _active(store: Store, tenant: str) -> set[tuple[str, ...]]:
    """The active memories of the tenant, and its open conflicts, by subject."""
    memories, conflicts = tables.memories, tables.conflicts
    query = sa.select(memories.c.subject_id, memories.c.content).where(
        memories.c.tenant_id == tenant, memories.c.status == MemoryStatus.ACTIVE.value
    )
    open_ = sa.select(
        conflicts.c.subject_id, conflicts.c.first_content, conflicts.c.second_content
    ).where(conflicts.c.tenant_id == tenant, conflicts.c.status == ConflictStatus.OPEN.value)
    with store.read() as connection:
        found = {(row.subject_id, row.content) for row in connection.execute(query)}
        return found | {("conflict", *row) for row in connection.execute(open_)}


@settings(
    # The same histories every run, so both databases check the same ones; set
    # MEMSYNC_LIFECYCLE_EXAMPLES to try many more (thousands find nothing today).
    max_examples=int(os.environ.get("MEMSYNC_LIFECYCLE_EXAMPLES", "80")),
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps)
def test_any_history_of_a_source_ends_as_one_clean_sync_of_its_final_state(
    store: Store, history: list[Step]
) -> None:
    note("\n".join(map(repr, history)))  # the steps, readable, when it fails
    tenant, clean = f"history-{uuid.uuid4().hex[:8]}", f"clean-{uuid.uuid4().hex[:8]}"
    clock = FakeClock(T0)
    runner = SyncRunner(
        SyncRepository(store), IngestService(store, clock), clock=clock, heartbeat_every=None
    )
    compiler = CompileService(store, clock=clock)
    source = _connector(tenant, [])
    for step in history:
        clock.advance(STEP)
        _apply(source, step, clock.now())
        clock.advance(STEP)
        runner.sync(source)
        if step.compile_after:
            _compile_everything(compiler, tenant)
    _compile_everything(compiler, tenant)

    clock.advance(STEP)
    runner.sync(_connector(clean, list(source.records)))
    _compile_everything(compiler, clean)

    episodes, revisions = tables.episodes, tables.episode_revisions
    with store.read() as connection:
        stored = connection.execute(
            sa.select(episodes.c.idempotency_key, episodes.c.id, episodes.c.revision).where(
                episodes.c.tenant_id == tenant
            )
        ).all()
        kept = connection.execute(
            sa.select(revisions.c.episode_id, revisions.c.revision, revisions.c.recorded_at)
            .where(revisions.c.tenant_id == tenant)
            .order_by(revisions.c.episode_id, revisions.c.revision)
        ).all()
    touched = {step.id for step in history if step.action != "delete"}
    keys = [row.idempotency_key for row in stored]
    assert len(keys) == len(set(keys))  # one episode per key
    assert {key.rsplit(":", 1)[-1] for key in keys} <= touched
    for row in stored:
        earlier = [k for k in kept if k.episode_id == row.id]
        assert [k.revision for k in earlier] == list(range(1, row.revision))  # in order
        times = [k.recorded_at for k in earlier]
        assert times == sorted(times)
    assert _active(store, tenant) == _active(store, clean)
