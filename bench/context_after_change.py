"""A context bundle from a kept index, and the first one after the subject changed.

    python -m bench.context_after_change [--db sqlite postgresql] [--history 200]
                                         [--new 4] [--rounds 40] [--max-tokens 500]
                                         [--texts compile|load] [--instructions]

What ``bench.load``'s context requests do, without the HTTP and the other requests
around them: a subject with ``--history`` compiled chat statements is asked for a
``--max-tokens`` bundle (the load's task) twice after each change, ``--rounds`` times;
a change is ``--new`` episodes more and a compile, as the load's compiles move a
subject's memory version every few seconds. ``--texts compile`` (the default) takes
the compile benchmark's statements, whose claims collide, so many are superseded and a
memory gathers many sources; ``--texts load`` takes ``bench.load``'s, each statement
with its serial, so most episodes make a memory of their own. The first bundle after a
change rebuilds the process's index of the subject (its ranking inputs, the rows of the
memories the bundle shows); the second is served from the kept index. Printed per
database and kind: the median CPU and wall time of a bundle and the SQL queries it sent
(not counting SQLite's ``BEGIN``), and the subject's active memories and open conflicts
at the end. In process, one thread, so the figures are the bundle's own cost, not a
queue's.

``--instructions`` also counts, for each database and kind, the instructions a bundle
executes (this process's: Python, SQLAlchemy, the database client and SQLite's engine;
not PostgreSQL's server), under valgrind's callgrind in a child run of the same
arguments that counts only inside that kind's bundles (each is called through
``operator.call``, callgrind's ``--toggle-collect``). Times on this VM move by ±30%
with its neighbours; the count does not. Needs valgrind. Results and method:
docs/benchmarks.md ("Ninth round", "Eleventh round").
"""

from __future__ import annotations

import argparse
import operator
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from bench.common import counted_instructions, machine, print_table, throwaway_store
from bench.compile import START, episodes, statement
from memsync.episode import EpisodeDraft
from memsync.runtime.compiling import CompileService
from memsync.runtime.ingest import IngestService
from memsync.runtime.reading import ContextReader, EpisodeRepository, MemoryRepository
from memsync.runtime.storage import Store

TENANT = "bench"
SUBJECT = "user:1"
TASK = "what tools and decisions matter this week"
"""``bench.load``'s context task."""
KINDS = ("after a change", "kept index")


def drafts(texts: str, count: int, offset: int = 0) -> list[EpisodeDraft]:
    """``count`` chat episodes from serial ``offset`` on, of the ``--texts`` kind."""
    if texts == "compile":
        return episodes(SUBJECT, count, offset)
    return [
        EpisodeDraft(
            subject_id=SUBJECT,
            source="chat",
            type="message",
            payload={"text": f"{statement(serial)} (note {serial})"},  # as bench.load's
            idempotency_key=f"{SUBJECT}:{serial}",
            occurred_at=START + timedelta(minutes=serial),
        )
        for serial in range(offset, offset + count)
    ]


@dataclass
class Bundles:
    """What the bundles of one kind (after a change, or from a kept index) took."""

    cpu_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    statements: list[int] = field(default_factory=list)


def run(
    backend: str,
    history: int,
    new: int,
    rounds: int,
    max_tokens: int,
    texts: str,
    counted: str | None = None,
) -> list[tuple[object, ...]]:
    """The table's rows for ``backend``; with ``counted`` (a kind), that kind's bundles
    are called through ``operator.call``, which the parent's callgrind counts inside."""
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        store = Store.from_url(url)
        ingest, compiler = IngestService(store), CompileService(store)
        ingest.ingest(TENANT, drafts(texts, history))
        compiler.compile(TENANT, SUBJECT)
        memories = MemoryRepository(store)
        reader = ContextReader(EpisodeRepository(store), memories)
        reader.bundle(TENANT, SUBJECT, TASK, max_tokens)  # the tokenizer, loaded once
        kinds = {"after a change": Bundles(), "kept index": Bundles()}
        statements = 0

        def count(_connection: object, _cursor: object, sql: str, *_: object) -> None:
            nonlocal statements
            # Queries only: SQLite's reads also send the BEGIN of their transaction.
            statements += not sql.startswith("BEGIN")

        sa.event.listen(store.engine, "before_cursor_execute", count)
        for round_number in range(rounds):
            ingest.ingest(TENANT, drafts(texts, new, history + round_number * new))
            compiler.compile(TENANT, SUBJECT)
            for kind, taken in kinds.items():
                statements = 0
                wall, cpu = time.perf_counter(), time.process_time()
                if kind == counted:
                    operator.call(reader.bundle, TENANT, SUBJECT, TASK, max_tokens)
                else:
                    reader.bundle(TENANT, SUBJECT, TASK, max_tokens)
                taken.cpu_ms.append((time.process_time() - cpu) * 1000)
                taken.wall_ms.append((time.perf_counter() - wall) * 1000)
                taken.statements.append(statements)
        sa.event.remove(store.engine, "before_cursor_execute", count)
        version = memories.version(TENANT, SUBJECT)
        inputs = memories.ranking_inputs(TENANT, SUBJECT, version_read=version)
        store.dispose()
    return [
        (
            backend,
            kind,
            f"{len(inputs.entries):,}",
            len(inputs.open_conflicts),
            f"{statistics.median(taken.cpu_ms):.2f}",
            f"{statistics.median(taken.wall_ms):.2f}",
            statistics.median(taken.statements),
        )
        for kind, taken in kinds.items()
    ]


def instructions(backend: str, kind: str, arguments: argparse.Namespace) -> int:
    """Instructions of one bundle of ``kind``: this benchmark run again under callgrind,
    counting only inside that kind's bundles, divided by the rounds."""
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=_operator_call",
            f"--callgrind-out-file={output}",
            sys.executable,
            "-m",
            "bench.context_after_change",
            *("--db", backend, "--history", str(arguments.history), "--new", str(arguments.new)),
            *("--rounds", str(arguments.rounds), "--max-tokens", str(arguments.max_tokens)),
            *("--texts", arguments.texts, "--counted", kind),
        ]
        # The hash seed changes how many probes dicts and sets take: fixed, it repeats.
        environment = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, capture_output=True, env=environment)
        rounds: int = arguments.rounds
        return counted_instructions(output) // rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--history", type=int, default=200)
    parser.add_argument("--new", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--max-tokens", type=int, default=500)
    parser.add_argument("--texts", choices=["compile", "load"], default="compile")
    parser.add_argument("--instructions", action="store_true", help="also count (valgrind)")
    parser.add_argument("--counted", choices=KINDS, help=argparse.SUPPRESS)  # the child's
    arguments = parser.parse_args()
    workload = (
        arguments.history,
        arguments.new,
        arguments.rounds,
        arguments.max_tokens,
        arguments.texts,
    )
    if arguments.counted is not None:
        for backend in arguments.db:
            run(backend, *workload, arguments.counted)
        return
    print(
        f"context bundles; {machine()}; {arguments.history:,} statements ({arguments.texts} "
        f"texts) compiled before, {arguments.new} more and a compile before each of "
        f"{arguments.rounds} rounds, {arguments.max_tokens}-token bundles"
    )
    rows = []
    for backend in arguments.db:
        for row in run(backend, *workload):
            kind = str(row[1])
            counted = instructions(backend, kind, arguments) if arguments.instructions else None
            rows.append((*row, f"{counted / 1e6:.2f}" if counted is not None else "-"))
    print_table(
        [
            "db",
            "bundle",
            "active memories",
            "open conflicts",
            "CPU ms",
            "wall ms",
            "statements",
            "instructions (M)",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
