"""Reading: what the store holds, for agents (bundles, search) and people (inspector).

- :mod:`.episodes` — episodes, their revisions, subjects and timelines;
- :mod:`.memories` — memories, supersession records and conflicts;
- :mod:`.bundles` — context bundles (active memories only, deterministic under as_of);
- :mod:`.inspector` — everything about one subject, the audit path.
"""

from __future__ import annotations

from memsync.runtime.reading.bundles import ContextReader
from memsync.runtime.reading.episodes import EpisodeRecord, EpisodeRepository, RevisionRecord
from memsync.runtime.reading.inspector import ConflictJson, InspectionReport, inspect_subject
from memsync.runtime.reading.memories import MemoryRepository, SupersessionRecord

__all__ = [
    "ConflictJson",
    "ContextReader",
    "EpisodeRecord",
    "EpisodeRepository",
    "InspectionReport",
    "MemoryRepository",
    "RevisionRecord",
    "SupersessionRecord",
    "inspect_subject",
]
