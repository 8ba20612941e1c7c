"""The ``memsync`` command line: one module per command group.

- :mod:`.setup` — ``db``, ``keys``, ``config``;
- :mod:`.sync` — ``sync``, ``backfill``, ``runs``, ``connectors``;
- :mod:`.episodes` — ``ingest``, ``demo``;
- :mod:`.memories` — ``compile``, ``inspect``, ``conflicts``;
- :mod:`.jobs` — ``jobs``;
- :mod:`.processes` — ``serve``, ``worker``, ``scheduler``, ``run``.

Every command gets its services from the composition root
(:class:`~memsync.runtime.app.services.Services`) through
:func:`~memsync.runtime.app.cli.common.open_services`. Exit codes: 0 success, 1
failure, 2 bad usage or configuration (the message names the file and the field),
3 partial success.
"""

from __future__ import annotations

import sys

# Importing a command module registers its commands on ``app``; the order is the
# order of ``memsync --help``.
from memsync.runtime.app.cli import episodes, jobs, memories, processes, setup, sync  # noqa: F401
from memsync.runtime.app.cli.common import EXIT_USAGE, app, errors
from memsync.runtime.app.config import ConfigError

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except ConfigError as error:  # raised outside a command's own handling
        errors.print(str(error))
        sys.exit(EXIT_USAGE)
