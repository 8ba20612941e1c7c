"""Reading: what the store holds, for agents (bundles, search) and people (inspector).

- :mod:`.episodes` — episodes, their revisions, subjects and timelines;
- :mod:`.memories` — memories, supersession records and conflicts;
- :mod:`.indexes` — what reads precompute per subject and memory version; search;
- :mod:`.bundles` — context bundles (current truth only, deterministic, dated by the
  store);
- :mod:`.inspector` — everything about one subject, the audit path.
"""

from __future__ import annotations

from memsync.runtime.reading.bundles import ContextReader
from memsync.runtime.reading.episodes import EpisodeRecord, EpisodeRepository, RevisionRecord
from memsync.runtime.reading.indexes import MemorySearch, SubjectIndexes
from memsync.runtime.reading.inspector import ConflictJson, InspectionReport, inspect_subject
from memsync.runtime.reading.memories import MemoryRepository, SupersessionRecord

__all__ = [
    "ConflictJson",
    "ContextReader",
    "EpisodeRecord",
    "EpisodeRepository",
    "InspectionReport",
    "MemoryRepository",
    "MemorySearch",
    "RevisionRecord",
    "SubjectIndexes",
    "SupersessionRecord",
    "inspect_subject",
]
