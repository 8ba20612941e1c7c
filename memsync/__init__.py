"""memsync: scheduled connector sync for agent memory.

The package is split the way data flows:

- ``memsync.connectors`` reads sources and turns records into episode drafts;
- ``memsync.compile`` derives memories from episodes (pure: no SQL, no HTTP);
- ``memsync.runtime`` stores, ingests, schedules, serves and runs everything.

``memsync.episode`` and ``memsync.clock`` hold the few value types all three share.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
