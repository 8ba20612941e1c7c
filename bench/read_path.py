"""The HTTP read path, as a client sees it, against a `memsync serve` subprocess.

    python -m bench.read_path [--db sqlite postgresql] [--sizes 1000 10000 50000]
                              [--requests 200] [--compile-episodes 4000] [--singles 1000]
                              [--parts ...] [--compile-text short|long]

Per database, in one run against one server (so the ratios compare like with like):

1. context and search on subjects with about 1k, 10k and 50k active memories, interleaved
   with `GET /v1/timeline?limit=50` on a small subject (50 episodes): p50/p99 each, and
   each p50 over the timeline's p50. The first context request per subject (which builds
   its ranking index) is reported apart, as "cold".
2. compile over HTTP: 4,000 chat episodes of one subject ingested by
   `POST /v1/episodes/batch` (timed: batch ingest episodes/s), then one synchronous
   `POST /v1/memories/compile` with nothing else running (timed: compile episodes/s).
   Then the same episodes for a second subject, compiled while another connection
   reads small pages (`GET /v1/timeline?limit=10` on the small subject) back to back:
   their p50/p99 during that compile, against the same reads idle just before.
3. single `POST /v1/episodes`, sequential, new episodes, one keep-alive connection:
   episodes/s, p50 and p99, first with the benchmark's httpx client, then with the
   standard library's `http.client` (a lean client: the client runs on the same two
   cores, and httpx costs it about three times the CPU a request); beside it, in the
   same run, what bounds it from below: `GET /v1/health` over the same connection (the
   HTTP floor) and, on PostgreSQL, a committed one-row write in process (the commit's
   WAL flush). On PostgreSQL the same ingest runs again against a second server whose
   store URL turns `synchronous_commit` off (opt-in; docs/operations.md).

Beside the compile and the single ingest, the server process's CPU time (user and
system, from /proc) for that work: on a shared machine it varies far less than wall
time. It leaves out the database server's own work.

``--parts`` runs some of the three (``reads``, ``compile``, ``single``); default all.
``--compile-text long`` gives the compile part episodes of 40-200 words instead of chat
statements (``bench.compile.long_payload``: Slack threads, issue bodies and tickets).

Setting up the large subjects (ingest and compile in process) is not timed. Prints one
Markdown table per database; see docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from bench.common import (
    cpu_seconds,
    machine,
    memsync_server,
    print_table,
    run_child,
    throwaway_store,
)
from bench.compile import TOOLS, WORDS, payload
from memsync.episode import EpisodeDraft
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store

TENANT = "default"
START = datetime(2025, 1, 1, tzinfo=UTC)
SMALL = "small"
TASKS = [
    f"deploy the {WORDS[k * 11 % len(WORDS)]} service with {TOOLS[k % len(TOOLS)]}"
    for k in range(10)
]


def note(i: int) -> str:
    """A distinct statement per episode, so nearly every memory it yields stays active."""
    first, second = WORDS[i % len(WORDS)], WORDS[i * 7 % len(WORDS)]
    return f"Service {first}-{second}-{i} deploys with {TOOLS[i % len(TOOLS)]} in region r{i % 7}."


def fill(store: Store, subject: str, count: int, text: Callable[[int], str]) -> int:
    """Ingest and compile ``count`` episodes of ``subject``; return its active memories."""
    drafts = [
        EpisodeDraft(
            subject_id=subject,
            source="note",
            type="note",
            payload={"text": text(i)},
            idempotency_key=f"{subject}:{i}",
            occurred_at=START + timedelta(minutes=i),
        )
        for i in range(count)
    ]
    IngestService(store).ingest(TENANT, drafts)
    CompileService(store).compile(TENANT, subject)
    return MemoryRepository(store).count_by_subject(TENANT, [subject]).get(subject, 0)


def chat_body(subject: str, i: int, text: str = "short") -> dict[str, Any]:
    """Episode ``i`` of ``subject``: a chat statement, or 40-200 words (``text="long"``)."""
    return {
        "subject_id": subject,
        "source": "chat",
        "type": "message",
        "payload": payload(i, text),
        "idempotency_key": f"{subject}:{i}",
        "occurred_at": (START + timedelta(minutes=i)).isoformat(),
    }


def timed(call: Callable[[], httpx.Response]) -> float:
    started = time.perf_counter()
    call().raise_for_status()
    return (time.perf_counter() - started) * 1000


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50": statistics.median(ordered),
        "p99": ordered[max(0, round(len(ordered) * 0.99) - 1)],
    }


PARTS = ("reads", "compile", "single")
SAMPLED = ("context", "context_receipt", "context_as_of", "search", "timeline")
"""What the reads part times on each large subject: a bundle, a bundle with a receipt
(emit_receipt: one more insert), a bundle as of the moment of the first (the reference
path over the memory history, one request in ten), search and the small timeline."""
SERVER_CONFIG = "api:\n  max_batch_size: 1000\n  max_body_bytes: 104857600\n"
ASYNC_COMMIT_OPTIONS = "options=-c%20synchronous_commit%3Doff"


def child(
    backend: str,
    sizes: list[int],
    requests: int,
    compile_count: int,
    singles: int,
    parts: list[str],
    text: str = "short",
) -> None:
    result: dict[str, Any] = {"sizes": {}}
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        store = Store.from_url(url)
        fill(store, SMALL, 50, note)
        active = (
            {size: fill(store, f"big-{size}", size, note) for size in sizes}
            if "reads" in parts
            else {}
        )
        store.dispose()
        with (
            memsync_server(url, directory, SERVER_CONFIG) as (base, pid),
            httpx.Client(base_url=base, timeout=300) as client,
        ):
            timeline = {"subject_id": SMALL, "limit": 50}

            def context(subject: str, task: str, **extra: Any) -> httpx.Response:
                body = {"subject_id": subject, "task": task, "max_tokens": 1000, **extra}
                return client.post("/v1/context", json=body)

            for _ in range(5):  # warm the process: imports, the tokenizer, connections
                timed(lambda: client.get("/v1/timeline", params=timeline))
                timed(lambda: context(SMALL, "warm up"))
            for size in active:
                subject = f"big-{size}"
                cold = timed(lambda subject=subject: context(subject, TASKS[0]))
                samples: dict[str, list[float]] = {name: [] for name in SAMPLED}
                # as_of reads every memory the subject had then: one in ten requests.
                as_of = context(subject, TASKS[0]).json()["provenance"]["as_of"]
                for r in range(requests):
                    task = TASKS[r % len(TASKS)]
                    word = WORDS[r * 13 % len(WORDS)]
                    samples["context"].append(timed(lambda s=subject, t=task: context(s, t)))
                    samples["context_receipt"].append(
                        timed(lambda s=subject, t=task: context(s, t, emit_receipt=True))
                    )
                    if r % 10 == 0:
                        samples["context_as_of"].append(
                            timed(lambda s=subject, t=task, a=as_of: context(s, t, as_of=a))
                        )
                    samples["search"].append(
                        timed(
                            lambda s=subject, w=word: client.get(
                                "/v1/memories/search", params={"subject_id": s, "q": w}
                            )
                        )
                    )
                    samples["timeline"].append(
                        timed(lambda: client.get("/v1/timeline", params=timeline))
                    )
                result["sizes"][str(size)] = {
                    "active": active[size],
                    "cold_ms": cold,
                    **{name: percentiles(values) for name, values in samples.items()},
                }
            if "compile" in parts:
                result["compile"] = compile_during_reads(base, pid, client, compile_count, text)
            if "single" in parts:
                result["single"] = single_ingests(base, client, singles, pid)
                result["single"]["health"] = percentiles(
                    [timed(lambda: client.get("/v1/health")) for _ in range(500)]
                )
        if "single" in parts and backend == "postgresql":
            result["single"]["commit"] = commit_latency(url)
            separator = "&" if "?" in url else "?"
            async_url = f"{url}{separator}{ASYNC_COMMIT_OPTIONS}"
            with (
                memsync_server(async_url, directory, SERVER_CONFIG) as (base, pid),
                httpx.Client(base_url=base, timeout=300) as client,
            ):
                result["single_async_commit"] = single_ingest(
                    httpx_post(client), singles, pid, "async"
                )
    print(json.dumps(result))


def commit_latency(url: str, count: int = 300) -> dict[str, float]:
    """A committed one-row write, in process: the floor the commit's WAL flush sets."""
    store = Store.from_url(url)
    try:
        with store.write() as connection:
            connection.exec_driver_sql("CREATE TABLE bench_commit (n integer)")
        samples = []
        for n in range(count):
            started = time.perf_counter()
            with store.write() as connection:
                connection.exec_driver_sql("INSERT INTO bench_commit VALUES (%(n)s)", {"n": n})
            samples.append((time.perf_counter() - started) * 1000)
        with store.write() as connection:
            connection.exec_driver_sql("DROP TABLE bench_commit")
    finally:
        store.dispose()
    return percentiles(samples)


def small_read(client: httpx.Client) -> float:
    return timed(lambda: client.get("/v1/timeline", params={"subject_id": SMALL, "limit": 10}))


def ingest_batches(client: httpx.Client, subject: str, count: int, text: str = "short") -> float:
    """Ingest ``count`` chat episodes of ``subject`` by POST /v1/episodes/batch; seconds."""
    bodies = [chat_body(subject, i, text) for i in range(count)]
    started = time.perf_counter()
    for start in range(0, count, 1000):
        client.post(
            "/v1/episodes/batch", json={"episodes": bodies[start : start + 1000]}
        ).raise_for_status()
    return time.perf_counter() - started


def compile_http(base: str, subject: str, done: threading.Event | None = None) -> float:
    """One synchronous POST /v1/memories/compile on its own connection; seconds."""
    with httpx.Client(base_url=base, timeout=600) as compiler:
        started = time.perf_counter()
        compiler.post("/v1/memories/compile", json={"subject_id": subject}).raise_for_status()
        seconds = time.perf_counter() - started
    if done is not None:
        done.set()
    return seconds


def compile_during_reads(
    base: str, pid: int, client: httpx.Client, count: int, text: str = "short"
) -> dict[str, Any]:
    # Throughput: ingest, then compile with nothing else running.
    cpu_before = cpu_seconds(pid)
    ingest_seconds = ingest_batches(client, "compiled", count, text)
    cpu_ingested = cpu_seconds(pid)
    compile_seconds = compile_http(base, "compiled")
    cpu_compiled = cpu_seconds(pid)
    # Responsiveness: the same episodes for another subject, compiled while another
    # connection reads small pages back to back.
    ingest_batches(client, "compiled-while-reading", count, text)
    idle = [small_read(client) for _ in range(200)]
    done = threading.Event()
    thread = threading.Thread(target=compile_http, args=(base, "compiled-while-reading", done))
    thread.start()
    during = []
    while not done.is_set():
        during.append(small_read(client))
    thread.join()
    return {
        "batch_ingest_per_s": count / ingest_seconds,
        "compile_per_s": count / compile_seconds,
        "batch_ingest_cpu_s": cpu_ingested - cpu_before,
        "compile_cpu_s": cpu_compiled - cpu_ingested,
        "idle": percentiles(idle),
        "during": percentiles(during),
        "reads_during": len(during),
    }


Post = Callable[[dict[str, Any]], int]
"""Sends one episode as ``POST /v1/episodes``; answers the status code."""


def httpx_post(client: httpx.Client) -> Post:
    return lambda body: client.post("/v1/episodes", json=body).status_code


def stdlib_post(base: str) -> tuple[Post, Callable[[], None]]:
    """A lean client: the standard library's ``http.client`` on one keep-alive
    connection, the body encoded by ``json.dumps``; and a function that closes it."""
    host, port = base.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=300)
    headers = {"content-type": "application/json"}

    def post(body: dict[str, Any]) -> int:
        connection.request("POST", "/v1/episodes", json.dumps(body), headers)
        response = connection.getresponse()
        response.read()
        return response.status

    return post, connection.close


def single_ingest(post: Post, count: int, pid: int, subject: str) -> dict[str, Any]:
    """``count`` new episodes by ``post``, one after the other: their rate, latency
    percentiles, and the CPU a request of the server and of this client (the two share
    the machine's cores, so a heavier client slows the sequence as much as a heavier
    server)."""
    for i in range(50):  # warm the route: its first requests build validators and plans
        assert post(chat_body(f"{subject}-warm", i)) in (200, 201)
    samples = []
    cpu_before, client_before = cpu_seconds(pid), time.process_time()
    started = time.perf_counter()
    for i in range(count):
        body = chat_body(subject, i)
        request_started = time.perf_counter()
        status = post(body)
        samples.append((time.perf_counter() - request_started) * 1000)
        assert status == 201, f"POST /v1/episodes answered {status}"
    seconds = time.perf_counter() - started
    return {
        "per_s": count / seconds,
        "server_cpu_ms": (cpu_seconds(pid) - cpu_before) * 1000 / count,
        "client_cpu_ms": (time.process_time() - client_before) * 1000 / count,
        **percentiles(samples),
    }


def single_ingests(base: str, client: httpx.Client, count: int, pid: int) -> dict[str, Any]:
    """The single ingest with the benchmark's httpx client, then with the lean one."""
    result = single_ingest(httpx_post(client), count, pid, "single")
    lean_post, close = stdlib_post(base)
    try:
        result["stdlib"] = single_ingest(lean_post, count, pid, "single-stdlib")
    finally:
        close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1_000, 10_000, 50_000])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--compile-episodes", type=int, default=4_000)
    parser.add_argument("--singles", type=int, default=1_000)
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument(
        "--compile-text",
        choices=("short", "long"),
        default="short",
        help="the compile part's episodes: chat statements, or 40-200 words each",
    )
    parser.add_argument("--child", nargs=7, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        backend, sizes, requests, compile_count, singles, parts, text = arguments.child
        child(
            backend,
            [int(size) for size in sizes.split(",")],
            int(requests),
            int(compile_count),
            int(singles),
            parts.split(","),
            text,
        )
        return

    print(f"read path benchmark; {machine()}")
    for backend in arguments.db:
        result = run_child(
            "bench.read_path",
            [
                backend,
                ",".join(str(size) for size in arguments.sizes),
                str(arguments.requests),
                str(arguments.compile_episodes),
                str(arguments.singles),
                ",".join(arguments.parts),
                arguments.compile_text,
            ],
        )
        print(f"\n{backend}", json.dumps(result), file=sys.stderr, flush=True)
        print(f"\n**{backend}**\n")
        print_table(["figure", "p50 ms", "p99 ms", "ratio to timeline p50", "note"], rows(result))


def rows(result: dict[str, Any]) -> list[tuple[object, ...]]:
    table: list[tuple[object, ...]] = []
    for size, figures in result["sizes"].items():
        base = figures["timeline"]["p50"]
        label = f"{int(size):,} episodes ({figures['active']:,} active memories)"
        for name in SAMPLED:
            if name not in figures:  # a result of a run before the figure existed
                continue
            table.append(
                (
                    f"{name}, {label}",
                    f"{figures[name]['p50']:.1f}",
                    f"{figures[name]['p99']:.1f}",
                    f"{figures[name]['p50'] / base:.2f}",
                    f"cold {figures['cold_ms']:.0f} ms" if name == "context" else "",
                )
            )
    if "compile" in result:
        table.extend(compile_rows(result["compile"]))
    if "single" in result:
        table.extend(single_rows(result))
    return table


def compile_rows(compiled: dict[str, Any]) -> list[tuple[object, ...]]:
    table: list[tuple[object, ...]] = []
    idle, during = compiled["idle"], compiled["during"]
    table.append(
        (
            "small read, idle",
            f"{idle['p50']:.1f}",
            f"{idle['p99']:.1f}",
            "",
            "GET /v1/timeline?limit=10",
        )
    )
    table.append(
        (
            "small read, during compile",
            f"{during['p50']:.1f}",
            f"{during['p99']:.1f}",
            "",
            f"p99 = {during['p99'] / idle['p50']:.1f}x idle p50; {compiled['reads_during']} reads",
        )
    )
    table.append(
        (
            "compile over HTTP",
            "",
            "",
            "",
            f"{compiled['compile_per_s']:,.0f} episodes/s; batch ingest "
            f"{compiled['batch_ingest_per_s']:,.0f}/s "
            f"(ratio {compiled['compile_per_s'] / compiled['batch_ingest_per_s']:.2f}); "
            f"server CPU {compiled['compile_cpu_s']:.2f} s, ingest "
            f"{compiled['batch_ingest_cpu_s']:.2f} s",
        )
    )
    return table


def single_rows(result: dict[str, Any]) -> list[tuple[object, ...]]:
    single = result["single"]
    table: list[tuple[object, ...]] = [
        (
            "single POST /v1/episodes",
            f"{single['p50']:.1f}",
            f"{single['p99']:.1f}",
            "",
            f"{single['per_s']:,.0f} episodes/s sequential; server CPU "
            f"{single['server_cpu_ms']:.2f} ms, client (httpx) {single['client_cpu_ms']:.2f} ms "
            "a request",
        ),
        (
            "same, standard library client",
            f"{single['stdlib']['p50']:.1f}",
            f"{single['stdlib']['p99']:.1f}",
            "",
            f"{single['stdlib']['per_s']:,.0f} episodes/s sequential; server CPU "
            f"{single['stdlib']['server_cpu_ms']:.2f} ms, client (http.client) "
            f"{single['stdlib']['client_cpu_ms']:.2f} ms a request",
        ),
        (
            "GET /v1/health, same connection",
            f"{single['health']['p50']:.1f}",
            f"{single['health']['p99']:.1f}",
            "",
            "the HTTP floor",
        ),
    ]
    if "commit" in single:
        table.append(
            (
                "committed one-row write, in process",
                f"{single['commit']['p50']:.1f}",
                f"{single['commit']['p99']:.1f}",
                "",
                "the WAL flush floor",
            )
        )
    if "single_async_commit" in result:
        relaxed = result["single_async_commit"]
        table.append(
            (
                "single POST /v1/episodes, synchronous_commit=off",
                f"{relaxed['p50']:.1f}",
                f"{relaxed['p99']:.1f}",
                "",
                f"{relaxed['per_s']:,.0f} episodes/s sequential (opt-in); "
                f"server CPU {relaxed['server_cpu_ms']:.2f} ms a request",
            )
        )
    return table


if __name__ == "__main__":
    main()
