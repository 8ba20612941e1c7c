"""Prometheus metrics of one memsync process.

Two kinds, and the difference matters when several replicas run:

- **counters and histograms** count what *this* process did (sync runs it ran, source
  requests its connectors made, jobs its workers ran, compiles, HTTP requests it
  answered); Prometheus sums them over replicas;
- **gauges read from the store at scrape time** (:class:`StoreGauges`: job queue depth,
  connector lag) say what is true of the shared store, so every replica reports the
  same values and none has to be the one that "owns" them.

Each :class:`Metrics` has its own ``CollectorRegistry`` (never the global one), so two
applications in one process (tests, ``memsync run``) never mix their numbers. Every
metric is listed in docs/operations.md with example alerts.

``memsync serve --processes N`` runs N API processes behind one port, and a scrape
reaches any one of them: there the counters and histograms are prometheus-client's
multiprocess ones (:func:`shared_between_processes`), kept in files of one directory
that every process's ``/metrics`` reads and sums, so any scrape reports the server as a
whole.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from memsync.connectors import RequestObserver, RequestOutcome
from memsync.runtime.jobs.queue import Job
from memsync.runtime.jobs.status import JobStatus
from memsync.runtime.jobs.worker import JobHandler, JobResult
from memsync.stopping import StopRequested

if TYPE_CHECKING:
    from memsync.compile.sensitivity import Decision

    # Annotations only: a process that counts a sync never imports the compiler.
    from memsync.runtime.compiling.service import CompileSummary, LLMSpend
    from memsync.runtime.sync.records import RunRecord

__all__ = [
    "DEPTH_STATUSES",
    "MULTIPROCESS_DIRECTORY",
    "RECORD_OUTCOMES",
    "Metrics",
    "StoreGauges",
    "shared_between_processes",
]

MULTIPROCESS_DIRECTORY = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus-client's variable: set when the process starts (before the library is
imported), its counters live in files of that directory, for any process to sum."""

#: ``memsync_sync_records_total`` outcomes and the run record counter each one reads.
RECORD_OUTCOMES: Mapping[str, str] = {
    "created": "created",
    "duplicate": "duplicates",
    "revised": "revised",
    "tombstoned": "tombstoned",
    "skipped": "skipped",
}

log = logging.getLogger("memsync.metrics")

#: The statuses ``memsync_jobs`` reports: the backlog and the failures, not the history.
DEPTH_STATUSES = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.FAILED)

# Jobs run from milliseconds (a compile with nothing new) to many minutes (a backfill
# slice of a big source).
_JOB_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class _CountedRequests:
    """A :class:`RequestObserver` counting into the metrics of one connector's runs
    (``memsync_source_*``) or of one model's compiles (``memsync_llm_*``)."""

    def __init__(
        self, requests: Counter, waits: Counter, outcome_label: str, **labels: str
    ) -> None:
        self._requests = {
            outcome: requests.labels(**labels, **{outcome_label: outcome.value})
            for outcome in RequestOutcome
        }
        self._waits = waits.labels(**labels)

    def request_finished(self, outcome: RequestOutcome) -> None:
        self._requests[outcome].inc()

    def rate_limit_waited(self, seconds: float) -> None:
        self._waits.inc(seconds)


class Metrics:
    """The counters and histograms of one process, and its registry.

    Recording is thread-safe (prometheus-client's values are); each method is called
    once per event by the stage that saw it.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._watched: list[Collector] = []
        registry = self.registry
        self.sync_runs = Counter(
            "memsync_sync_runs",
            "Sync and backfill runs this process finished, by connector and final status.",
            ["connector", "status"],
            registry=registry,
        )
        self.sync_records = Counter(
            "memsync_sync_records",
            "Records read by sync runs, by what ingest made of them.",
            ["connector", "outcome"],
            registry=registry,
        )
        self.source_requests = Counter(
            "memsync_source_requests",
            "Request attempts connectors made to their sources, by outcome.",
            ["connector", "status"],
            registry=registry,
        )
        self.rate_limit_wait = Counter(
            "memsync_source_rate_limit_wait_seconds",
            "Seconds connectors spent waiting out source rate limits.",
            ["connector"],
            registry=registry,
        )
        self.job_duration = Histogram(
            "memsync_job_duration_seconds",
            "How long job attempts took in this process's workers, by job kind.",
            ["kind"],
            buckets=_JOB_BUCKETS,
            registry=registry,
        )
        self.job_attempts = Counter(
            "memsync_job_attempts",
            "Job attempts this process's workers finished, by kind and outcome "
            "(completed; error: the attempt raised and the job was retried or failed; "
            "released: the worker stopped and gave the job back to the queue).",
            ["kind", "outcome"],
            registry=registry,
        )
        self.policy_decisions = Counter(
            "memsync_policy_decisions",
            "Read-policy decisions on memories and episodes, by rule and action "
            "(deny, redact; would_deny, would_redact in log_only mode).",
            ["rule", "action"],
            registry=registry,
        )
        self.compile_episodes = Counter(
            "memsync_compile_episodes",
            "Episodes compiled (at their current revision).",
            registry=registry,
        )
        self.memories_superseded = Counter(
            "memsync_memories_superseded",
            "Memories superseded by compiles (never deleted; see the supersession records).",
            registry=registry,
        )
        self.memories_tombstoned = Counter(
            "memsync_memories_tombstoned",
            "Memories retired by compiles because every source moved away or was deleted.",
            registry=registry,
        )
        self.conflicts_opened = Counter(
            "memsync_conflicts_opened",
            "Conflicts opened by compiles under the flag policy, awaiting a person.",
            registry=registry,
        )
        self.llm_requests = Counter(
            "memsync_llm_requests",
            "Request attempts compiles made to the model, by model and outcome "
            "(ok, rate_limited, transient_error: retried, error).",
            ["model", "outcome"],
            registry=registry,
        )
        self.llm_rate_limit_wait = Counter(
            "memsync_llm_rate_limit_wait_seconds",
            "Seconds compiles spent waiting out the model's 429 answers.",
            ["model"],
            registry=registry,
        )
        self.llm_tokens = Counter(
            "memsync_llm_tokens",
            "Tokens the model reported for compiles' requests, by model and kind "
            "(prompt, completion).",
            ["model", "kind"],
            registry=registry,
        )
        self.llm_cost = Counter(
            "memsync_llm_estimated_cost",
            "Estimated cost of compiles' requests at the configured prices, by model.",
            ["model"],
            registry=registry,
        )
        self.http_duration = Histogram(
            "memsync_http_request_duration_seconds",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=registry,
        )

    # -- recording -----------------------------------------------------------------

    def sync_run_finished(self, record: RunRecord) -> None:
        """Count a finished run and what its records became."""
        self.sync_runs.labels(connector=record.connector, status=record.status.value).inc()
        for outcome, counter in RECORD_OUTCOMES.items():
            count = getattr(record, counter)
            self.sync_records.labels(connector=record.connector, outcome=outcome).inc(count)

    def source(self, connector: str) -> RequestObserver:
        """The request observer of ``connector``'s runs."""
        return _CountedRequests(
            # ``status``: the label's published name; the model's counter says ``outcome``.
            self.source_requests,
            self.rate_limit_wait,
            "status",
            connector=connector,
        )

    def timed(self, kind: str, handler: JobHandler) -> JobHandler:
        """``handler``, timing each attempt and counting how it ended."""
        duration = self.job_duration.labels(kind=kind)
        completed = self.job_attempts.labels(kind=kind, outcome="completed")
        failed = self.job_attempts.labels(kind=kind, outcome="error")
        released = self.job_attempts.labels(kind=kind, outcome="released")

        def timed_handler(job: Job) -> Mapping[str, Any] | JobResult:
            started = time.perf_counter()
            try:
                result = handler(job)
            except StopRequested:
                # A stopping worker gives the job back: not an error of the job.
                released.inc()
                raise
            except BaseException:
                failed.inc()
                raise
            finally:
                duration.observe(time.perf_counter() - started)
            completed.inc()
            return result

        return timed_handler

    def compiled(self, result: CompileSummary) -> None:
        """Count what one compile did."""
        self.compile_episodes.inc(result.episodes_compiled)
        self.memories_superseded.inc(result.memories_superseded)
        self.memories_tombstoned.inc(result.memories_tombstoned)
        self.conflicts_opened.inc(result.conflicts_opened)

    def llm_spent(self, spend: LLMSpend) -> None:
        """Count what a model reported for one answered request (told as it is
        answered, so a compile that fails later is counted too)."""
        self.llm_tokens.labels(model=spend.model, kind="prompt").inc(spend.prompt_tokens)
        self.llm_tokens.labels(model=spend.model, kind="completion").inc(spend.completion_tokens)
        if spend.estimated_cost is not None:
            self.llm_cost.labels(model=spend.model).inc(spend.estimated_cost)

    def model(self, model: str) -> RequestObserver:
        """The request observer of the compiles asking ``model``."""
        return _CountedRequests(self.llm_requests, self.llm_rate_limit_wait, "outcome", model=model)

    def policy_decided(self, decision: Decision) -> None:
        """Count one read-policy decision (``would_…`` in ``log_only`` mode)."""
        action = decision.action.value if decision.enforced else f"would_{decision.action.value}"
        self.policy_decisions.labels(rule=decision.rule, action=action).inc()

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.http_duration.labels(method=method, route=route, status=str(status)).observe(seconds)

    def watch(self, collector: Collector) -> None:
        """Add a collector read at every scrape (the store's gauges)."""
        self.registry.register(collector)
        self._watched.append(collector)

    def exposition(self) -> bytes:
        """Every metric in the Prometheus text format (reads the store's gauges now).

        Among processes sharing their counters (:func:`shared_between_processes`): the
        sums over every process that served since the server started, and the store's
        gauges once (every process reads the same store)."""
        if not os.environ.get(MULTIPROCESS_DIRECTORY):
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged)  # type: ignore[no-untyped-call]
        for collector in self._watched:
            merged.register(collector)
        return generate_latest(merged)


@contextmanager
def shared_between_processes() -> Iterator[Path]:
    """For the block, the processes started from this one count into files of one
    directory (prometheus-client's multiprocess mode), so that ``/metrics`` in any of
    them reports them all; yields the directory.

    ``$PROMETHEUS_MULTIPROC_DIR`` if set (emptied first: files left by an earlier run
    would be counted again), else a temporary directory removed after the block.
    """
    given = os.environ.get(MULTIPROCESS_DIRECTORY)
    if given:
        directory = Path(given)
        for stale in directory.glob("*.db"):
            stale.unlink()
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="memsync-metrics-") as made:
        os.environ[MULTIPROCESS_DIRECTORY] = made
        try:
            yield Path(made)
        finally:
            del os.environ[MULTIPROCESS_DIRECTORY]


JobDepth = Callable[[], Mapping[tuple[str, JobStatus], int]]
CommittedPositions = Callable[[], Mapping[tuple[str, str], datetime]]


class StoreGauges(Collector):
    """``memsync_jobs`` and ``memsync_connector_lag_seconds``, read from the store at
    every scrape (two grouped statements, whatever the size of the store), so every
    replica reports the same truth; ``memsync_store_up`` says whether it could.

    ``kinds`` are reported for every status even with no job (0), so an alert on
    failed jobs has a series to watch before the first failure.
    """

    def __init__(
        self,
        depth: JobDepth,
        positions: CommittedPositions,
        now: Callable[[], datetime],
        kinds: Sequence[str] = (),
    ) -> None:
        self._depth = depth
        self._positions = positions
        self._now = now
        self._kinds = tuple(kinds)

    def describe(self) -> Iterable[Metric]:
        # Declared without reading the store: registering must not query it.
        return [self._up_family(), self._jobs_family(), self._lag_family()]

    def collect(self) -> Iterator[Metric]:
        up = self._up_family()
        try:
            depth, positions = self._depth(), self._positions()
        except Exception:
            # The process's own counters are still worth scraping while the store is
            # away; the store's gauges are left out rather than reported stale.
            log.warning("metrics: the store could not be read", exc_info=True)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        jobs = self._jobs_family()
        counts = {(kind, status): 0 for kind in self._kinds for status in DEPTH_STATUSES}
        counts.update(depth)
        for (kind, status), count in sorted(counts.items()):
            jobs.add_metric([kind, status.value], count)
        yield jobs
        lag = self._lag_family()
        now = self._now()
        for (tenant, connector), position in sorted(positions.items()):
            lag.add_metric([tenant, connector], max((now - position).total_seconds(), 0.0))
        yield lag

    @staticmethod
    def _up_family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "memsync_store_up", "1 when this scrape could read the store, else 0."
        )

    @staticmethod
    def _jobs_family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "memsync_jobs",
            "Jobs in the store by kind and status: pending, running and failed (completed "
            "jobs are history; see memsync_job_attempts_total).",
            labels=["kind", "status"],
        )

    @staticmethod
    def _lag_family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "memsync_connector_lag_seconds",
            "Now minus the end of the connector's last completely read window (its "
            "committed cursor); absent before its first checkpoint.",
            labels=["tenant", "connector"],
        )
