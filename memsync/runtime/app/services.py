"""The composition root: every service of a memsync process, built from the configuration.

The HTTP API, each CLI command, the worker, the scheduler and ``memsync run`` all get
their services from :class:`Services`; nothing else in the package constructs them.
Read top-down it is the data flow: the store, sync, ingest, compiling, reading, and the
jobs that tie them together.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeAlias

import sqlalchemy as sa

from memsync.clock import Clock, SystemClock
from memsync.connectors.errors import ConnectorConfigError
from memsync.runtime.app.config import ConfigError, JobsSettings, MissingVariables, Settings
from memsync.runtime.storage import Store, upgrade
from memsync.scrub import LearningScrubber, Scrubber, secret_values
from memsync.stopping import StopEvent
from memsync.timerange import check_backfill, check_source_time

if TYPE_CHECKING:
    from memsync.connectors.base import Connector
    from memsync.connectors.config import ConnectorConfig
    from memsync.connectors.registry import ConnectorRegistry
    from memsync.runtime.app.api.auth import Authenticator
    from memsync.runtime.app.observability.metrics import Metrics
    from memsync.runtime.app.removals import ConnectorForgotten, SubjectDeletion
    from memsync.runtime.app.webhooks import WebhookIntake
    from memsync.runtime.compiling.service import CompileService
    from memsync.runtime.ingest.service import IngestService
    from memsync.runtime.jobs.queue import JobQueue
    from memsync.runtime.jobs.schedules import Schedule, ScheduleFirer, Scheduler
    from memsync.runtime.jobs.worker import Worker
    from memsync.runtime.reading.bundles import ContextReader
    from memsync.runtime.reading.episodes import EpisodeRepository
    from memsync.runtime.reading.indexes import MemorySearch, SubjectIndexes
    from memsync.runtime.reading.labels import Labels, ReadGate
    from memsync.runtime.reading.memories import MemoryRepository
    from memsync.runtime.reading.receipts import Receipts
    from memsync.runtime.support.resolutions import Resolutions
    from memsync.runtime.support.service import SupportService
    from memsync.runtime.sync.records import RunRecord
    from memsync.runtime.sync.repository import ConnectorState, SyncRepository
    from memsync.runtime.sync.runner import BatchProgress, SliceProgress, SyncRunner
    from memsync.runtime.sync.webhook_deliveries import WebhookDeliveries

__all__ = [
    "NIGHTLY_COMPILE",
    "Services",
    "UnknownConnector",
    "UnknownStream",
    "schedules_from_settings",
    "sync_schedule_id",
]

AnyConnector: TypeAlias = "Connector[Any, Any]"

log = logging.getLogger("memsync.app")

NIGHTLY_COMPILE = "nightly-compile"
"""The id of the schedule that compiles every subject with uncompiled episodes."""


class UnknownConnector(LookupError):
    """No connector of that name is configured (the message lists the ones that are)."""


class UnknownStream(LookupError):
    """The connector neither reads a stream of that name nor has a checkpoint of one
    (the message lists the streams it has)."""


class _RolledBack(Exception):
    def __init__(self, result: ConnectorForgotten) -> None:
        self.result = result


def sync_schedule_id(connector: ConnectorConfig) -> str:
    return f"sync:{connector.tenant}:{connector.name}"


def schedules_from_settings(
    settings: JobsSettings, connectors: list[ConnectorConfig] | tuple[ConnectorConfig, ...] = ()
) -> list[Schedule]:
    """The schedules the configuration asks for: the nightly compile (if set) and one
    sync schedule per connector whose schedule is not ``manual``. Ids are stable across
    restarts and replicas."""
    from memsync.runtime.app.handlers import SYNC_JOB
    from memsync.runtime.compiling.triggers import COMPILE_JOB
    from memsync.runtime.jobs.schedules import Schedule

    schedules = []
    if settings.nightly_compile:
        schedules.append(
            Schedule(NIGHTLY_COMPILE, COMPILE_JOB, settings.nightly_compile, settings.timezone)
        )
    schedules.extend(
        Schedule(
            sync_schedule_id(connector),
            SYNC_JOB,
            str(connector.schedule),
            settings.timezone,
            target=(connector.tenant, connector.name),
        )
        for connector in connectors
        if connector.schedule.kind != "manual"
    )
    return schedules


@dataclass
class Services:
    """Everything a memsync process uses, built from its configuration.

    The job queue and the run records are built at once. Every other part is built on
    first use (and its modules imported then), so a command pays only for what it uses:
    ``runs list`` never imports the HTTP stack, the compiler, the readers or Prometheus,
    and no command that needs no connector loads plugins or reads the connectors
    section.

    Parts built on first use are ``cached_property`` (locked on Python 3.11, not after):
    the one whose counts must not split, :attr:`metrics`, is built before any thread
    starts (by ``create_app`` and by :meth:`worker`); two threads asking at once for
    another part the first time may build it twice and keep either, which costs a
    little work and breaks nothing.
    """

    settings: Settings
    store: Store
    clock: Clock = field(default_factory=SystemClock)
    stop: StopEvent = field(default_factory=StopEvent)
    """The process's stop event. SIGTERM/SIGINT request it (``memsync worker``,
    ``scheduler``, ``serve``, ``run``); every wait of the work these services do waits
    on it (a connector's retry wait, a worker's idle poll, the scheduler's loop), so a
    stop is noticed at once: idle workers exit, a sync cut short is recorded
    ``partial`` and its job released to the queue."""
    migration_notes: list[str] = field(default_factory=list)
    """What the migrations run by :meth:`open` said about the data they changed."""

    @cached_property
    def queue(self) -> JobQueue:
        """The job queue, retrying as ``jobs:`` says."""
        from memsync.runtime.jobs.queue import JobQueue, RetryPolicy

        jobs = self.settings.jobs
        return JobQueue(
            self.store,
            RetryPolicy(
                max_attempts=jobs.max_attempts,
                base_delay=timedelta(seconds=jobs.retry_backoff_seconds),
                max_delay=timedelta(seconds=jobs.retry_backoff_max_seconds),
            ),
        )

    @cached_property
    def runs(self) -> SyncRepository:
        """Sync run records and connector state."""
        from memsync.runtime.sync.repository import SyncRepository

        return SyncRepository(self.store)

    @cached_property
    def webhook_deliveries(self) -> WebhookDeliveries:
        """Webhook deliveries counted per connector, and the push gap."""
        from memsync.runtime.sync.webhook_deliveries import WebhookDeliveries

        return WebhookDeliveries(self.store)

    @cached_property
    def episodes(self) -> EpisodeRepository:
        """Episodes, their revisions, subjects and timelines."""
        from memsync.runtime.reading.episodes import EpisodeRepository

        return EpisodeRepository(self.store)

    @cached_property
    def memories(self) -> MemoryRepository:
        """Memories, supersession records and conflicts."""
        from memsync.runtime.reading.memories import MemoryRepository

        return MemoryRepository(self.store)

    @cached_property
    def metrics(self) -> Metrics:
        """What this process did (counters) and the store's gauges, read when scraped."""
        from memsync.runtime.app.handlers import SYNC_JOB
        from memsync.runtime.app.observability.metrics import Metrics, StoreGauges
        from memsync.runtime.compiling.triggers import COMPILE_JOB

        metrics = Metrics()
        metrics.watch(
            StoreGauges(
                lambda: self.queue.depth(with_completed=False),
                self.runs.committed_positions,
                self.clock.now,
                kinds=(COMPILE_JOB, SYNC_JOB),
            )
        )
        return metrics

    @cached_property
    def ingest(self) -> IngestService:
        """The process's ingest path, every-N compile trigger attached (API, CLI)."""
        return self.new_ingest()

    @cached_property
    def webhooks(self) -> WebhookIntake:
        """Where pushed deliveries enter the ingest path (``POST /v1/webhooks/…``)."""
        from memsync.runtime.app.webhooks import WebhookIntake

        return WebhookIntake(self)

    @cached_property
    def compile_service(self) -> CompileService:
        """The one compile path, with the configured compiler and rules."""
        from memsync.runtime.compiling.service import CompileService

        return CompileService.from_settings(
            self.store,
            self.settings.compile,
            self.clock,
            on_compiled=self.metrics.compiled,
            llm_observer=self.metrics.model,
            sleeper=self.stop,
            on_llm_usage=self.metrics.llm_spent,
        )

    @cached_property
    def _subject_indexes(self) -> SubjectIndexes:
        from memsync.runtime.reading.indexes import SubjectIndexes

        return SubjectIndexes(self.memories)

    @cached_property
    def context(self) -> ContextReader:
        """Context bundles, over the process's per-subject indexes."""
        from memsync.runtime.reading.bundles import ContextReader

        return ContextReader(
            self.episodes,
            self.memories,
            indexes=self._subject_indexes,
            layout=self.settings.context.layout,
        )

    @cached_property
    def receipts(self) -> Receipts:
        """Bundles served with receipts; receipts read, listed and replayed."""
        from memsync.runtime.reading.receipts import Receipts

        return Receipts(self.store, self.context, self.clock)

    @cached_property
    def search(self) -> MemorySearch:
        """Memory search, over the same indexes as :attr:`context`."""
        from memsync.runtime.reading.indexes import MemorySearch

        return MemorySearch(self._subject_indexes, self.memories)

    @cached_property
    def resolutions(self) -> Resolutions:
        """Resolution records of support sessions."""
        from memsync.runtime.support.resolutions import Resolutions

        return Resolutions(self.store, self.clock)

    @cached_property
    def support(self) -> SupportService:
        """Subject health, SLA and handoff briefs."""
        from memsync.runtime.support.service import SupportService

        return SupportService(self.store, self.episodes, self.memories, self.resolutions)

    @cached_property
    def labels(self) -> Labels:
        """Sensitivity labels of memories and episodes."""
        from memsync.runtime.reading.labels import Labels

        return Labels(self.store, self.clock)

    @cached_property
    def read_gate(self) -> ReadGate:
        """The configured read policy, applied by every read path."""
        from memsync.runtime.reading.labels import ReadGate

        return ReadGate(
            self.settings.read_policy.to_policy(), self.labels, self.metrics.policy_decided
        )

    @cached_property
    def authenticator(self) -> Authenticator:
        """API keys and tenants of the HTTP API."""
        from memsync.runtime.app.api.auth import Authenticator

        return Authenticator(self.settings.api)

    @classmethod
    def open(cls, settings: Settings, clock: Clock | None = None) -> Services:
        """Open the configured store, bring its schema up to date, build the services."""
        # As many connections kept open as the process uses at once.
        connections = settings.api.concurrent_requests + settings.jobs.serve_workers
        store = Store.from_url(settings.store, pool_size=connections)
        notes = upgrade(store)
        return cls(settings, store, clock or SystemClock(), migration_notes=notes)

    def close(self) -> None:
        """Release the store's connections."""
        self.store.dispose()

    @cached_property
    def scrubber(self) -> Scrubber:
        """Every secret value this process knows: API keys, the LLM key, the store's
        password and each configured connector's secrets. Error texts, run records, job
        errors, the CLI's output and log lines are scrubbed of them.

        The connectors' secrets are learnt when it is first used: parsing the
        connectors (the registry's entry points, each type's declaration and config
        model) is a sixth of what ``runs list`` costs beyond SQLAlchemy, and a command
        that logs nothing, prints no error and builds no connector never scrubs."""
        known = [key.key for key in self.settings.api.keys if key.key]
        known += secret_values(self.settings)
        password = sa.make_url(self.settings.store).password
        if password:
            known.append(str(password))
        return LearningScrubber(known, learn=self._connector_secrets)

    def _connector_secrets(self) -> list[str]:
        try:
            configured = self.connectors
        except ConfigError:
            configured = ()  # reported where the connectors are used
        return [secret for config in configured for secret in secret_values(config)]

    # -- sync --------------------------------------------------------------------------

    @cached_property
    def registry(self) -> ConnectorRegistry:
        """Every installed connector type (loaded from entry points on first use)."""
        # Imported here: only a command that parses connectors needs the registry.
        from memsync.connectors.registry import load_registry

        return load_registry()

    @cached_property
    def connectors(self) -> tuple[ConnectorConfig, ...]:
        """The configured connectors, validated. Raises ``ConfigError`` naming the file,
        the connector and the field of every problem.

        A connector naming an environment variable this process does not have is here
        all the same, with the fields every connector has: it can be listed, addressed,
        scheduled and its sync enqueued (a worker that has the variable runs it), but
        building it raises :class:`MissingVariables` (see :meth:`connector_instance`).
        """
        source = str(self.settings.source_path) if self.settings.source_path else None
        try:
            configs = self.registry.parse_configs(
                self.settings.connectors,
                source=source or "the configuration",
                unknown=self.settings.unset_in_connectors,
            )
        except ConnectorConfigError as error:
            raise ConfigError("\n".join(error.problems)) from None
        return tuple(configs)

    @cached_property
    def missing_variables(self) -> dict[str, str]:
        """By connector name: what each connector this process cannot build lacks from
        the environment (one line each; see :meth:`Settings.missing_variables`)."""
        return self.settings.missing_variables()

    def connector(self, name: str) -> ConnectorConfig:
        """The configured connector called ``name``; ``UnknownConnector`` if none is."""
        for config in self.connectors:
            if config.name == name:
                return config
        known = ", ".join(config.name for config in self.connectors) or "none"
        source = self.settings.source_path or "the configuration"
        raise UnknownConnector(
            f"no connector named '{name}' in {source} (connectors configured: {known})"
        )

    def new_ingest(self) -> IngestService:
        """An ingest service with the every-N compile trigger attached when configured.

        The process shares :attr:`ingest`; each sync runner gets its own, as a worker
        thread's runs keep their own batch statistics.
        """
        n = self.settings.jobs.compile_every_n_episodes
        from memsync.runtime.compiling.triggers import EveryNEpisodes
        from memsync.runtime.ingest.service import IngestService

        trigger = EveryNEpisodes(self.store, self.queue, n, self.clock) if n > 0 else None
        return IngestService(self.store, self.clock, on_batch_committed=trigger)

    def sync_runner(self) -> SyncRunner:
        """A sync runner that ingests through the one ingest path (with its triggers)."""
        from memsync.runtime.sync.runner import SyncRunner

        return SyncRunner(self.runs, self.new_ingest(), clock=self.clock, scrubber=self.scrubber)

    def run_sync(
        self,
        config: ConnectorConfig,
        runner: SyncRunner | None = None,
        *,
        full_refresh: bool = False,
        on_batch: BatchProgress | None = None,
    ) -> RunRecord:
        """One incremental sync of a configured connector; the connector is closed after.

        Raises what :meth:`SyncRunner.sync` raises (``RunInProgress``, ``RunLost``, and
        ``RunInterrupted`` once :attr:`stop` is requested), and :class:`MissingVariables`
        (see :meth:`connector_instance`).
        """
        with self.connector_instance(config) as connector:
            return self._counted(
                lambda: (runner or self.sync_runner()).sync(
                    connector, full_refresh=full_refresh, on_batch=on_batch
                )
            )

    def run_backfill(
        self,
        config: ConnectorConfig,
        *,
        since: datetime,
        until: datetime | None,
        slice_length: timedelta,
        on_slice: SliceProgress | None = None,
        on_batch: BatchProgress | None = None,
    ) -> RunRecord:
        """A backfill of a configured connector (see :meth:`SyncRunner.backfill`).

        Raises :class:`~memsync.timerange.TimeOutOfRange` before anything is planned
        when ``since`` or ``until`` lies outside ``[SOURCE_FLOOR, now]``, the range is
        empty, or it makes more than ``MAX_BACKFILL_SLICES`` slices: refused, never
        clamped."""
        since, until = check_backfill(since, until, slice_length, now=self.clock.now())
        with self.connector_instance(config) as connector:
            return self._counted(
                lambda: self.sync_runner().backfill(
                    connector,
                    since=since,
                    until=until,
                    slice_length=slice_length,
                    on_slice=on_slice,
                    on_batch=on_batch,
                )
            )

    def _counted(self, run: Callable[[], RunRecord]) -> RunRecord:
        """``run()``'s record, counted in the metrics, also when a stop interrupted it."""
        from memsync.runtime.sync.records import RunInterrupted

        try:
            record = run()
        except RunInterrupted as interrupted:
            self.metrics.sync_run_finished(interrupted.record)
            raise
        self.metrics.sync_run_finished(record)
        return record

    def stream_names(self, config: ConnectorConfig) -> list[str]:
        """The streams the connector of ``config`` reads, in order (from its
        configuration: no request is made). None for a connector this process cannot
        build (a variable it names is not set): its own fields, which name its streams,
        are not known here."""
        if config.name in self.missing_variables:
            return []
        declared = config.stream_names()
        if declared is not None:
            return list(declared)  # its implementation is not imported to say them
        connector = self.registry.build(config)
        try:
            return [stream.name for stream in connector.streams()]
        finally:
            connector.close()

    def connector_state(self, config: ConnectorConfig) -> ConnectorState:
        """Where a configured connector stands: every stream it reads (read yet or not),
        the streams it no longer reads that still have a checkpoint, and with a
        ``webhook:``, its deliveries and push gap."""
        now = self.clock.now()
        state = self.runs.state(config.tenant, config.name, now, self.stream_names(config))
        if config.webhook is None:
            return state
        webhooks = self.webhook_deliveries.states(
            config.tenant, {config.name: config.webhook.push_gap_after}, now
        )
        return dataclasses.replace(state, webhook=webhooks[config.name])

    def reset_connector_state(
        self, config: ConnectorConfig, *, stream: str | None, to: datetime | None
    ) -> ConnectorState:
        """Move the checkpoint of one stream, or of every stream (``stream`` ``None``),
        to ``to``, backwards too, or remove it (``to`` ``None``: read from ``start``).

        Raises :class:`UnknownStream` for a stream the connector neither reads nor has a
        checkpoint of, :class:`~memsync.timerange.TimeOutOfRange` for a ``to`` outside
        ``[SOURCE_FLOOR, now]`` (a checkpoint no run could read from), and
        ``RunInProgress`` while a run of the connector is going.
        """
        if to is not None:
            to = check_source_time("to", to, now=self.clock.now(), overlap=config.overlap)
        if stream is not None:
            known = [state.stream for state in self.connector_state(config).streams]
            if stream not in known:
                raise UnknownStream(
                    f"connector '{config.name}' has no stream named '{stream}' "
                    f"(its streams: {', '.join(known) or 'none'})"
                )
        self.runs.reset_checkpoints(
            config.tenant, config.name, stream=stream, to=to, now=self.clock.now()
        )
        return self.connector_state(config)

    @contextmanager
    def connector_instance(self, config: ConnectorConfig) -> Iterator[AnyConnector]:
        """The connector of ``config``, its source requests counted, its waits cut short
        by :attr:`stop`, closed after.

        The one place connectors are built, so the one place a variable a connector
        names is required: :class:`MissingVariables` (one line naming the connector,
        the file and the variable) if one is not set in this process.
        """
        # Here, not at the top: the requests' retry machinery is for a connector built.
        from memsync.connectors.retry import observing_requests

        missing = self.missing_variables.get(config.name)
        if missing is not None:
            raise MissingVariables(missing)
        connector = self.registry.build(config, sleeper=self.stop)
        try:
            with observing_requests(self.metrics.source(config.name)):
                yield connector
        finally:
            connector.close()

    # -- subjects ----------------------------------------------------------------------

    def delete_subject(self, tenant_id: str, subject_id: str) -> SubjectDeletion:
        """Delete everything of one subject of one tenant, in one transaction: episodes
        and their revisions, memories with their provenance, supersession records,
        conflicts, receipts and resolutions. With :meth:`forget_connector`, the only way anything is
        deleted."""
        from memsync.runtime.app.removals import SubjectDeletion
        from memsync.runtime.compiling.memories import delete_subject_memories
        from memsync.runtime.ingest.statements import delete_subject_episodes
        from memsync.runtime.reading.receipts import delete_subject_receipts
        from memsync.runtime.support.resolutions import delete_subject_resolutions

        with self.store.write() as connection:
            memories = delete_subject_memories(connection, tenant_id, subject_id)
            episodes = delete_subject_episodes(connection, tenant_id, subject_id)
            # A receipt holds the tasks asked about the subject: an erasure takes them too.
            delete_subject_receipts(connection, tenant_id, subject_id)
            delete_subject_resolutions(connection, tenant_id, subject_id)
        return SubjectDeletion(subject_id, episodes, memories)

    def forget_connector(
        self, tenant_id: str, connector: str, *, dry_run: bool = False
    ) -> ConnectorForgotten:
        """Remove everything the connector instance ``connector`` stored in the tenant, in
        one transaction: its episodes (those whose provenance names it) with their
        revisions, what they did to memories (:func:`~memsync.runtime.compiling.memories.
        forget_episodes`), its stream checkpoints, run records, backfills and webhook
        delivery counts, and the resolution records it recorded last. Nothing of another
        connector or tenant changes.

        Raises ``RunInProgress`` while a run of the connector is going (nothing changes).
        ``dry_run``: the same statements, rolled back: what would be removed. Repeats:
        forgetting again removes nothing more. The affected subjects' compile locks are
        held meanwhile, so a compile never sees half of it.
        """
        from memsync.runtime.app.removals import ConnectorForgotten
        from memsync.runtime.compiling.memories import forget_episodes, subjects_citing
        from memsync.runtime.ingest.statements import connector_episodes, delete_episodes
        from memsync.runtime.support.resolutions import delete_connector_resolutions

        now = self.clock.now()
        try:
            with self.store.write() as connection:
                self.runs.refuse_while_running(connection, tenant_id, connector, "forget it")
                episodes = connector_episodes(connection, tenant_id, connector)
                ids = sorted(episodes)
                subjects = set(episodes.values()) | subjects_citing(connection, tenant_id, ids)
                self.compile_service.lock_subjects(connection, tenant_id, subjects)
                memories = forget_episodes(connection, tenant_id, ids, now)
                deleted, revisions = delete_episodes(connection, tenant_id, ids)
                state = self.runs.forget_state(connection, tenant_id, connector)
                self.webhook_deliveries.forget(connection, tenant_id, connector)
                result = ConnectorForgotten(
                    tenant_id=tenant_id,
                    connector=connector,
                    dry_run=dry_run,
                    episodes=deleted,
                    revisions=revisions,
                    memories_deleted=memories.deleted,
                    memories_kept=memories.kept,
                    memories_reactivated=memories.reactivated,
                    supersessions=memories.supersessions,
                    conflicts=memories.conflicts,
                    subjects_changed=len(memories.subjects),
                    streams=state.streams,
                    runs=state.runs,
                    backfills=state.backfills,
                    resolutions=delete_connector_resolutions(connection, tenant_id, connector),
                )
                if dry_run:
                    raise _RolledBack(result)
        except _RolledBack as rolled_back:
            return rolled_back.result
        log.info("connector forgotten", extra=dataclasses.asdict(result))
        return result

    # -- jobs --------------------------------------------------------------------------

    def worker(self, index: int = 0) -> Worker:
        """A worker for both job kinds: compile, and sync of the configured connectors.
        ``index`` numbers the worker threads of this process (it names the lease owner).

        Each worker has its own sync runner, so a thread's syncs keep their own ingest
        statistics and trigger compiles as the API's ingest does.
        """
        from memsync.runtime.app.handlers import SYNC_JOB, compile_handler, sync_handler
        from memsync.runtime.compiling.triggers import COMPILE_JOB
        from memsync.runtime.jobs.worker import Worker

        runner = self.sync_runner()
        configured = {(config.tenant, config.name): config for config in self.connectors}
        jobs = self.settings.jobs
        return Worker(
            self.queue,
            {
                COMPILE_JOB: self.metrics.timed(
                    COMPILE_JOB, compile_handler(self.compile_service, self.queue)
                ),
                SYNC_JOB: self.metrics.timed(
                    SYNC_JOB,
                    sync_handler(configured, lambda config: self.run_sync(config, runner)),
                ),
            },
            clock=self.clock,
            lease=timedelta(seconds=jobs.lease_seconds),
            poll_interval=jobs.poll_seconds,
            name=f"{self._process_name}/{index}",
            scrub=self.scrubber,
        )

    @cached_property
    def _process_name(self) -> str:
        from memsync.runtime.jobs.worker import worker_name

        return worker_name()

    @cached_property
    def schedule_firer(self) -> ScheduleFirer:
        """Fires schedule ticks: the nightly compile enqueues every subject with
        uncompiled episodes; a connector's schedule enqueues its sync."""
        from memsync.runtime.app.handlers import SYNC_JOB
        from memsync.runtime.compiling.triggers import COMPILE_JOB, enqueue_uncompiled
        from memsync.runtime.jobs.schedules import ScheduleFirer, TickAction, enqueue_target

        def compile_uncompiled(
            schedule: Schedule, now: datetime, trigger: str, dedup_key: str
        ) -> int:
            return enqueue_uncompiled(
                self.store, self.queue, now=now, trigger=trigger, dedup_key=dedup_key
            )

        actions: dict[str, TickAction] = {
            COMPILE_JOB: compile_uncompiled,
            SYNC_JOB: enqueue_target(self.queue),
        }
        return ScheduleFirer(actions)

    @property
    def schedules(self) -> list[Schedule]:
        """The nightly compile and every connector's sync schedule."""
        return schedules_from_settings(self.settings.jobs, self.connectors)

    def scheduler(self) -> Scheduler:
        """APScheduler firing :attr:`schedules` (it only enqueues)."""
        from memsync.runtime.jobs.schedules import Scheduler

        return Scheduler(
            self.schedule_firer,
            self.schedules,
            misfire_grace=timedelta(seconds=self.settings.jobs.misfire_grace_seconds),
            clock=self.clock,
        )
