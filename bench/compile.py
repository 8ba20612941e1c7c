"""Compile throughput, the no-op recompile, and context bundle latency.

    python -m bench.compile [--db sqlite postgresql] [--sizes 1000 10000 100000]

For each database and size N: ingest N episodes for one subject, compile (episodes/s),
then compile again with nothing new (the no-op, which must stay flat as N grows). Then
1,000 subjects x 100 episodes. Then context bundles over a subject with 10,000 active
memories (p50/p99 of POST /v1/context's assembly, in process). Then retirements: one
subject's --retire messages each say where it is now ("I'm in City0042", 1,000 cities in
turn, every one beating the one before), every tenth is deleted, newest first, and the
compile that retires them decides the claim again from what is left (seconds and SQL
statements, beside the first compile of the same messages). Each scenario runs in its
own interpreter against a throwaway store.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from bench.common import machine, peak_rss_mib, print_table, run_child, throwaway_store
from memsync.clock import FakeClock
from memsync.compile.bundle import assemble_bundle
from memsync.episode import EpisodeDraft, Tombstone
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import MemoryRepository
from memsync.runtime.storage import Store

START = datetime(2025, 1, 1, tzinfo=UTC)
TOOLS = ["Postgres", "Redis", "Kafka", "Terraform", "Rust", "Go", "Alembic", "Docker", "Nix"]
CITIES = ["Lisbon", "Porto", "Berlin", "Madrid", "Paris", "Rome", "Oslo", "Vienna"]


_WORD_TEXT = (
    "alpha amber anchor apex arbor atlas aurora basalt beacon birch blaze bolt "
    "breeze canyon cedar cinder citadel cobalt comet coral crest crystal cypress "
    "delta dune echo ember falcon fern fjord flint forge frost galaxy garnet glacier "
    "granite grove harbor hazel helix heron horizon indigo iris ivory jade jasper "
    "juniper kestrel lagoon lantern lava lilac linden lotus lumen lynx magma maple "
    "marble meadow mesa meteor mist monsoon moss nebula nectar nova oak oasis "
    "obsidian onyx opal orbit orchid osprey pebble pepper pine plume polar prairie "
    "prism quartz quill raven reef ridge river robin ruby saffron sage sapphire "
    "sequoia shale sierra silver slate solstice sparrow spruce summit tango tempest "
    "thistle thunder topaz tundra umber valley velvet vertex violet willow zenith "
    "zephyr "
)
WORDS = tuple(_WORD_TEXT.split())


def statement(i: int) -> str:
    """Varied sentences: claims that collide (home, employer, this week), preferences,
    decisions and facts with figures, over a vocabulary wide enough that unrelated
    statements do not look alike to the lexical matcher, as in real text. (Templated
    text where every fact shares most of its words is the lexical matcher's worst case:
    see docs/benchmarks.md.)"""
    pick = [WORDS[(i * 7919 + k * 104729) % len(WORDS)] for k in range(6)]
    tool, city = TOOLS[i % len(TOOLS)], CITIES[(i // 7) % len(CITIES)]
    return [
        f"I use {tool} at work.",
        f"I'm in {city} this week for the {pick[0]} {pick[1]} launch.",
        f"We decided to move {pick[0]} {pick[2]} onto {tool}.",
        f"The {pick[0]} {pick[1]} {pick[3]} {pick[4]} gateway answers {100 + i % 900} calls.",
        f"Deploys of {pick[2]} {pick[3]} stall when {pick[1]} {pick[5]} is cold.",
    ][i % 5]


_FILLER = (
    "the build was green on staging yesterday but the nightly job kept timing out",
    "can someone take a look at the retry logic before the release goes out",
    "we saw the same error in the logs after the last deploy to production",
    "the customer reported that the dashboard loads slowly after logging in",
    "this blocks the migration of the billing tables to the new cluster",
    "steps to reproduce are in the linked ticket along with the stack trace",
    "rolling back fixed it for now though the root cause is still unclear",
    "please keep the thread updated with anything you find in the metrics",
    "the on-call rotation picked it up around midnight and paged the owner",
    "expected behaviour is that the export finishes within a few minutes",
    "the config flag was left on after the experiment ended last sprint",
    "latency went up for about twenty minutes while the cache warmed up",
)


def long_text(i: int) -> str:
    """40-200 words of prose for episode ``i``: a few of the varied statements (so the
    text still makes claims that collide) among sentences of the kind Slack threads,
    issue bodies and tickets are mostly made of, with a few rarer words each."""
    pick = random.Random(i)
    target = pick.randint(40, 200)
    sentences: list[str] = []
    words = 0
    while words < target:
        if pick.random() < 0.3:
            sentence = statement(pick.randrange(1_000_000))
        else:
            rare = " ".join(pick.choice(WORDS) for _ in range(pick.randint(1, 3)))
            sentence = f"{pick.choice(_FILLER).capitalize()} on {rare}."
        if sentences and words + len(sentence.split()) > 200:
            break
        sentences.append(sentence)
        words += len(sentence.split())
    return " ".join(sentences)


def long_payload(i: int) -> dict[str, Any]:
    """Episode ``i`` of the long-text mode, shaped in turn as a Slack thread (messages of
    the subject and a colleague), a GitHub issue (title and body) and a support ticket
    (subject and description)."""
    text = long_text(i)
    shape = i % 3
    if shape == 0:
        sentences = text.split(". ")
        middle = max(1, len(sentences) // 2)
        return {
            "messages": [
                {"role": "user", "content": ". ".join(sentences[:middle])},
                {"role": "assistant", "content": ". ".join(sentences[middle:])},
            ]
        }
    title = WORDS[i % len(WORDS)].capitalize() + " " + _FILLER[i % len(_FILLER)][:40]
    if shape == 1:
        return {"title": title, "body": text}
    return {"subject": title, "description": text}


def payload(i: int, text: str = "short") -> dict[str, Any]:
    """Episode ``i``'s payload: a chat statement (``short``) or 40-200 words (``long``)."""
    if text == "long":
        return long_payload(i)
    return {"messages": [{"role": "user", "content": statement(i)}]}


def episodes(subject: str, count: int, offset: int = 0) -> list[EpisodeDraft]:
    return [
        EpisodeDraft(
            subject_id=subject,
            source="chat",
            type="message",
            payload={"messages": [{"role": "user", "content": statement(offset + i)}]},
            idempotency_key=f"{subject}:{offset + i}",
            occurred_at=START + timedelta(minutes=offset + i),
        )
        for i in range(count)
    ]


def one_subject(url: str, count: int) -> dict[str, Any]:
    store = Store.from_url(url)
    IngestService(store).ingest("bench", episodes("user:1", count))
    compiler = CompileService(store)
    started = time.perf_counter()
    result = compiler.compile("bench", "user:1")
    compile_seconds = time.perf_counter() - started
    noop = []
    for _ in range(5):
        started = time.perf_counter()
        again = compiler.compile("bench", "user:1")
        noop.append(time.perf_counter() - started)
        assert again.memories_created == 0
    return {
        "episodes_per_s": count / compile_seconds,
        "memories": result.memories_created,
        "noop_ms": statistics.median(noop) * 1000,
        "peak_rss_mib": peak_rss_mib(),
    }


def many_subjects(url: str, subjects: int, per_subject: int) -> dict[str, Any]:
    store = Store.from_url(url)
    drafts = [d for s in range(subjects) for d in episodes(f"user:{s}", per_subject)]
    IngestService(store).ingest("bench", drafts)
    compiler = CompileService(store)
    started = time.perf_counter()
    created = sum(
        compiler.compile("bench", name).memories_created
        for name in compiler.subjects_with_uncompiled("bench")
    )
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    noop = sum(compiler.compile("bench", f"user:{s}").memories_created for s in range(subjects))
    noop_seconds = time.perf_counter() - started
    assert noop == 0
    return {
        "episodes_per_s": subjects * per_subject / seconds,
        "memories": created,
        "noop_ms": noop_seconds * 1000 / subjects,
        "peak_rss_mib": peak_rss_mib(),
    }


def bundles(url: str, memories: int) -> dict[str, Any]:
    store = Store.from_url(url)
    # Every statement distinct, so each episode yields memories that all stay active.
    drafts = [
        EpisodeDraft(
            subject_id="user:1",
            source="note",
            type="note",
            payload={"text": f"Service svc-k{i} deploys with {TOOLS[i % 9]} in region r{i % 7}."},
            idempotency_key=f"note:{i}",
            occurred_at=START + timedelta(minutes=i),
        )
        for i in range(memories)
    ]
    IngestService(store).ingest("bench", drafts)
    CompileService(store).compile("bench", "user:1")
    repository = MemoryRepository(store)
    # After the compile (which ran on the wall clock): a moment at which every memory
    # exists. (START + 365 days, before the compile, read none of them.)
    as_of = datetime.now(UTC)
    active = len(repository.memories("bench", "user:1"))
    timings = []
    for i in range(60):
        started = time.perf_counter()
        loaded = repository.memories("bench", "user:1", as_of=as_of)
        conflicts = [r.conflict for r in repository.conflicts("bench", "user:1", as_of=as_of)]
        assemble_bundle("user:1", f"deploy service {i}", loaded, conflicts, [], 2000, as_of)
        timings.append(time.perf_counter() - started)
    timings.sort()
    return {
        "active": active,
        "p50_ms": timings[len(timings) // 2] * 1000,
        "p99_ms": timings[int(len(timings) * 0.99) - 1] * 1000,
    }


def retirements(url: str, messages: int) -> dict[str, Any]:
    store = Store.from_url(url)
    clock = FakeClock(START + timedelta(days=400))
    ingest, compiler = IngestService(store, clock), CompileService(store, clock=clock)
    drafts = [
        EpisodeDraft(
            subject_id="user:1",
            source="chat",
            type="message",
            payload={"text": f"I'm in City{i % 1000:04d}"},
            idempotency_key=f"m:{i}",
            occurred_at=START + timedelta(minutes=i),
        )
        for i in range(messages)
    ]
    ingest.ingest("bench", drafts)
    started = time.perf_counter()
    compiler.compile("bench", "user:1")
    first_seconds = time.perf_counter() - started
    clock.advance(timedelta(hours=1))
    deleted = list(range(messages - 1, 0, -10))
    ingest.tombstone("bench", [Tombstone(f"m:{i}") for i in deleted])
    statements = 0

    def count(*_: object) -> None:
        nonlocal statements
        statements += 1

    sa.event.listen(store.engine, "before_cursor_execute", count)
    started = time.perf_counter()
    result = compiler.compile("bench", "user:1")
    seconds = time.perf_counter() - started
    memories = MemoryRepository(store).memories("bench", "user:1")
    now = [memory.content for memory in memories if memory.claim_key]
    assert now == [f"Currently in City{(messages - 2) % 1000:04d}"], now  # what is left says
    return {
        "deleted": len(deleted),
        "first_s": first_seconds,
        "retire_s": seconds,
        "statements": statements,
        "tombstoned": result.memories_tombstoned,
    }


def child(backend: str, scenario: str, size: int) -> None:
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        if scenario == "one":
            result = one_subject(url, size)
        elif scenario == "many":
            result = many_subjects(url, size, 100)
        elif scenario == "retire":
            result = retirements(url, size)
        else:
            result = bundles(url, size)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1_000, 10_000, 100_000])
    parser.add_argument("--subjects", type=int, default=1_000)
    parser.add_argument("--bundle-memories", type=int, default=10_000)
    parser.add_argument("--retire", nargs="+", type=int, default=[5_000, 20_000])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        backend, scenario, size = arguments.child
        child(backend, scenario, int(size))
        return

    print(f"compile benchmark; {machine()}")
    rows = []
    for backend in arguments.db:
        scenarios = [("one", size, f"1 subject x {size:,}") for size in arguments.sizes]
        scenarios.append(("many", arguments.subjects, f"{arguments.subjects:,} subjects x 100"))
        for scenario, size, label in scenarios:
            result = run_child("bench.compile", [backend, scenario, str(size)])
            print(backend, label, json.dumps(result), file=sys.stderr, flush=True)
            rows.append(
                (
                    backend,
                    label,
                    f"{result['episodes_per_s']:,.0f}",
                    f"{result['memories']:,}",
                    f"{result['noop_ms']:.1f}",
                    f"{result['peak_rss_mib']:.0f}",
                )
            )
    print_table(
        ["db", "episodes", "compile episodes/s", "memories", "no-op recompile ms", "peak MiB"],
        rows,
    )
    bundle_rows = []
    for backend in arguments.db:
        result = run_child("bench.compile", [backend, "bundle", str(arguments.bundle_memories)])
        bundle_rows.append(
            (backend, f"{result['active']:,}", f"{result['p50_ms']:.1f}", f"{result['p99_ms']:.1f}")
        )
    print_table(["db", "active memories", "bundle p50 ms", "bundle p99 ms"], bundle_rows)
    retire_rows = []
    for backend in arguments.db:
        for size in arguments.retire:
            result = run_child("bench.compile", [backend, "retire", str(size)])
            retire_rows.append(
                (
                    backend,
                    f"{size:,}",
                    f"{result['deleted']:,}",
                    f"{result['first_s']:.2f}",
                    f"{result['retire_s']:.2f}",
                    result["statements"],
                )
            )
    print_table(
        ["db", "messages", "deleted", "first compile s", "retiring compile s", "statements"],
        retire_rows,
    )


if __name__ == "__main__":
    main()
