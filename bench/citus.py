"""memsync on the local Citus cluster beside plain PostgreSQL, in the same run.

    python -m bench.citus [--tenants 10] [--episodes 3000] [--http-episodes 4000]
                          [--requests 200] [--jobs 2000] [--repeats 20] [--rounds 3]

Needs the cluster of ``scripts/citus start`` (coordinator on ``MEMSYNC_CITUS_PORT``,
default 9700, workers on the next two ports) and PostgreSQL on 127.0.0.1:5432; when
the cluster does not answer it prints one line and exits 0. Each database is a
throwaway one (bench/common.py): the cluster's own ``memsync`` database is never used.

Plain PostgreSQL's sessions run with ``synchronous_commit`` off: the Citus nodes run
with ``fsync`` off, so neither waits for a WAL flush at commit.

Per database, in a fresh interpreter, the same workload through memsync's own services
(as the API, the worker and the scheduler call them); ``--rounds`` times each, the two
databases in turn, and the table shows each figure's median:

1. ingest: ``--tenants`` tenants x ``--episodes`` chat episodes of one subject each,
   through the process's IngestService (every-N compile trigger on, at 1,000), one
   tenant after the other: episodes/s. Then ``--http-episodes`` more by
   ``POST /v1/episodes/batch`` to a ``memsync serve`` subprocess: episodes/s.
2. compile: one of those subjects (``--episodes`` episodes) by CompileService. Then,
   untimed, a tenth more episodes and an incremental compile.
3. context: ``POST /v1/context`` on that subject through the app in process (FastAPI's
   TestClient, no socket), ``--requests`` times: p50/p99.
4. jobs: ``--jobs`` jobs enqueued across the tenants, claimed one by one by
   ``JobQueue.claim`` (each completed after its claim, untimed): claims/s, p50.
5. global-by-nature reads, each the median of ``--repeats``: the nightly compile's
   tick (every subject with uncompiled episodes, across tenants), the every-N
   trigger's check, job depth of all tenants, ``GET /metrics``, ``GET /v1/jobs`` and
   the admin pages.

Then, on a second, small Citus store, the same workload runs once more with a
``before_cursor_execute`` listener on the store's engine (and psycopg's
``Connection.execute`` wrapped, for the statements memsync pipelines past SQLAlchemy):
each distinct statement (COPY, ANALYZE, SET, transaction control and advisory locks
left out) is EXPLAINed with its parameters (see :class:`Recorder`), and the Citus
scans' "Task Count" says how many shards it touches; a plan with no Citus scan runs
on the coordinator alone (the ``jobs`` table). A statement sent by a tenant-scoped
operation that touches more than one shard is a routing defect, and is flagged.

Prints two Markdown tables, and the flagged statements in full; see docs/benchmarks.md.
Benchmarks are not tests: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import sqlalchemy as sa

from bench.common import (
    citus_reachable,
    machine,
    memsync_server,
    print_table,
    run_child,
    throwaway_store,
)
from bench.compile import episodes
from bench.read_path import (
    ASYNC_COMMIT_OPTIONS,
    SERVER_CONFIG,
    TASKS,
    chat_body,
    ingest_batches,
    percentiles,
)
from memsync.clock import FakeClock
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.config import JobsSettings, Settings
from memsync.runtime.app.services import NIGHTLY_COMPILE, Services
from memsync.runtime.compiling.triggers import EveryNEpisodes
from memsync.runtime.storage import Store
from memsync.runtime.storage.schema import metadata

DEFAULT = "default"
"""The API's tenant without keys: the one the context and the admin pages read."""
SUBJECT = "user:1"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = timedelta(minutes=5)
BENCH_JOB = "bench"
"""A job kind nothing else enqueues, so the claims take exactly the jobs enqueued here."""
ADMIN_PAGES = ("/ui/jobs", "/ui/connectors", "/ui/runs", "/ui/conflicts", "/ui/subjects")


@dataclass(frozen=True, slots=True)
class Sizes:
    tenants: int
    episodes: int
    http_episodes: int
    requests: int
    jobs: int
    repeats: int


# -- capturing and explaining statements ------------------------------------------------

_SKIPPED = re.compile(
    r"^\s*(COPY|ANALYZE|SET|RESET|SHOW|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|RELEASE)\b", re.I
)
_TABLES = re.compile(r"\b(" + "|".join(sorted(metadata.tables, key=len, reverse=True)) + r")\b")
# An expanded IN list or a multi-row VALUES differs in text by its length only: the
# same statement, for the table.
_NUMBERED = re.compile(r"%\((\w+?)_+\d+(?:_\d+)?\)s")
_REPEATS = re.compile(r"(%\(\w+\)s(?:::\w+(?:\[\])?)?)(?:, \1)+")
_ROWS = re.compile(r"(\([^()]*\))(?:, \1)+")


def shape(statement: str) -> str:
    """The statement's text with whitespace collapsed and every list of bound values
    shown as one, so the same statement with more values is the same row."""
    text = _NUMBERED.sub(r"%(\1_n)s", " ".join(statement.split()))
    text = _REPEATS.sub(r"\1, …", text)
    return _ROWS.sub(r"\1, …", text)


def citus_scans(plan: Any) -> list[tuple[int | None, str]]:
    """Every Citus custom scan in an ``EXPLAIN (FORMAT JSON)`` plan, its subplans'
    too: its Task Count (the shards it sends work to), and for an INSERT ... SELECT
    its method ("pull to coordinator": the rows are gathered on the coordinator and
    then sent each to its tenant's shard, which the plan does not count). Empty when
    Citus plays no part (a coordinator-local table)."""
    scans: list[tuple[int | None, str]] = []
    if isinstance(plan, dict):
        if str(plan.get("Custom Plan Provider", "")).startswith("Citus"):
            job = plan.get("Distributed Query", {}).get("Job", {})
            count = job.get("Task Count")
            method = str(plan.get("INSERT/SELECT method", ""))
            scans.append((None if count is None else int(count), method))
        for value in plan.values():
            scans.extend(citus_scans(value))
    elif isinstance(plan, list):
        for value in plan:
            scans.extend(citus_scans(value))
    return scans


def caller() -> str:
    """Where in memsync the statement comes from: the innermost frame of the package
    outside its storage plumbing (transactions, bulk inserts, pipelining), which every
    caller's statements go through."""
    for frame in reversed(traceback.extract_stack()):
        path = frame.filename.replace("\\", "/")
        plumbing = "storage/engine.py" in path or "storage/tables.py" in path
        if "/memsync/" in path and "/site-packages/" not in path and not plumbing:
            return f"{path.split('/memsync/', 1)[1]}:{frame.lineno} {frame.name}"
    return "?"


@dataclass
class Captured:
    stage: str
    scoped: bool
    """Sent by an operation of one tenant: more than one shard is a routing defect."""
    text: str
    source: str
    executions: int = 0
    shards: list[int] = field(default_factory=list)
    """The largest Task Count of each distinct text explained (empty: coordinator-local)."""
    scans: int = 0
    """Citus scans in its plan: more than one means subplans (intermediate results)."""
    pulled: bool = False
    """An INSERT ... SELECT whose rows are pulled to the coordinator first."""
    error: str = ""


class Recorder:
    """Captures the statements memsync sends and EXPLAINs each distinct text once.

    Through SQLAlchemy: a ``before_cursor_execute`` listener on every engine (the
    store's, and the asyncio engine's that single ingests use), which EXPLAINs on the
    same connection, in a savepoint, so the statement's temporary tables exist and the
    workload does not notice. Past SQLAlchemy: memsync pipelines some writes straight
    through psycopg (``storage.tables.pipelined``: marking episodes compiled, inserts
    that skip duplicates), and no cursor event sees them; psycopg's
    ``Connection.execute`` is wrapped while the recorder is open. Those, and the
    asyncio engine's (whose connection cannot be used from the listener), are
    self-contained statements (rows travel as parameters) and are EXPLAINed after the
    workload on a connection of ``engine`` (:meth:`explain_deferred`)."""

    def __init__(self, engine: sa.Engine) -> None:
        import psycopg

        self.stage = ""
        self.scoped = True
        self.captured: dict[tuple[str, str], Captured] = {}
        self._explained: set[tuple[str, str]] = set()
        self._deferred: list[tuple[Captured, str, Any]] = []
        self._engine = engine
        sa.event.listen(sa.Engine, "before_cursor_execute", self._before)
        self._execute = psycopg.Connection.execute
        recorder, execute = self, self._execute

        def execute_recorded(connection: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            if isinstance(query, str):
                captured = recorder._record(query)
                if captured is not None and recorder._first(query):
                    recorder._deferred.append((captured, query, params))
            return execute(connection, query, params, **kw)

        psycopg.Connection.execute = execute_recorded  # type: ignore[assignment,method-assign]

    def close(self) -> None:
        import psycopg

        psycopg.Connection.execute = self._execute  # type: ignore[method-assign]
        sa.event.remove(sa.Engine, "before_cursor_execute", self._before)

    @contextmanager
    def operation(self, stage: str, *, scoped: bool) -> Iterator[None]:
        """Statements sent inside are ``stage``'s (an operation may nest in another)."""
        outer = self.stage, self.scoped
        self.stage, self.scoped = stage, scoped
        try:
            yield
        finally:
            self.stage, self.scoped = outer

    def _record(self, statement: str) -> Captured | None:
        """Count ``statement`` under the current stage; None if it is not one of ours."""
        if not self.stage or _SKIPPED.match(statement) or "advisory" in statement:
            return None
        if not _TABLES.search(statement):
            return None  # the driver's own queries (version, schema, types)
        key = (self.stage, shape(statement))
        captured = self.captured.get(key)
        if captured is None:
            captured = Captured(self.stage, self.scoped, key[1], caller())
            self.captured[key] = captured
        captured.executions += 1
        return captured

    def _first(self, statement: str) -> bool:
        """Whether this exact text is new in this stage (then it is explained)."""
        if (self.stage, statement) in self._explained:
            return False
        self._explained.add((self.stage, statement))
        return True

    def _before(
        self,
        _connection: sa.Connection,
        cursor: Any,
        statement: str,
        parameters: Any,
        _context: Any,
        executemany: bool,
    ) -> None:
        captured = self._record(statement)
        if captured is None or not self._first(statement):
            return
        if executemany and isinstance(parameters, list | tuple):
            # A true executemany: its first row (insertmanyvalues hands one dict).
            parameters = parameters[0] if parameters else None
        import psycopg

        if isinstance(getattr(cursor, "connection", None), psycopg.Connection):
            explain(captured, cursor.connection, statement, parameters)
        else:  # the asyncio engine's: its connection is the event loop's to use
            self._deferred.append((captured, statement, parameters))

    def explain_deferred(self) -> None:
        connection = self._engine.raw_connection()
        try:
            for captured, statement, parameters in self._deferred:
                explain(captured, connection.driver_connection, statement, parameters)
        finally:
            connection.rollback()
            connection.close()


def explain(captured: Captured, connection: Any, statement: str, parameters: Any) -> None:
    """EXPLAIN ``statement`` on the psycopg ``connection``; note its Citus scans."""
    try:
        # A savepoint inside a transaction (or a transaction of its own outside one),
        # so a failed EXPLAIN rolls back alone.
        with connection.transaction(), connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {statement}", parameters or None)
            row = cursor.fetchone()
    except Exception as error:  # reported, never fatal: the workload goes on
        captured.error = f"{type(error).__name__}: {str(error).splitlines()[0]}"
        return
    scans = citus_scans(row[0] if row else None)
    captured.scans = max(captured.scans, len(scans))
    counts = [count for count, _ in scans if count is not None]
    if counts:
        captured.shards.append(max(counts))
    captured.pulled = captured.pulled or any(method for _, method in scans)


# -- the workload ------------------------------------------------------------------------


class _NoRecorder:
    """The timed runs: no listener, operations only named."""

    @contextmanager
    def operation(self, _stage: str, *, scoped: bool) -> Iterator[None]:
        yield


def tenants(count: int) -> list[str]:
    return [DEFAULT, *(f"tenant-{k}" for k in range(1, count))]


def seconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def median_ms(call: Callable[[], object], repeats: int) -> float:
    call()  # the first one builds plans and warms caches; not counted
    return statistics.median(seconds(call) * 1000 for _ in range(repeats))


def ok(response: httpx.Response) -> httpx.Response:
    return response.raise_for_status()


def workload(store: Store, sizes: Sizes, recorder: Recorder | _NoRecorder) -> dict[str, float]:
    """Everything measured, on ``store``; figures by row name."""
    from fastapi.testclient import TestClient  # here: the parent process needs no FastAPI

    settings = Settings(
        jobs=JobsSettings(compile_every_n_episodes=1000, nightly_compile="0 3 * * *"),
    )
    services = Services(settings, store, FakeClock(NOW))
    client = TestClient(create_app(services), base_url="http://127.0.0.1")
    result: dict[str, float] = {}
    names = tenants(sizes.tenants)

    with recorder.operation("ingest", scoped=True):
        took = seconds(
            lambda: [services.ingest.ingest(t, episodes(SUBJECT, sizes.episodes)) for t in names]
        )
    result["ingest"] = len(names) * sizes.episodes / took

    with recorder.operation("compile", scoped=True):
        took = seconds(lambda: services.compile_service.compile(DEFAULT, SUBJECT))
        # Untimed: a tenth more episodes and an incremental compile, whose statements
        # (memories superseded, versions bumped) a first compile does not send.
        more = max(1, sizes.episodes // 10)
        with recorder.operation("ingest", scoped=True):
            services.ingest.ingest(DEFAULT, episodes(SUBJECT, more, offset=sizes.episodes))
        services.compile_service.compile(DEFAULT, SUBJECT)
    result["compile"] = sizes.episodes / took

    with recorder.operation("ingest", scoped=True):
        # Untimed: single ingests (the lean route, on the asyncio engine).
        for i in range(3):
            ok(client.post("/v1/episodes", json=chat_body("single", i)))

    with recorder.operation("context", scoped=True):
        samples = []
        for r in range(5 + sizes.requests):  # five to warm the route and the index
            body = {"subject_id": SUBJECT, "task": TASKS[r % len(TASKS)], "max_tokens": 1000}
            started = time.perf_counter()
            ok(client.post("/v1/context", json=body))
            samples.append((time.perf_counter() - started) * 1000)
        figures = percentiles(samples[5:])
        # Untimed: the other reads of a subject, so their statements are seen too.
        ok(client.get("/v1/memories/search", params={"subject_id": SUBJECT, "q": "Postgres"}))
        ok(client.get("/v1/timeline", params={"subject_id": SUBJECT, "limit": 50}))
    result["context_p50"], result["context_p99"] = figures["p50"], figures["p99"]

    claims = []
    with recorder.operation("jobs", scoped=False):
        # Enqueued across tenants at once, and claimed across tenants by design: the
        # jobs table is the coordinator's own, so every statement here should be
        # coordinator-local.
        targets = [(names[i % len(names)], f"target-{i}") for i in range(sizes.jobs)]
        services.queue.enqueue_many(BENCH_JOB, targets, now=NOW, trigger="bench")
        while True:
            started = time.perf_counter()
            job = services.queue.claim("bench", now=NOW, lease=LEASE, kinds=[BENCH_JOB])
            if job is None:
                break
            claims.append(time.perf_counter() - started)
            services.queue.complete(job, "bench", {}, now=NOW)
    result["claims"] = len(claims) / sum(claims)
    result["claim_p50"] = statistics.median(claims) * 1000

    nightly = next(s for s in services.schedules if s.id == NIGHTLY_COMPILE)
    firer = services.schedule_firer
    ticks = itertools.count()

    def fire() -> None:
        # A new tick each time, as every night: the same cross-tenant read, and jobs
        # that coalesce into the ones the first tick enqueued.
        fire_time = NOW + timedelta(days=next(ticks))
        firer.fire(nightly, fire_time, now=fire_time)

    def get(path: str) -> Callable[[], object]:
        return lambda: ok(client.get(path))

    every_n = EveryNEpisodes(store, services.queue, 1000, services.clock)
    globals_: dict[str, tuple[str, bool, Callable[[], object]]] = {
        "nightly compile tick": ("scheduler", False, fire),
        "every-N trigger check": ("scheduler", True, lambda: every_n.due(DEFAULT, [SUBJECT])),
        "job depth, all tenants": ("jobs", False, lambda: services.queue.depth()),
        "GET /metrics": ("admin", False, get("/metrics")),
        "GET /v1/jobs": ("admin", True, get("/v1/jobs")),
        **{
            f"GET {page}": ("admin", True, get(page))
            for page in (*ADMIN_PAGES, f"/ui/subjects/{SUBJECT}")
        },
    }
    for name, (stage, scoped, call) in globals_.items():
        with recorder.operation(stage, scoped=scoped):
            result[name] = median_ms(call, sizes.repeats)
    with recorder.operation("admin", scoped=True):
        # Untimed: a subject deleted (the single ingests' own).
        ok(client.delete("/v1/subjects/single"))
    return result


def http_ingest(url: str, directory: str, count: int) -> float:
    """Batch ingest over HTTP to a ``memsync serve`` subprocess: episodes/s."""
    with (
        memsync_server(url, directory, SERVER_CONFIG) as (base, _pid),
        httpx.Client(base_url=base, timeout=300) as client,
    ):
        return count / ingest_batches(client, "http", count)


def child(backend: str, mode: str, sizes: Sizes) -> None:
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        if backend == "postgresql":
            # The Citus nodes run with fsync off (scripts/citus: a throwaway cluster),
            # so their commits never wait for a WAL flush; nor do plain PostgreSQL's
            # here, or every commit would compare a disk flush with none.
            url = f"{url}?{ASYNC_COMMIT_OPTIONS}"
        store = Store.from_url(url)
        result: dict[str, Any]
        if mode == "time":
            result = workload(store, sizes, _NoRecorder())
            store.dispose()
            result["http_ingest"] = http_ingest(url, directory, sizes.http_episodes)
        else:
            recorder = Recorder(store.engine)
            workload(store, sizes, recorder)
            recorder.explain_deferred()
            recorder.close()
            store.dispose()
            result = {"captured": [asdict(c) for c in recorder.captured.values()]}
    print(json.dumps(result))


# -- the tables ---------------------------------------------------------------------------

TIMED_ROWS: list[tuple[str, str, str]] = [
    # (row name in the result, what the table calls it, unit)
    ("ingest", "batch ingest, IngestService", "episodes/s"),
    ("http_ingest", "batch ingest, POST /v1/episodes/batch", "episodes/s"),
    ("compile", "compile, one subject", "episodes/s"),
    ("context_p50", "POST /v1/context p50", "ms"),
    ("context_p99", "POST /v1/context p99", "ms"),
    ("claims", "JobQueue.claim, one after another", "claims/s"),
    ("claim_p50", "JobQueue.claim p50", "ms"),
    ("nightly compile tick", "scheduler: nightly compile tick (all tenants)", "ms"),
    ("every-N trigger check", "scheduler: every-N check (one tenant)", "ms"),
    ("job depth, all tenants", "jobs: depth, all tenants", "ms"),
    ("GET /metrics", "GET /metrics (depth + connector lag, all tenants)", "ms"),
    ("GET /v1/jobs", "GET /v1/jobs (one tenant)", "ms"),
    *((f"GET {page}", f"admin: GET {page}", "ms") for page in ADMIN_PAGES),
    (f"GET /ui/subjects/{SUBJECT}", "admin: GET /ui/subjects/<subject>", "ms"),
]


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}"


def timed_table(postgres: dict[str, float], citus: dict[str, float]) -> None:
    rows = [
        (
            label,
            unit,
            _number(postgres[name]),
            _number(citus[name]),
            f"{citus[name] / postgres[name]:.2f}",
        )
        for name, label, unit in TIMED_ROWS
    ]
    print_table(["operation", "unit", "PostgreSQL", "Citus", "Citus/PostgreSQL"], rows)


def shards_label(captured: dict[str, Any]) -> str:
    if captured["error"]:
        return "not explained"
    if captured["pulled"] and not captured["shards"]:
        return "via coordinator"
    if not captured["shards"]:
        return "coordinator"
    low, high = min(captured["shards"]), max(captured["shards"])
    return str(high) if low == high else f"{low}-{high}"


def defective(captured: dict[str, Any]) -> bool:
    return bool(captured["scoped"] and captured["shards"] and max(captured["shards"]) > 1)


def statements_table(captured: list[dict[str, Any]], width: int) -> None:
    order = {
        stage: i
        for i, stage in enumerate(("ingest", "compile", "context", "jobs", "scheduler", "admin"))
    }
    rows = []
    for c in sorted(captured, key=lambda c: (order.get(c["stage"], 99), c["source"])):
        text = c["text"] if len(c["text"]) <= width else c["text"][: width - 1] + "…"
        flag = "**multi-shard**" if defective(c) else ""
        rows.append(
            (
                c["stage"],
                "`" + text.replace("|", "\\|") + "`",
                "tenant" if c["scoped"] else "global",
                c["executions"],
                shards_label(c),
                c["scans"] if c["shards"] else "",
                f"`{c['source']}`",
                flag,
            )
        )
    print_table(
        ["stage", "statement", "scope", "runs", "shards", "Citus scans", "from", "flag"], rows
    )


def child_retried(arguments: list[str], attempts: int = 3) -> dict[str, Any]:
    """:func:`run_child`, again when it fails: on a shared cluster the test suite stops
    and starts a worker now and then (scripts/citus stop-node), which fails the run
    that was using it. A run that fails ``attempts`` times raises."""
    for attempt in range(1, attempts + 1):
        try:
            return run_child("bench.citus", arguments)
        except RuntimeError as error:
            if attempt == attempts:
                raise
            last = str(error).strip().splitlines()[-1]
            print(f"{arguments[:2]} failed ({last}); again", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--http-episodes", type=int, default=4000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each")
    parser.add_argument("--width", type=int, default=110, help="statement text shown, characters")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        backend, mode, sizes = arguments.child
        child(backend, mode, Sizes(**json.loads(sizes)))
        return
    if not citus_reachable():
        print("citus benchmark skipped: no Citus cluster answers (scripts/citus start)")
        return

    sizes = Sizes(
        arguments.tenants,
        arguments.episodes,
        arguments.http_episodes,
        arguments.requests,
        arguments.jobs,
        arguments.repeats,
    )
    # Small sizes for the plans: which shards a statement reaches does not grow with them.
    small = Sizes(3, 300, 0, 10, 20, 2)
    print(f"citus benchmark: {json.dumps(asdict(sizes))}, {arguments.rounds} rounds; {machine()}")
    # The machine is shared (a test suite may run on the same cluster): say how busy.
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    # Rounds alternate the two, so a slow spell of the shared machine weighs on both;
    # the table shows each figure's median over the rounds.
    runs: dict[str, list[dict[str, float]]] = {"postgresql": [], "citus": []}
    for _ in range(arguments.rounds):
        for backend, results in runs.items():
            results.append(child_retried([backend, "time", json.dumps(asdict(sizes))]))
            print(backend, json.dumps(results[-1]), file=sys.stderr, flush=True)
    postgres, citus = (
        {name: statistics.median(run[name] for run in results) for name in results[0]}
        for results in runs.values()
    )
    captured = child_retried(["citus", "plans", json.dumps(asdict(small))])["captured"]
    print(f"load average at end: {os.getloadavg()[0]:.1f}\n")
    timed_table(postgres, citus)
    print()
    statements_table(captured, arguments.width)
    flagged = [c for c in captured if defective(c)]
    print(f"\n{len(flagged)} tenant-scoped statement(s) touching more than one shard")
    for c in flagged:
        print(f"\n- {c['stage']}, {c['source']}, {max(c['shards'])} shards:\n  {c['text']}")
    failed = [c for c in captured if c["error"]]
    for c in failed:
        print(f"\n- not explained ({c['stage']}, {c['source']}): {c['error']}\n  {c['text']}")


if __name__ == "__main__":
    main()
