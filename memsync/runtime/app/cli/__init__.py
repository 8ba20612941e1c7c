"""The ``memsync`` command line: one module per command group.

- :mod:`.setup` — ``db``, ``keys``, ``config``;
- :mod:`.sync` — ``sync``, ``backfill``, ``runs``, ``connectors``;
- :mod:`.state` — ``state show``, ``state reset``;
- :mod:`.episodes` — ``ingest``;
- :mod:`.demo` — ``demo``;
- :mod:`.memories` — ``compile``, ``inspect``, ``conflicts``;
- :mod:`.jobs` — ``jobs``;
- :mod:`.llm` — ``llm export``, ``llm import``;
- :mod:`.processes` — ``serve``, ``worker``, ``scheduler``, ``run``.

Every command gets its services from the composition root
(:class:`~memsync.runtime.app.services.Services`) through
:func:`~memsync.runtime.app.cli.common.open_services`. Exit codes: 0 success, 1
failure, 2 bad usage or configuration (the message names the file and the field),
3 partial success, 4 a service memsync needs (the store, the LLM endpoint) did not
answer, 130 and 143 a foreground ``sync`` or ``backfill`` stopped by SIGINT or SIGTERM
(:mod:`.sync`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

# Importing a command module registers its commands on ``app``; the order is the
# order of ``memsync --help``.
from memsync.runtime.app.cli import (  # noqa: F401
    common,
    demo,
    episodes,
    jobs,
    llm,
    memories,
    processes,
    setup,
    state,
    sync,
)
from memsync.runtime.app.cli.common import (
    EXIT_USAGE,
    actionable,
    app,
    app_for,
    debugging,
    errors,
)

__all__ = ["app", "main"]


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command (``argv``, default: the process's arguments); errors a person can
    act on are one line and an exit code, the traceback only with ``--debug`` (or
    ``MEMSYNC_DEBUG=1``)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    try:
        app_for(arguments)(args=arguments)
    except Exception as error:  # e.g. the store does not answer while services open
        from memsync.runtime.app.config import ConfigError

        if isinstance(error, ConfigError):  # raised outside a command's own handling
            errors.print(str(error), markup=False)
            sys.exit(EXIT_USAGE)
        said = actionable(error)
        if said is None or debugging():
            raise
        message, code = said
        errors.print(message, markup=False)
        sys.exit(code)
