"""The ``memsync`` command line: one module per command group.

- :mod:`.setup` — ``db``, ``keys``, ``config``;
- :mod:`.sync` — ``sync``, ``backfill``, ``runs``, ``connectors``;
- :mod:`.state` — ``state show``, ``state reset``;
- :mod:`.episodes` — ``ingest``, ``demo``;
- :mod:`.memories` — ``compile``, ``inspect``, ``conflicts``;
- :mod:`.jobs` — ``jobs``;
- :mod:`.processes` — ``serve``, ``worker``, ``scheduler``, ``run``.

Every command gets its services from the composition root
(:class:`~memsync.runtime.app.services.Services`) through
:func:`~memsync.runtime.app.cli.common.open_services`. Exit codes: 0 success, 1
failure, 2 bad usage or configuration (the message names the file and the field),
3 partial success, 4 a service memsync needs (the store, the LLM endpoint) did not
answer.
"""

from __future__ import annotations

import sys

from sqlalchemy import exc as sa_exc

from memsync.compile.llm import LLMExtractionError

# Importing a command module registers its commands on ``app``; the order is the
# order of ``memsync --help``.
from memsync.runtime.app.cli import (  # noqa: F401
    common,
    episodes,
    jobs,
    memories,
    processes,
    setup,
    state,
    sync,
)
from memsync.runtime.app.cli.common import EXIT_UNAVAILABLE, EXIT_USAGE, app, debugging, errors
from memsync.runtime.app.config import ConfigError, redacted_store_url

__all__ = ["app", "main"]


def main() -> None:
    """Run the command; errors a person can act on are one line and an exit code, the
    traceback only with ``--debug`` (or ``MEMSYNC_DEBUG=1``)."""
    try:
        app()
    except ConfigError as error:  # raised outside a command's own handling
        errors.print(str(error), markup=False)
        sys.exit(EXIT_USAGE)
    except (sa_exc.OperationalError, sa_exc.InterfaceError) as error:
        if debugging():
            raise
        store = redacted_store_url(common.loaded_store_url())
        reason = str(error.orig).strip().splitlines()[0] if error.orig else str(error)
        errors.print(
            f"memsync: cannot reach the store {store}: {reason}. Check that the database "
            "is running and that `store:` in the configuration (or $MEMSYNC_STORE) names "
            "it; --debug shows the traceback.",
            markup=False,
        )
        sys.exit(EXIT_UNAVAILABLE)
    except LLMExtractionError as error:
        if debugging():
            raise
        errors.print(
            f"memsync: compiling failed, nothing was consumed: {error}. Check compile.llm "
            "in the configuration and that the endpoint answers; --debug shows the traceback.",
            markup=False,
        )
        sys.exit(EXIT_UNAVAILABLE)
