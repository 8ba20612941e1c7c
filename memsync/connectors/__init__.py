"""Connectors: read a source and turn its records into episode drafts.

Connectors know nothing of SQL or of the scheduler; the runtime owns windows,
cursors, batching and run records.
"""

from __future__ import annotations
