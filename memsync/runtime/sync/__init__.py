"""The sync runner: windows and overlap, cursors and checkpoints, batching through the
one ingest path, run records, backfills, and the one-run-per-connector lock.

See docs/sync.md for the rules; :class:`SyncRunner` is the entry point.

What this package offers is listed in ``__init__.pyi`` and imported on first use, so
reading run records loads neither the runner nor its log context.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
