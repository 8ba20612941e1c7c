"""The compile service: episodes not yet compiled at their revision → memories, as a set.

One call compiles one subject: it lists the subject's uncompiled episodes and works
through them in time-ordered chunks, one transaction each. A chunk derives candidates,
lets the pure resolver decide, applies the change set and advances the compile markers
together; a failure rolls the chunk back, so it consumes nothing of it, and the chunks
before it stay compiled. Deriving is pure, so it happens before the chunk's
transaction, from episodes read outside it (the next chunk's on a helper thread while
this one writes); under the lock the chunk checks that its episodes are
still those, by their stamps, and derives again from a fresh read if any changed.
Concurrent compiles of one subject are serialised per chunk by a lock (a
transaction-scoped advisory lock on PostgreSQL, the database write lock on SQLite): the
second waits, then finds the episodes compiled and skips them.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from typing import Any

import httpx
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from memsync.clock import Clock, SystemClock
from memsync.compile.budget import RequestBudget
from memsync.compile.heuristic import HeuristicCompiler
from memsync.compile.llm import LLMCompiler, LLMStopped, TokenUsage
from memsync.compile.resolve import (
    ChangeSet,
    Defeat,
    OpenConflict,
    SourceEvidence,
    apply_changes,
    manual_resolution,
    reconsider_losers,
    rederive,
    resolve,
    unsettled,
    withdraw_unsupported,
)
from memsync.compile.types import (
    CandidateMemory,
    Compiler,
    ConflictStatus,
    EpisodeView,
    MemoryKind,
    MemoryStatus,
    StoredMemory,
)
from memsync.connectors.retry import RequestObserver, Retrier, RetryPolicy, observing_requests
from memsync.logcontext import bound_log_context
from memsync.runtime.compiling.episodes import (
    Pending,
    Uncompiled,
    compiled_episodes,
    compiled_stamps,
    decided_through,
    marking_compiled,
    pending_episode_ids,
    subjects_with_uncompiled,
    uncompiled_episodes,
    uncompiled_stamps,
)
from memsync.runtime.compiling.memories import (
    RECORDED_EPISODES_PER_SIDE,
    KnownMemories,
    KnownSubjects,
    active_rivals,
    apply_change_set,
    contests_around,
    load_conflict,
    load_for_resolution,
    memories_citing,
    memory_version,
    open_conflicts_of,
    open_conflicts_of_subject,
    recorded_decisions,
    source_standings,
    subject_memories,
    subjects_citing,
)
from memsync.runtime.compiling.recorder import SqlExtractionRecorder
from memsync.runtime.compiling.rules import CompileRules
from memsync.runtime.compiling.settings import (
    DEFAULT_CACHED_MEMORIES,
    DEFAULT_CHUNK_EPISODES,
    CompileSettings,
    LLMSettings,
)
from memsync.runtime.storage.engine import Store
from memsync.runtime.storage.statistics import StatisticsRefresher
from memsync.stopping import Sleeper

__all__ = [
    "ChunkCommitting",
    "CompileResult",
    "CompileService",
    "CompileSummary",
    "ConflictNotFound",
    "ConflictResolution",
    "LLMSpend",
    "compile_extras",
    "result_summary",
]

log = logging.getLogger("memsync.compile")


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileSummary:
    """What one compile did, counted: what ``memsync compile --json`` prints and a compile
    job records. The API's compile response extends it rather than repeat its fields.

    ``compile_id`` names this compile: the ``job_id`` recorded on every memory,
    supersession and conflict it wrote (a compile job's id when a worker ran it). It is
    not called ``job_id`` here because Statewave clients read a ``job_id`` in a compile
    answer as "accepted, still running".
    """

    subject_id: str
    compile_id: str
    episodes_compiled: int
    memories_created: int
    memories_superseded: int
    """Memories that are superseded now and were not when the compile started (created
    superseded, or moved there), counted once however many of its chunks moved them:
    the net change the compile made to the store, not the decisions it took on the way.
    A memory superseded and brought back within one compile is not counted."""
    memories_reinstated: int
    """Memories that were superseded when the compile started and are active now.
    Summed over any schedule of compiles, ``memories_superseded - memories_reinstated``
    is the number of superseded memories the store gained: what one compile of all the
    episodes reports as ``memories_superseded`` (its ``memories_reinstated`` is 0)."""
    memories_tombstoned: int
    """Memories, of this subject or of the subjects a record moved away from, that every
    source left (moved or deleted): they are off the read path now (net, as above)."""
    conflicts_opened: int
    """Conflicts that are open now and were not when the compile started (net, as
    above: one a chunk opened and a later chunk closed, a side retired, is not
    counted)."""


@dataclass(frozen=True, slots=True)
class LLMSpend:
    """What one compile's requests to the model cost, as the model reported it."""

    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    estimated_cost: float | None
    """At the configured prices (``compile.llm.*_price_per_million``); ``None`` without."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class CompileResult(CompileSummary):
    """What one compile did. ``memories`` are the memories it created.

    ``stopped`` says why the compile ended before every uncompiled episode
    (``max_tokens_per_job``, ``rate_limited``; ``None``: it compiled them all): the
    chunks before the stop are compiled and every answer the model gave is recorded,
    so the next compile carries on, asking only for what is missing. ``llm`` is what
    the model was asked (``None`` for a compiler without a model)."""

    memories: tuple[StoredMemory, ...]
    stopped: str | None = None
    llm: LLMSpend | None = None


class ConflictNotFound(LookupError):
    """No open conflict with that id in this tenant."""


@dataclass(frozen=True, slots=True)
class ConflictResolution:
    conflict_id: uuid.UUID
    kept_memory_id: uuid.UUID
    superseded_memory_id: uuid.UUID


_Transition = tuple[uuid.UUID, MemoryStatus | None, MemoryStatus]
"""A memory's status before and after one change (``None`` before: created)."""

_ConflictTransition = tuple[uuid.UUID, bool]
"""A conflict opened (``True``) or closed (``False``) by one change."""


@dataclass(frozen=True, slots=True)
class _ChunkOutcome:
    """What one chunk's transaction did, kept after its change sets are let go."""

    episodes_compiled: int
    created: tuple[StoredMemory, ...]
    transitions: tuple[_Transition, ...]
    """Every status a memory was created with or moved to, in the order applied."""
    conflict_transitions: tuple[_ConflictTransition, ...]
    """Every conflict the chunk opened or closed, in the order applied."""
    memories_loaded: int
    known: KnownMemories | None = None
    """The subject's memories as the chunk left them, for the next chunk (None: that
    chunk loads them)."""
    statistics_due: bool = False
    """The chunk crossed the statistics threshold: ``memories`` was analysed in its
    transaction, the rest of the refresher's tables are still to be."""
    elsewhere: frozenset[str] = frozenset()
    """The other subjects whose memories the chunk retired or narrowed (a record moved
    away from them, or was deleted where they cite it)."""

    @property
    def memories_created(self) -> int:
        return len(self.created)

    @classmethod
    def of(
        cls,
        episodes_compiled: int,
        change_sets: Sequence[ChangeSet],
        *,
        memories_loaded: int,
        known: KnownMemories | None = None,
        statistics_due: bool = False,
        elsewhere: frozenset[str] = frozenset(),
    ) -> _ChunkOutcome:
        transitions: list[_Transition] = []
        conflict_transitions: list[_ConflictTransition] = []
        for changes in change_sets:
            conflict_transitions.extend((c.id, True) for c in changes.open_conflicts)
            conflict_transitions.extend((i, False) for i in changes.resolved_conflict_ids)
            # A memory can be created already superseded (it lost on arrival).
            transitions.extend((m.id, None, m.status) for m in changes.memories_to_create)
            transitions.extend(
                (change.memory_id, change.from_status, change.to_status)
                for change in changes.status_changes
            )
        return cls(
            episodes_compiled=episodes_compiled,
            created=tuple(m for changes in change_sets for m in changes.memories_to_create),
            transitions=tuple(transitions),
            conflict_transitions=tuple(conflict_transitions),
            memories_loaded=memories_loaded,
            known=known,
            statistics_due=statistics_due,
            elsewhere=elsewhere,
        )


@dataclass(slots=True)
class _Tally:
    """The sum of a compile's chunks. Statuses are counted by their net change over the
    whole compile: each memory's status before its first change in the compile against
    its status after its last, so a memory a chunk supersedes and a later one brings
    back counts in neither (one transaction of all the chunks would not have moved it).
    """

    episodes_compiled: int = 0
    created: list[StoredMemory] = field(default_factory=list)
    # memory id -> (status before the compile, None if it created it; status now)
    statuses: dict[uuid.UUID, tuple[MemoryStatus | None, MemoryStatus]] = field(
        default_factory=dict
    )
    # conflict id -> (open before the compile, open now). A conflict's first change in
    # the compile says how it stood before: opening it, it was not open; closing it, it was.
    conflicts: dict[uuid.UUID, tuple[bool, bool]] = field(default_factory=dict)

    def add(self, outcome: _ChunkOutcome) -> None:
        self.episodes_compiled += outcome.episodes_compiled
        self.created.extend(outcome.created)
        self.statuses = self._after(outcome)
        self.conflicts = self._conflicts_after(outcome)

    @property
    def conflicts_opened(self) -> int:
        return self._opened(self.conflicts)

    def _conflicts_after(self, outcome: _ChunkOutcome) -> dict[uuid.UUID, tuple[bool, bool]]:
        conflicts = dict(self.conflicts)
        for conflict_id, opened in outcome.conflict_transitions:
            before = conflicts[conflict_id][0] if conflict_id in conflicts else not opened
            conflicts[conflict_id] = (before, opened)
        return conflicts

    @staticmethod
    def _opened(conflicts: Mapping[uuid.UUID, tuple[bool, bool]]) -> int:
        return sum(now and not before for before, now in conflicts.values())

    def _after(
        self, outcome: _ChunkOutcome
    ) -> dict[uuid.UUID, tuple[MemoryStatus | None, MemoryStatus]]:
        statuses = dict(self.statuses)
        for memory_id, before, after in outcome.transitions:
            first = statuses[memory_id][0] if memory_id in statuses else before
            statuses[memory_id] = (first, after)
        return statuses

    @staticmethod
    def _net(
        statuses: Mapping[uuid.UUID, tuple[MemoryStatus | None, MemoryStatus]],
    ) -> dict[str, int]:
        superseded, tombstoned = MemoryStatus.SUPERSEDED, MemoryStatus.TOMBSTONED
        return {
            "memories_superseded": sum(
                now is superseded and before is not superseded for before, now in statuses.values()
            ),
            "memories_reinstated": sum(
                before is superseded and now is MemoryStatus.ACTIVE
                for before, now in statuses.values()
            ),
            "memories_tombstoned": sum(
                now is tombstoned and before is not tombstoned for before, now in statuses.values()
            ),
        }

    def counts(self, outcome: _ChunkOutcome) -> dict[str, Any]:
        """What :data:`ChunkCommitting` is handed for ``outcome``, the next chunk: what
        it adds to the compile's totals. A status count may be negative (the chunk
        undid what an earlier chunk of the compile did), so the totals of a job that
        adds its chunks' counts are the compile's net counts."""
        before, after = self._net(self.statuses), self._net(self._after(outcome))
        return {
            "episodes_compiled": outcome.episodes_compiled,
            "memories_created": outcome.memories_created,
            **{name: after[name] - before[name] for name in after},
            "conflicts_opened": (
                self._opened(self._conflicts_after(outcome)) - self.conflicts_opened
            ),
            "memory_ids": [str(memory.id) for memory in outcome.created],
        }

    def result(self, subject_id: str, job_id: str) -> CompileResult:
        net = self._net(self.statuses)
        return CompileResult(
            subject_id=subject_id,
            compile_id=job_id,
            episodes_compiled=self.episodes_compiled,
            memories_created=len(self.created),
            memories_superseded=net["memories_superseded"],
            memories_reinstated=net["memories_reinstated"],
            memories_tombstoned=net["memories_tombstoned"],
            conflicts_opened=self.conflicts_opened,
            memories=tuple(self.created),
        )


ChunkCommitting = Callable[[Connection, Mapping[str, Any]], None]
"""Called inside each chunk's transaction, last, with what the chunk did: the counts of
:class:`CompileSummary` (``episodes_compiled``, ``memories_created``,
``memories_superseded``, ``memories_reinstated``, ``memories_tombstoned``,
``conflicts_opened``: what the chunk adds to the compile's net counts, which may be
negative for a status) and ``memory_ids``, the ids of the
memories it created. What it writes commits with the chunk, or rolls back with it."""


@dataclass(frozen=True, slots=True)
class _Recompiling:
    """What one chunk's transaction compiles: its subject, the episodes compiled (again)
    in it and the memory keys their current revisions derive, its job and its time."""

    tenant_id: str
    subject_id: str
    derived: Mapping[uuid.UUID, set[str]]
    """Each episode compiled in the chunk, and the memory keys its revision derives."""
    job_id: str
    now: datetime

    def evidence(self, connection: Connection, memories: Sequence[StoredMemory]) -> SourceEvidence:
        """Where the sources of ``memories`` stand, with this chunk's episodes judged by
        what they derive now."""
        return source_standings(connection, self.tenant_id, memories, self.derived)


@dataclass(frozen=True, slots=True)
class _Extraction:
    """A chunk's uncompiled episodes as one read found them (time order), and the
    candidates the compiler derived from those that are not tombstones."""

    episodes: list[Uncompiled]
    candidates: list[CandidateMemory]

    @classmethod
    def of(cls, compiler: Compiler, episodes: list[Uncompiled]) -> _Extraction:
        # A tombstone derives nothing; compiling it is retiring what it supported.
        return cls(episodes, compiler.compile([e.view for e in episodes if not e.deleted]))

    def still_current(
        self,
        connection: Connection,
        tenant_id: str,
        subject_id: str,
        episode_ids: Sequence[uuid.UUID],
    ) -> bool:
        """Whether the uncompiled episodes among ``episode_ids`` (those this was read
        from) are, in ``connection``'s transaction, exactly the ones read: same ids,
        revisions and marks."""
        stamps = uncompiled_stamps(connection, tenant_id, subject_id, episode_ids)
        return stamps == {found.stamp for found in self.episodes}


class _ReadAhead:
    """Reads a chunk's episodes and derives their candidates outside its transaction.

    :meth:`start` hands the next chunk to a helper thread, which does it while the
    current chunk writes (the database driver lets go of the GIL while it waits, and
    the database works on the other core); :meth:`take` waits for it.
    Only for compilers that do not prepare ahead: those call a model, and their
    preparing stays where it was, before the chunk's lock on the compile's own thread.
    """

    def __init__(
        self,
        store: Store,
        compiler: Compiler,
        tenant_id: str,
        subject_id: str,
        helper: ThreadPoolExecutor,
    ) -> None:
        self._store, self._compiler, self._helper = store, compiler, helper
        self._tenant_id, self._subject_id = tenant_id, subject_id
        self._started: tuple[list[uuid.UUID], Future[_Extraction]] | None = None

    def start(self, chunk: Sequence[Pending]) -> None:
        """Begin reading and deriving ``chunk`` on the helper thread. A failure is kept
        and raised by :meth:`take`: it belongs to that chunk, not to the one running."""
        ids = [episode.id for episode in chunk]
        if ids:
            context = contextvars.copy_context()  # the log's tenant and subject
            self._started = (ids, self._helper.submit(context.run, self._extract, ids))

    def take(self, chunk: Sequence[Pending]) -> _Extraction:
        """``chunk``'s extraction: the one started for it, or one made now."""
        ids = [episode.id for episode in chunk]
        started, self._started = self._started, None
        if started is not None:
            if started[0] == ids:
                return started[1].result()
            # Started for other episodes (the chunks were cut otherwise): let it end
            # unused first, so that the compiler is never called on two threads at once.
            started[1].exception()
        return self._extract(ids)

    def _extract(self, ids: Sequence[uuid.UUID]) -> _Extraction:
        with self._store.read() as connection:
            found = uncompiled_episodes(connection, self._tenant_id, self._subject_id, ids)
        return _Extraction.of(self._compiler, found)


@dataclass(frozen=True, slots=True)
class _Chunk:
    """Where a chunk stands in its compile: its episodes, those after it, and the
    subject's memories as the chunk before it left them (None: load them)."""

    chunk: Sequence[Pending]
    following: Sequence[Pending]
    known: KnownMemories | None


def _derived(
    views: Sequence[EpisodeView], candidates: Sequence[CandidateMemory]
) -> dict[uuid.UUID, set[str]]:
    derived: dict[uuid.UUID, set[str]] = {view.id: set() for view in views}
    for candidate in candidates:
        for episode_id in candidate.source_episode_ids:
            derived[episode_id].add(candidate.memory_key)
    return derived


def _contested(candidates: Sequence[CandidateMemory]) -> list[CandidateMemory]:
    """The candidates of kinds that can be in a contest (not episode summaries)."""
    return [c for c in candidates if c.kind is not MemoryKind.EPISODE_SUMMARY]


def _by_subject(memories: Sequence[StoredMemory]) -> dict[str, list[StoredMemory]]:
    grouped: dict[str, list[StoredMemory]] = defaultdict(list)
    for memory in memories:
        grouped[memory.subject_id].append(memory)
    return dict(sorted(grouped.items()))


def _chunk_end(pending: Sequence[Pending], start: int, size: int) -> int:
    """Where the chunk of ``pending`` (in time order) that starts at ``start`` ends:
    after ``size`` episodes, and then after every further one that occurred at the same
    moment as its last. The resolver orders what one chunk derives by time, then by
    memory key; episodes of one moment split across two chunks would be taken in episode
    id order instead, and which of two unkeyed statements of that moment wins would
    depend on the chunk size."""
    end = min(start + size, len(pending))
    while end < len(pending) and pending[end].occurred_at == pending[end - 1].occurred_at:
        end += 1
    return end


def _subject_lock_key(tenant_id: str, subject_id: str) -> int:
    digest = hashlib.sha256(f"memsync-compile\0{tenant_id}\0{subject_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class CompileService:
    """Compiles subjects. The single compile path for the API, the CLI and workers.

    Repeats: a second compile with no new or revised episodes reads the (indexed) set
    of uncompiled episodes, finds it empty and writes nothing: ``memories_created``
    is 0. Conflicts between memories are settled by the resolver's policies and kept
    as supersession records; nothing is deleted. A record that moved here from another
    subject, or was deleted, retires the memories only it supported, in whatever
    subject they are (``tombstoned``, rule ``source_moved`` or ``source_deleted``):
    compiling the subject a record moved to is what cleans the one it left. In the same
    transaction, the contests such a memory (or one that lost its latest assertion) was
    in are decided again from the evidence left, so what it had beaten comes back
    (``winner_retired``), in whatever subject it is.
    """

    def __init__(
        self,
        store: Store,
        *,
        compiler: Compiler | None = None,
        rules: CompileRules | None = None,
        clock: Clock | None = None,
        llm: LLMSettings | None = None,
        http: httpx.Client | None = None,
        chunk_episodes: int = DEFAULT_CHUNK_EPISODES,
        cached_memories: int = DEFAULT_CACHED_MEMORIES,
        on_compiled: Callable[[CompileResult], None] | None = None,
        llm_budget: RequestBudget | None = None,
        retrier: Retrier | None = None,
        llm_observer: RequestObserver | None = None,
        on_llm_usage: Callable[[LLMSpend], None] | None = None,
    ) -> None:
        """``compiler`` overrides everything; else ``llm`` selects the LLM compiler (its
        extractions recorded per tenant in the store); else the heuristic compiler.
        ``chunk_episodes`` is how many episodes one transaction compiles;
        ``cached_memories`` bounds what is kept of each subject's last compile for its
        next (:class:`~memsync.runtime.compiling.memories.KnownSubjects`).
        ``on_compiled`` is told every compile that finished (the process's metrics).
        ``llm_budget`` is the process's limit on requests to the model, shared by every
        compile of this service (default: from ``llm``'s limits); ``retrier`` retries
        a request on 429 and 5xx (default: ``llm.max_attempts``, backoff from 1 s);
        ``llm_observer`` is told how each request attempt ended, ``on_llm_usage`` what
        each answered request cost, as it is answered (both: the metrics)."""
        if chunk_episodes < 1:
            raise ValueError(f"chunk_episodes must be at least 1, not {chunk_episodes}")
        self._store = store
        self._chunk_episodes = chunk_episodes
        self._known = KnownSubjects(cached_memories)
        self._rules = rules or CompileRules()
        self._clock = clock or SystemClock()
        self._compiler = compiler
        # Without fresh statistics, the cached plan of memory_sources' foreign-key check
        # keeps scanning a memories table that grew from empty, once per inserted row.
        self._statistics = StatisticsRefresher(store, ["memories", "memory_sources"])
        self._llm = llm if compiler is None else None
        self._on_compiled = on_compiled
        self._http = http
        if self._llm is not None and self._http is None:
            self._http = httpx.Client(
                timeout=self._llm.timeout_seconds,
                # One connection per request thread, kept between requests.
                limits=httpx.Limits(max_connections=self._llm.max_concurrency),
            )
        self._llm_budget = llm_budget
        if self._llm is not None and llm_budget is None:
            self._llm_budget = RequestBudget(
                max_concurrency=self._llm.max_concurrency,
                requests_per_minute=self._llm.requests_per_minute,
                tokens_per_minute=self._llm.tokens_per_minute,
            )
        self._retrier = retrier
        self._llm_observer = llm_observer
        self._on_llm_usage = on_llm_usage
        if self._llm is not None and retrier is None:
            self._retrier = Retrier(RetryPolicy(max_attempts=self._llm.max_attempts))

    @classmethod
    def from_settings(
        cls,
        store: Store,
        settings: CompileSettings,
        clock: Clock | None = None,
        on_compiled: Callable[[CompileResult], None] | None = None,
        llm_observer: Callable[[str], RequestObserver] | None = None,
        sleeper: Sleeper | None = None,
        on_llm_usage: Callable[[LLMSpend], None] | None = None,
    ) -> CompileService:
        """The service the configuration file describes; ``llm_observer`` gives the
        request observer of a model and ``on_llm_usage`` is told each answered request's
        tokens (the process's metrics); ``sleeper`` is what waits
        between retries of a model request (the process's stop event, so a stopping
        worker is not held by a ``Retry-After``)."""
        llm = settings.llm if settings.compiler == "llm" else None
        retrier = None
        if llm is not None:
            retrier = Retrier(RetryPolicy(max_attempts=llm.max_attempts), sleeper=sleeper)
        return cls(
            store,
            rules=CompileRules.from_settings(settings),
            clock=clock,
            llm=llm,
            chunk_episodes=settings.chunk_episodes,
            cached_memories=settings.cached_memories,
            on_compiled=on_compiled,
            retrier=retrier,
            llm_observer=llm_observer(llm.model) if llm and llm_observer else None,
            on_llm_usage=on_llm_usage,
        )

    def _compiler_for(self, tenant_id: str, *, replay_only: bool = False) -> Compiler:
        if self._compiler is not None:
            return self._compiler
        if self._llm is not None and self._http is not None:
            return LLMCompiler(
                self._http,
                base_url=self._llm.base_url,
                model=self._llm.model,
                api_key=self._llm.api_key.get_secret_value(),
                recorder=SqlExtractionRecorder(self._store, tenant_id, self._clock),
                registry=self._rules.registry,
                batch_size=self._llm.batch_size,
                budget=self._llm_budget,
                retrier=self._retrier,
                max_tokens=self._llm.max_tokens_per_job,
                replay_only=replay_only,
                protocol=self._llm.protocol,
                max_output_tokens=self._llm.max_output_tokens,
                on_usage=self._told_usage,
            )
        if replay_only:
            raise ValueError("--replay-only needs compile.compiler: llm (it replays extractions)")
        return HeuristicCompiler(self._rules.registry)

    def _spend(self, compiler: Compiler) -> LLMSpend | None:
        if not isinstance(compiler, LLMCompiler):
            return None
        return self._spent(compiler.usage)

    def _spent(self, usage: TokenUsage) -> LLMSpend | None:
        if self._llm is None:
            return None
        return LLMSpend(
            model=self._llm.model,
            requests=usage.requests,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.completion_tokens,
            estimated_cost=self._llm.estimated_cost(usage.prompt_tokens, usage.completion_tokens),
        )

    def _told_usage(self, usage: TokenUsage) -> None:
        spend = self._spent(usage)
        if self._on_llm_usage is not None and spend is not None:
            self._on_llm_usage(spend)

    def compile(
        self,
        tenant_id: str,
        subject_id: str,
        *,
        job_id: str | None = None,
        on_chunk: ChunkCommitting | None = None,
        replay_only: bool = False,
    ) -> CompileResult:
        """Compile ``subject_id``'s uncompiled episodes; see the class docstring.

        The episodes are compiled in time order, ``chunk_episodes`` at a time (plus
        the rest of a chunk's last moment: one moment is never split), one transaction
        per chunk; the chunk size changes no memory and no decision. A failure rolls
        back the chunk it happens in; the chunks before it stay compiled (memories and
        markers together), so a retry carries on where this call stopped. ``on_chunk``
        records a chunk's counts in its own transaction (a compile job's progress,
        which then survives a crash).

        A compiler that does not prepare ahead is called before each chunk's
        transaction, for the next chunk on a helper thread while this one writes; what
        it derived is used only if the chunk's episodes are unchanged under the lock.

        With the LLM compiler: a compile stopped by its token ceiling or by a rate limit
        past the retry caps returns what its chunks before the stop did, with
        ``stopped`` set (see :class:`CompileResult`). ``replay_only`` asks the model
        nothing: an episode without a recorded extraction fails the chunk it is in
        (``LLMExtractionError`` naming the episodes), before that chunk writes anything.
        """
        job_id = job_id or f"compile-{uuid.uuid4()}"
        observed = (
            observing_requests(self._llm_observer)
            if self._llm_observer is not None
            else contextlib.nullcontext()
        )
        with bound_log_context(tenant=tenant_id, subject=subject_id), observed:
            result = self._compile(tenant_id, subject_id, job_id, on_chunk, replay_only)
        if self._on_compiled is not None:
            self._on_compiled(result)
        return result

    def _compile(
        self,
        tenant_id: str,
        subject_id: str,
        job_id: str,
        on_chunk: ChunkCommitting | None,
        replay_only: bool,
    ) -> CompileResult:
        compiler = self._compiler_for(tenant_id, replay_only=replay_only)
        with self._store.read() as connection:
            pending = pending_episode_ids(connection, tenant_id, subject_id)
            decided = decided_through(connection, tenant_id, subject_id) if pending else None
        # Episodes at or before a moment already compiled (a backfill, a late connector,
        # a revision or deletion of a compiled record) change the past the subject's
        # decisions were taken on: once they are compiled, the subject is decided again
        # from all of its evidence. Later ones only continue the past.
        late = decided is not None and pending[0].occurred_at <= decided
        total = _Tally()
        elsewhere: set[str] = set()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compile-ahead") as helper:
            ahead = None
            if not compiler.prepares_ahead:
                ahead = _ReadAhead(self._store, compiler, tenant_id, subject_id, helper)
            position, size = 0, self._chunk_episodes
            # What this subject's last compile here left, checked against its version
            # before it is used: a small compile then loads only what its episodes name.
            known = self._known.get(tenant_id, subject_id)
            stopped: str | None = None
            while position < len(pending):
                chunk = pending[position : _chunk_end(pending, position, size)]
                following = pending[position + len(chunk) :]
                try:
                    outcome = self._compile_chunk(
                        compiler,
                        tenant_id,
                        subject_id,
                        _Chunk(chunk, following, known),
                        ahead,
                        job_id,
                        on_chunk,
                        total,
                    )
                except LLMStopped as stop:
                    # Asked before the chunk's transaction: nothing of it was written,
                    # and what the model answered is recorded for the next compile.
                    log.warning("compile stopped", extra={"reason": stop.reason})
                    stopped = stop.reason
                    break
                known = outcome.known
                total.add(outcome)
                elsewhere |= outcome.elsewhere
                if outcome.statistics_due:
                    # On the helper, behind the next chunk's read-ahead: the database
                    # analyses while this thread compiles that chunk, and the compile
                    # returns once the helper is done (the executor's exit waits for it).
                    # ``memories`` itself was analysed inside the chunk.
                    helper.submit(self._statistics.analyze_or_log, exclude=["memories"])
                position += len(chunk)
                size = self._next_chunk_size(outcome.memories_loaded)
            if pending:
                # A subject decided again below (late episodes) changes after its last
                # chunk: its next compile must load its memories anyway.
                self._known.keep(tenant_id, subject_id, None if late else known)
        # A subject a record left had its decisions changed by evidence going away, as
        # this one's by late episodes: each is decided again from what it has left.
        for again in sorted(elsewhere - {subject_id}) + ([subject_id] if late else []):
            total.add(self._redecide(compiler, tenant_id, again, job_id, on_chunk, total))
        result = replace(
            total.result(subject_id, job_id), stopped=stopped, llm=self._spend(compiler)
        )
        log.info(
            "compiled",
            extra={
                "episodes_compiled": result.episodes_compiled,
                "memories_created": result.memories_created,
                "memories_superseded": result.memories_superseded,
                "conflicts_opened": result.conflicts_opened,
            },
        )
        return result

    def _next_chunk_size(self, memories_loaded: int) -> int:
        # Every chunk loads the subject's active memories again; a chunk at least that
        # large keeps the reload at most one memory per episode compiled, so a compile
        # stays linear however large the subject grows.
        return max(self._chunk_episodes, memories_loaded)

    def _compile_chunk(
        self,
        compiler: Compiler,
        tenant_id: str,
        subject_id: str,
        position: _Chunk,
        ahead: _ReadAhead | None,
        job_id: str,
        on_chunk: ChunkCommitting | None,
        tally: _Tally,
    ) -> _ChunkOutcome:
        """Compile ``position.chunk`` in one transaction; ``ahead`` (when given) reads
        the start of what follows it while this chunk writes. ``tally`` is what the
        compile's chunks before this one did (this one is not added to it here)."""
        chunk, following = position.chunk, position.following
        ids = [episode.id for episode in chunk]
        prepared: set[tuple[uuid.UUID, int]] | None = None
        extraction: _Extraction | None = None
        if ahead is not None:
            extraction = ahead.take(chunk)
        elif compiler.prepares_ahead:
            # Ask the model before taking the subject's lock and the write transaction:
            # extraction is slow network I/O and is recorded, so the compile below
            # replays it without a request.
            with self._store.read() as connection:
                pending = [
                    found.view
                    for found in uncompiled_episodes(connection, tenant_id, subject_id, ids)
                    if not found.deleted
                ]
            compiler.prepare(pending)
            prepared = {(view.id, view.revision) for view in pending}
        # A record that moved here, or was revised or deleted, may have left memories in
        # other subjects too: those subjects are locked with this one, in one order.
        seen = [episode.id for episode in chunk if episode.seen]
        cited_elsewhere: set[str] = set()
        if seen:
            with self._store.read() as connection:
                cited_elsewhere = subjects_citing(connection, tenant_id, seen) - {subject_id}
        with self._store.write() as connection:
            locked = self.lock_subjects(connection, tenant_id, {subject_id, *cited_elsewhere})
            now = self._clock.now()
            # Check again under the lock: a concurrent compile may have taken some of
            # these episodes since they were read, and ingest may have revised some or
            # moved them to another subject.
            if extraction is None or not extraction.still_current(
                connection, tenant_id, subject_id, ids
            ):
                episodes = uncompiled_episodes(connection, tenant_id, subject_id, ids)
                if prepared is not None:
                    # Whatever was revised since the extraction waits for the next
                    # compile, so the model is never called while the write lock is held.
                    episodes = [e for e in episodes if (e.view.id, e.view.revision) in prepared]
                extraction = _Extraction.of(compiler, episodes)
            episodes, candidates = extraction.episodes, extraction.candidates
            if not episodes:
                return _ChunkOutcome.of(0, [], memories_loaded=0)
            views = [found.view for found in episodes]
            derived_keys = {candidate.memory_key for candidate in candidates}
            existing = None
            if position.known is not None:
                existing = position.known.for_resolution(
                    connection, tenant_id, subject_id, derived_keys
                )
            if existing is None:
                existing = load_for_resolution(connection, tenant_id, subject_id, derived_keys)
            memories_loaded = len(existing)

            # Change sets of the other subjects a record left: each bumps its own version.
            elsewhere: dict[str, list[ChangeSet]] = {}
            seen_again = [found.view.id for found in episodes if found.compiled_revision > 0]
            if seen_again:
                existing, elsewhere = self._settle_sources(
                    connection,
                    _Recompiling(tenant_id, subject_id, _derived(views, candidates), job_id, now),
                    existing,
                    seen_again,
                    locked,
                )
            change_sets = elsewhere.pop(subject_id, [])
            # The episodes are marked while the resolver works: nothing before the
            # commit reads their marks again.
            with marking_compiled(connection, tenant_id, views):
                resolved = resolve(
                    subject_id,
                    candidates,
                    existing,
                    self._rules.policies,
                    self._rules.registry,
                    job_id,
                    now,
                    self._rules.thresholds,
                )
                change_sets.append(resolved)
            if ahead is not None:
                # Now, not sooner: while the chunk's writes keep the database busy, this
                # thread mostly waits, and the helper has the interpreter to itself.
                ahead.start(
                    following[: _chunk_end(following, 0, self._next_chunk_size(memories_loaded))]
                )
            revisions = {view.id: view.revision for view in views}
            writes = [
                *((subject_id, changes) for changes in change_sets),
                *((other, changes) for other, there in elsewhere.items() for changes in there),
            ]
            every_set = [changes for _, changes in writes]
            # Counted before the writes, so that the chunk crossing the threshold already
            # plans its provenance's foreign-key checks against the grown table: the
            # largest insert of memories is followed by an ANALYZE in this transaction.
            statistics_due = self._statistics.count(
                sum(len(changes.memories_to_create) for changes in every_set)
            )
            analyze_after = (
                max(every_set, key=lambda changes: len(changes.memories_to_create))
                if statistics_due
                else None
            )
            for written_subject, changes in writes:
                apply_change_set(
                    connection,
                    tenant_id,
                    changes,
                    revisions,
                    now,
                    job_id,
                    subject_id=written_subject,
                    analyze_memories=changes is analyze_after,
                    label_rules=self._rules.labels,
                )
            known = None
            if (following or self._known.capacity) and not seen_again:
                # For the next chunk, or after the last one for the subject's next compile.
                # Read before ``on_chunk``: what it writes bumps the version again, and
                # the next chunk then loads the memories afresh. (A chunk that settled
                # sources is rare and spans subjects: the next one loads.)
                version = memory_version(connection, tenant_id, subject_id)
                if version is not None:
                    known = KnownMemories.after(version, existing, resolved)
            outcome = _ChunkOutcome.of(
                len(views),
                every_set,
                memories_loaded=memories_loaded,
                known=known,
                statistics_due=statistics_due,
                elsewhere=frozenset(other for other, there in elsewhere.items() if there),
            )
            if on_chunk is not None:
                on_chunk(connection, tally.counts(outcome))
        return outcome

    def _redecide(
        self,
        compiler: Compiler,
        tenant_id: str,
        subject_id: str,
        job_id: str,
        on_chunk: ChunkCommitting | None,
        tally: _Tally,
    ) -> _ChunkOutcome:
        """Decide the subject's contests again from every episode compiled, in one
        transaction (see ``rederive``): what one compile of all of them in time order
        decides, whatever order they arrived in and however the compiles were cut.

        The episodes are read and derived before the write transaction (a compiler that
        prepares ahead asks its model there); under the subject's lock their stamps are
        checked, and they are read and derived again if a compile or ingest changed
        them. ``on_chunk`` is handed the transaction's counts like a chunk's.
        """
        with self._store.read() as connection:
            views = compiled_episodes(connection, tenant_id, subject_id)
        candidates = _contested(compiler.compile(views))
        with self._store.write() as connection:
            self._lock_subject(connection, tenant_id, subject_id)
            now = self._clock.now()
            if compiled_stamps(connection, tenant_id, subject_id) != {
                (view.id, view.revision) for view in views
            }:
                views = compiled_episodes(connection, tenant_id, subject_id)
                candidates = _contested(compiler.compile(views))
            # Episode summaries are in no contest: their status, times and provenance
            # are already what any order gives (merges take the earliest and latest
            # assertion, and only the withdrawal of their sources retires them).
            stored = subject_memories(connection, tenant_id, subject_id, contested=True)
            changes = rederive(
                subject_id,
                candidates,
                stored,
                recorded_decisions(connection, tenant_id, subject_id),
                open_conflicts_of_subject(connection, tenant_id, subject_id),
                self._rules.policies,
                self._rules.registry,
                job_id,
                now,
                self._rules.thresholds,
                listed=RECORDED_EPISODES_PER_SIDE,
            )
            apply_change_set(
                connection,
                tenant_id,
                changes,
                {view.id: view.revision for view in views},
                now,
                job_id,
                subject_id=subject_id,
                label_rules=self._rules.labels,
            )
            outcome = _ChunkOutcome.of(0, [changes], memories_loaded=len(stored))
            if on_chunk is not None:
                on_chunk(connection, tally.counts(outcome))
        return outcome

    def _settle_sources(
        self,
        connection: Connection,
        compiling: _Recompiling,
        existing: list[StoredMemory],
        seen_again: Sequence[uuid.UUID],
        locked: set[str],
    ) -> tuple[list[StoredMemory], dict[str, list[ChangeSet]]]:
        """Retire, or narrow to the evidence left, the memories of any subject whose
        sources among ``seen_again`` (episodes compiled before) left them, then decide
        again the contests those memories had won.

        Returns the compiled subject's memories as they stand after that (what resolve
        is given) and the change sets of every subject touched, in the order they apply.
        """
        tenant_id, subject_id = compiling.tenant_id, compiling.subject_id
        citing = memories_citing(connection, tenant_id, seen_again)
        # Rare: a memory citing these appeared in a subject not locked yet.
        self.lock_subjects(connection, tenant_id, {m.subject_id for m in citing} - locked)
        evidence = compiling.evidence(connection, citing)
        cited = _by_subject(citing)
        withdrawn = {
            cited_subject: withdraw_unsupported(
                memories,
                evidence.standings,
                compiling.job_id,
                compiling.now,
                asserted_at=evidence.asserted_at,
            )
            for cited_subject, memories in cited.items()
        }
        shaken = {
            cited_subject: unsettled(cited[cited_subject], evidence.standings, changes)
            for cited_subject, changes in withdrawn.items()
        }
        every_shaken = set().union(*shaken.values())
        # The contests those memories were in, down and up their chains: one statement.
        contested, defeats = contests_around(connection, tenant_id, every_shaken)
        evidence = evidence | compiling.evidence(connection, contested)
        contested_in = _by_subject(contested)
        subject_of = {memory.id: memory.subject_id for memory in contested}
        defeats_in: dict[str, list[Defeat]] = defaultdict(list)
        for defeat in defeats:
            defeats_in[subject_of[defeat.loser_memory_id]].append(defeat)
        conflicts_in: dict[str, list[OpenConflict]] = defaultdict(list)
        for conflict in open_conflicts_of(connection, tenant_id, every_shaken):
            conflicts_in[conflict.subject_id].append(conflict)

        settled: dict[str, list[ChangeSet]] = {}
        for cited_subject, changes in withdrawn.items():
            around = contested_in.get(cited_subject, [])
            known = [*cited[cited_subject], *around]
            if cited_subject == subject_id:
                known.extend(existing)
            elif around:
                known.extend(active_rivals(connection, tenant_id, cited_subject, around))
            memories = apply_changes(list({m.memory_key: m for m in known}.values()), changes)
            settled[cited_subject] = [changes]
            if around or cited_subject in conflicts_in:
                again = reconsider_losers(
                    cited_subject,
                    memories,
                    {memory.id for memory in around},
                    defeats_in.get(cited_subject, []),
                    evidence,
                    conflicts_in.get(cited_subject, []),
                    self._rules.policies,
                    self._rules.registry,
                    compiling.job_id,
                    compiling.now,
                    self._rules.thresholds,
                )
                memories = apply_changes(memories, again)
                settled[cited_subject].append(again)
            if cited_subject == subject_id:
                existing = memories
        return existing, settled

    def resolve_conflict(
        self, tenant_id: str, conflict_id: uuid.UUID, keep_memory_id: uuid.UUID
    ) -> ConflictResolution:
        """A person keeps ``keep_memory_id``; the other memory is superseded (rule manual).

        Raises ``ConflictNotFound`` for an unknown or already resolved conflict and
        ``ValueError`` when the memory is not one of the conflict's two.
        """
        with self._store.read() as connection:
            record = load_conflict(connection, tenant_id, conflict_id)
        if record is None or record.status is not ConflictStatus.OPEN:
            raise ConflictNotFound(f"no open conflict {conflict_id}")
        first, second = record.conflict.memory_ids
        if keep_memory_id not in (first, second):
            raise ValueError(
                f"memory {keep_memory_id} is not part of conflict {conflict_id}; "
                f"keep {first} or {second}"
            )
        rejected_id = second if keep_memory_id == first else first
        with self._store.write() as connection:
            self._lock_subject(connection, tenant_id, record.conflict.subject_id)
            memories = {
                memory.id: memory
                for memory in load_for_resolution(
                    connection, tenant_id, record.conflict.subject_id, record.conflict.memory_keys
                )
            }
            now = self._clock.now()
            changes = manual_resolution(
                record.conflict,
                memories[keep_memory_id],
                memories[rejected_id],
                job_id=f"manual-{uuid.uuid4()}",
                now=now,
            )
            apply_change_set(
                connection, tenant_id, changes, {}, now, subject_id=record.conflict.subject_id
            )
        return ConflictResolution(conflict_id, keep_memory_id, rejected_id)

    def subjects_with_uncompiled(self, tenant_id: str) -> list[str]:
        """Subjects that have episodes not yet compiled at their current revision."""
        with self._store.read() as connection:
            return subjects_with_uncompiled(connection, tenant_id)

    # -- steps ---------------------------------------------------------------------------

    def _lock_subject(self, connection: Connection, tenant_id: str, subject_id: str) -> None:
        self.lock_subjects(connection, tenant_id, {subject_id})

    def lock_subjects(
        self, connection: Connection, tenant_id: str, subject_ids: Collection[str]
    ) -> set[str]:
        """Take the compile lock of each subject for the caller's write transaction, in
        one order for every compile (so two compiles that need each other's subjects
        wait instead of deadlocking); return the subjects locked. Whatever else changes a
        subject's memories outside a compile (forgetting a connector) takes it too."""
        if self._store.is_postgresql and subject_ids:
            # One statement however many subjects (forgetting a connector locks
            # thousands); unnest hands the keys out in the array's order.
            keys = [_subject_lock_key(tenant_id, subject_id) for subject_id in sorted(subject_ids)]
            connection.execute(
                sa.text(
                    "SELECT pg_advisory_xact_lock(key) FROM unnest(CAST(:keys AS bigint[])) "
                    "WITH ORDINALITY AS locks(key, n) ORDER BY n"
                ),
                {"keys": keys},
            )
        # SQLite: the write transaction already holds the database write lock.
        return set(subject_ids)


_SUMMARY_FIELDS = tuple(summary_field.name for summary_field in fields(CompileSummary))


def result_summary(result: CompileSummary) -> dict[str, Any]:
    """The counts of ``result`` (a :class:`CompileResult` holds its memories too), as
    JSON-ready values."""
    return {name: getattr(result, name) for name in _SUMMARY_FIELDS}


def compile_extras(result: CompileResult) -> dict[str, Any]:
    """What a compile job's result and ``memsync compile --json`` add to the counts:
    ``stopped`` and ``llm`` (model, requests, tokens, estimated cost), when set."""
    extras: dict[str, Any] = {}
    if result.stopped is not None:
        extras["stopped"] = result.stopped
    if result.llm is not None:
        extras["llm"] = result.llm.to_dict()
    return extras
