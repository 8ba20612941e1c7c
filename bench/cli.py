"""Start-up time of the ``memsync`` command: ``--help`` and the light commands.

    python -m bench.cli [--runs 10]

Each command runs ``--runs`` times in a fresh interpreter (``python -m memsync ...``),
the commands taking turns so that a slow moment of the machine touches them all alike,
against a configuration with a migrated SQLite store and two connectors (a workspace,
and a Zendesk one whose token comes from the environment). Reported per command: the
median wall time, the median CPU time (user + system) of the child, and the wall time
as a multiple of ``python -c pass`` measured in the same run (and, as floors, the
imports of typer, pydantic and SQLAlchemy alone): on a shared VM whose
speed varies by ±30% the ratio is what compares across sessions. The target (0.3 s)
is wall time on a quiet machine; on a busy one the wall time includes waiting for a
core, and the CPU time is the closer measure of what the command itself costs. Prints a Markdown
table; results and method live in docs/benchmarks.md ("CLI start-up").

``--instructions`` also runs each once under valgrind's callgrind
(``PYTHONHASHSEED=0``) and reports the instructions it executed, in millions, and as a
multiple of ``import sqlalchemy``'s: a count that does not move with the machine's
other work, which the times do (about fifteen seconds a command; needs valgrind).

``--against DIR`` also times every command from another source tree of memsync (a
directory holding its ``memsync/`` package, e.g. ``git archive OLD memsync | tar -x -C
DIR``), taking turns with this one: a before-and-after comparison from one run. Entry
points come from the installed distribution; for a tree whose entry points differ (the
built-in connectors named classes before they named declarations), put a
``memsync-0.1.0.dist-info`` holding that tree's ``METADATA`` and ``entry_points.txt`` in
DIR: the first distribution of a name on ``sys.path`` is the one read.

    python -m bench.cli [--runs 10] [--against DIR] [--instructions]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import counted_instructions, machine, print_table

COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("--version",),
    ("config", "show"),
    ("config", "validate"),
    ("connectors", "list"),
    ("state", "show", "workspace"),
    ("runs", "list"),
    ("jobs", "list"),
)
BASELINE = ("-c", "pass")
# What a command cannot start faster than: the libraries every command over the store
# imports (typer for the command line, pydantic for the configuration, SQLAlchemy for
# the store), each alone in a fresh interpreter.
FLOORS = (
    ("-c", "import typer"),
    ("-c", "import pydantic"),
    ("-c", "import sqlalchemy"),
    ("-c", "import typer, pydantic, yaml, sqlalchemy"),
)
TARGET_SECONDS = 0.3


def write_config(directory: Path) -> Path:
    """A configuration with a SQLite store and two connectors, migrated once."""
    config = directory / "memsync.yaml"
    config.write_text(
        f"store: sqlite:///{directory}/memsync.db\n"
        "connectors:\n"
        "  - {name: workspace, type: workspace, subject: 'workspace:{workspace_id}', "
        f"root: '{directory}'}}\n"
        "  - {name: tickets, type: zendesk, subject: 'org:{organization_id}', "
        "subdomain: acme, email: bot@acme.example, token: '${BENCH_ZENDESK_TOKEN}'}\n",
        encoding="utf-8",
    )
    run_once(memsync_args(config, ("db", "upgrade")), directory)
    return config


def memsync_args(config: Path, command: Sequence[str]) -> list[str]:
    return ["-m", "memsync", "--config", str(config), *command]


def run_once(
    arguments: Sequence[str],
    directory: Path,
    source: Path | None = None,
    wrapper: Sequence[str] = (),
    extra_environment: dict[str, str] | None = None,
) -> tuple[float, float]:
    """Wall and CPU seconds of one ``python ARGUMENTS`` run (which must succeed), with
    memsync imported from ``source`` if given, under ``wrapper`` (a program and its
    arguments) if given."""
    # Without PYTHONDONTWRITEBYTECODE: the warm-up run writes the .pyc files, and every
    # timed run reads them, as an installed memsync does (compiling memsync's modules
    # from source on every run would add tens of milliseconds to each).
    environment = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MEMSYNC_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    environment["BENCH_ZENDESK_TOKEN"] = "bench-token-not-used"
    if source is not None:
        environment["PYTHONPATH"] = str(source)
    environment.update(extra_environment or {})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    completed = subprocess.run(
        [*wrapper, sys.executable, *arguments],
        cwd=directory,
        env=environment,
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise RuntimeError(f"{arguments} exited {completed.returncode}:\n{completed.stderr!r}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def instructions(arguments: Sequence[str], directory: Path, source: Path | None) -> int:
    """The instructions one ``python ARGUMENTS`` run executes, counted by callgrind."""
    output = directory / "callgrind.out"
    run_once(
        arguments,
        directory,
        source,
        wrapper=("valgrind", "--tool=callgrind", f"--callgrind-out-file={output}"),
        # The hash seed changes how many probes dicts and sets take: fixed, the count
        # repeats to the instruction.
        extra_environment={"PYTHONHASHSEED": "0"},
    )
    try:
        return counted_instructions(output)
    finally:
        output.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--against", type=Path, help="another memsync source tree")
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions (valgrind)"
    )
    args = parser.parse_args()
    trees: list[Path | None] = [None] if args.against is None else [None, args.against.resolve()]
    with tempfile.TemporaryDirectory() as temporary:
        directory = Path(temporary)
        config = write_config(directory)
        scenarios: list[tuple[str, Path | None, list[str]]] = [
            ("python -c pass", None, list(BASELINE))
        ]
        scenarios += [(f"python -c '{floor[1]}'", None, list(floor)) for floor in FLOORS]
        scenarios += [
            ("memsync " + " ".join(command), tree, memsync_args(config, command))
            for command in COMMANDS
            for tree in trees
        ]
        walls: dict[tuple[str, Path | None], list[float]] = {}
        cpus: dict[tuple[str, Path | None], list[float]] = {}
        for _name, tree, arguments in scenarios:  # warm the page cache and .pyc files
            run_once(arguments, directory, tree)
        for _ in range(args.runs):
            for name, tree, arguments in scenarios:
                wall, cpu = run_once(arguments, directory, tree)
                walls.setdefault((name, tree), []).append(wall)
                cpus.setdefault((name, tree), []).append(cpu)
        counted = {
            (name, tree): instructions(arguments, directory, tree)
            for name, tree, arguments in (scenarios if args.instructions else [])
        }
    baseline = statistics.median(walls[("python -c pass", None)])
    sqlalchemy = ("python -c 'import sqlalchemy'", None)
    sqlalchemy_cpu = statistics.median(cpus[sqlalchemy])
    rows = []
    for name, tree, _arguments in scenarios:
        wall = statistics.median(walls[(name, tree)])
        cpu = statistics.median(cpus[(name, tree)])
        row = [
            name if tree is None else f"{name} ({tree.name})",
            f"{wall * 1000:.0f}",
            f"{cpu * 1000:.0f}",
            f"{wall / baseline:.1f}",
            f"{cpu / sqlalchemy_cpu:.2f}",
            "yes" if wall <= TARGET_SECONDS else "no",
        ]
        if counted:
            row += [
                f"{counted[(name, tree)] / 1e6:,.0f}",
                f"{counted[(name, tree)] / counted[sqlalchemy]:.2f}",
            ]
        rows.append(row)
    print(f"{machine()}; median of {args.runs} runs each, commands taking turns\n")
    headers = [
        "command",
        "wall ms",
        "cpu ms",
        "x python -c pass",
        "cpu x import sqlalchemy",
        f"<= {TARGET_SECONDS} s",
    ]
    if counted:
        headers += ["M instructions", "instructions x import sqlalchemy"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()
