"""The entry point of the ``memsync`` command (and of ``python -m memsync``).

A command's start-up makes about a hundred thousand objects the collector tracks, all
living until it exits: modules, classes, and the tables typer, pydantic and SQLAlchemy
build as they are imported. CPython's cyclic collector, left on, walks them again and
again while they are made, and once more as the interpreter exits: about a quarter of a
store command's CPU time (docs/benchmarks.md, "Seventh round"). So the collector
waits until the command has started (its store open, or, for a command that opens none,
its work done), and what start-up made is then frozen out of every later collection
(:func:`gc.freeze`, which pre-fork servers use on the same objects). From there a
long-running command (``serve``, ``worker``, ``sync``) collects as any process does.

Apart from :mod:`memsync.runtime.app.cli` because importing that package is part of the
start-up the collector waits through.
"""

from __future__ import annotations

import gc

__all__ = ["main", "started"]


def main() -> None:
    """Run the ``memsync`` command on the process's arguments, the collector paused until
    the command has started."""
    gc.disable()
    try:
        from memsync.runtime.app.cli import main as run_command

        run_command()
    finally:
        started()


def started() -> None:
    """The command has started: freeze what start-up made, then collect as usual.

    Does nothing when the collector is on already: on a second call, and when a command
    runs in a process :func:`main` did not start (the tests call commands in-process)."""
    if gc.isenabled():
        return
    gc.freeze()
    gc.enable()
