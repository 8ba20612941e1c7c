"""``memsync demo``: the main job on the embedded default, told as a story.

It reads three sources into one SQLite file, offline and without tokens: the bundled
example workspace (the workspace connector), a bundled file of episodes (as ``POST
/v1/episodes/batch`` would take them), and a team chat replayed in two acts by the
scripted connector (``samples/story.json``). The second act is what memsync is for: a
claim that changes (Lisbon → Porto), an edited message, a message that was someone
else's (moved to their subject) and a deleted one. The demo then prints one subject's
supersession records and its context bundle, and reads everything again to show that
a second read stores nothing.

Run again, the demo replays nothing the store has seen: the chat's first act is synced
only while the chat has no checkpoint (else the source is only brought to where the
story ends), and every other read is the same read again, so a second ``memsync demo``
creates nothing.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memsync.runtime.app.cli.common import app, console, open_services, print_table, settings
from memsync.runtime.app.cli.episodes import ingest_file
from memsync.runtime.app.cli.sync import print_run

if TYPE_CHECKING:
    from memsync.connectors.fake import FakeConnector, FakeRecord
    from memsync.runtime.app.services import Services
    from memsync.runtime.compiling import CompileResult
    from memsync.runtime.sync import RunRecord

__all__ = ["DEMO_TASK", "DEMO_WORKSPACE_CONNECTOR", "STORY_SUBJECT"]

DEMO_WORKSPACE_CONNECTOR = "demo-workspace"
STORY_SUBJECT = "user:ana"
"""The subject whose supersession records and bundle the demo prints."""
DEMO_TASK = "Where does Ana live and work, and what does she prefer?"
DEMO_BUNDLE_TOKENS = 400


@contextmanager
def sample(name: str) -> Iterator[Path]:
    """A file or directory of the samples shipped with memsync, as a path."""
    # importlib.resources is imported here: only ``demo`` needs it.
    from importlib import resources

    with resources.as_file(resources.files("memsync.runtime.app") / "samples" / name) as path:
        yield path


@dataclass(frozen=True, slots=True)
class _Act:
    """One read of the chat: the records it adds or changes, and those deleted."""

    title: str
    records: tuple[dict[str, str], ...]
    deleted: tuple[str, ...]


def _chat_connector_type() -> type[FakeConnector]:
    from memsync.connectors.fake import FakeConnector

    class ChatMessages(FakeConnector):
        """The fake connector, its records called chat messages."""

        def episode_type(self, record: FakeRecord) -> str:
            return "message"

    return ChatMessages


class _ScriptedChat:
    """The bundled team chat as a source that changes between reads.

    A record changed by an act is updated at the moment the act is played (so the next
    incremental window holds it) and says it occurred at its story time (so valid
    time is the story's). Deletions are dated alike."""

    def __init__(self, services: Services, tenant: str) -> None:
        from memsync.connectors.fake import FakeConfig

        with sample("story.json") as path:
            story: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        self._services = services
        self.acts = [
            _Act(act["title"], tuple(act["records"]), tuple(act["deleted"]))
            for act in story["acts"]
        ]
        [config] = services.registry.parse_configs(
            [
                {
                    "name": story["connector"],
                    "type": "fake",
                    "subject": story["subject"],
                    "tenant": tenant,
                }
            ],
            source="the bundled demo story",
        )
        assert isinstance(config, FakeConfig)  # the registry parsed type "fake"
        self.connector: FakeConnector = _chat_connector_type()(config)

    def read_before(self) -> bool:
        """Whether an earlier demo read the chat (it has a checkpoint)."""
        state = self._services.connector_state(self.connector.config)
        return any(stream.cursor is not None for stream in state.streams)

    def play(self, act: _Act) -> RunRecord:
        """Change the source as ``act`` says, then sync it once."""
        self.change(act)
        return self.read_again()

    def change(self, act: _Act) -> None:
        """Change the source as ``act`` says: its records updated, deletions made, now."""
        now = self._services.clock.now()
        changed = {record["id"]: self._record(record, now) for record in act.records}
        kept = [record for record in self.connector.records if record.id not in changed]
        self.connector.records = [*kept, *changed.values()]
        for record_id in act.deleted:
            self.connector.delete(record_id, at=now)

    def read_again(self) -> RunRecord:
        """One incremental sync of the chat as it stands."""
        return self._services.sync_runner().sync(self.connector)

    @staticmethod
    def _record(record: dict[str, str], now: datetime) -> FakeRecord:
        from memsync.connectors.fake import FakeRecord

        return FakeRecord(
            id=record["id"],
            updated_at=now,
            body=record["body"],
            fields={"group": record["group"]},
            occurred_at=datetime.fromisoformat(record["occurred_at"]),
        )


@app.command()
def demo(
    tenant: Annotated[str, typer.Option(help="tenant to use")] = "default",
) -> None:
    """The main job on the embedded default: sync a bundled workspace and team chat,
    ingest a bundled sample, compile; then the chat changes (a move to Porto, an edit,
    a moved and a deleted message), and the demo prints a supersession record and a
    context bundle. Run it twice: the second run creates nothing."""
    loaded = settings()
    with open_services(loaded) as services:
        console.print(f"store: {loaded.store}")
        chat = _ScriptedChat(services, tenant)
        first, *later = chat.acts
        read_before = chat.read_before()

        _heading("1. The sources, first read")
        print_run(_sync_bundled_workspace(services, tenant))
        _ingest_sample(services, tenant)
        if read_before:
            # The store has seen the story: the chat is as an earlier demo left it.
            chat.change(first)
            console.print("the team chat was read by an earlier demo: its first act is not played")
        else:
            print_run(chat.play(first))
        _print_compiled(_compile_everything(services, tenant))

        for act in later:
            _heading(f"2. The sources change ({act.title})")
            print_run(chat.play(act))
            _print_compiled(_compile_everything(services, tenant))
        _print_store_summary(services, tenant)
        _print_story(services, tenant)

        _heading("3. Everything read again")
        print_run(_sync_bundled_workspace(services, tenant))
        _ingest_sample(services, tenant)
        print_run(chat.read_again())
        _print_compiled(_compile_everything(services, tenant))
        console.print(
            "a second read of the same sources stored nothing: run `memsync demo` again to see it"
        )


def _heading(text: str) -> None:
    console.rule(text, align="left", style="bold")


def _sync_bundled_workspace(services: Services, tenant: str) -> RunRecord:
    """Sync the workspace connector over the example workspace shipped with memsync."""
    with sample("workspace") as root:
        [config] = services.registry.parse_configs(
            [
                {
                    "name": DEMO_WORKSPACE_CONNECTOR,
                    "type": "workspace",
                    "subject": "workspace:{workspace_id}",
                    "root": str(root),
                    "tenant": tenant,
                }
            ],
            source="the bundled demo",
        )
        return services.run_sync(config)


def _ingest_sample(services: Services, tenant: str) -> None:
    with sample("episodes.json") as sample_path:
        summary = ingest_file(services, tenant, sample_path)
    console.print(
        f"ingested the bundled sample: created {summary.created}, "
        f"duplicates {summary.duplicates}, revised {summary.revised}"
    )


def _compile_everything(services: Services, tenant: str) -> list[CompileResult]:
    compile_service = services.compile_service
    return [
        compile_service.compile(tenant, name)
        for name in compile_service.subjects_with_uncompiled(tenant)
    ]


def _print_compiled(compiled: Sequence[CompileResult]) -> None:
    console.print(
        f"compiled {sum(r.episodes_compiled for r in compiled)} episodes: "
        f"memories created {sum(r.memories_created for r in compiled)}, "
        f"superseded {sum(r.memories_superseded for r in compiled)}, "
        f"reinstated {sum(r.memories_reinstated for r in compiled)}, "
        f"tombstoned {sum(r.memories_tombstoned for r in compiled)}, "
        f"conflicts opened {sum(r.conflicts_opened for r in compiled)}"
    )


def _print_store_summary(services: Services, tenant: str) -> None:
    """One row per subject: what the inspector would show, counted."""
    from memsync.compile.types import MemoryStatus

    rows = []
    for subject in services.episodes.subjects(tenant, limit=200, offset=0).subjects:
        every = services.memories.memories(tenant, subject.subject_id, statuses=tuple(MemoryStatus))
        rows.append(
            (
                subject.subject_id,
                str(subject.episode_count),
                *(str(sum(m.status is status for m in every)) for status in MemoryStatus),
                str(len(services.memories.conflicts(tenant, subject.subject_id))),
            )
        )
    print_table(
        f"what is stored for tenant {tenant!r} (memsync inspect SUBJECT)",
        ("subject", "episodes", *(status.value for status in MemoryStatus), "open conflicts"),
        rows,
    )


def _print_story(services: Services, tenant: str) -> None:
    """The story subject's supersession records (who beat whom, by which rule and
    score) and the context bundle an agent reads for it."""
    from memsync.compile.types import MemoryKind, MemoryStatus

    every = services.memories.memories(tenant, STORY_SUBJECT, statuses=tuple(MemoryStatus))
    content = {memory.id: memory.content for memory in every}
    # An episode's own summary is retired with its source: that record says nothing new.
    summaries = {memory.id for memory in every if memory.kind == MemoryKind.EPISODE_SUMMARY}

    def said(memory_id: uuid.UUID | None) -> str:
        return content.get(memory_id, "-") if memory_id is not None else "-"

    print_table(
        f"{STORY_SUBJECT}: supersession records (of memories other than episode summaries; "
        f"every record: memsync inspect {STORY_SUBJECT})",
        ("rule", "claim key", "score", "winner", "loser"),
        (
            (
                record.rule,
                record.claim_key or "-",
                "-" if record.score is None else f"{record.score:.2f}",
                said(record.winner_memory_id),
                said(record.loser_memory_id),
            )
            for record in services.memories.supersessions(tenant, STORY_SUBJECT)
            if record.loser_memory_id not in summaries
        ),
    )
    bundle = services.context.bundle(tenant, STORY_SUBJECT, DEMO_TASK, DEMO_BUNDLE_TOKENS)
    _heading(
        f"{STORY_SUBJECT}: the context bundle for {DEMO_TASK!r} ({bundle.token_estimate} tokens)"
    )
    console.print(bundle.assembled_context, markup=False, highlight=False)
