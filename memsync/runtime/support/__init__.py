"""Support: resolutions of sessions, and the health, SLA and handoff views of a subject.

- :mod:`.resolutions` — the resolution records (one per subject and session) and their
  statements;
- :mod:`.service` — health, SLA and handoff: reads the subject's memories, conflicts,
  session episodes and resolutions, and hands them to :mod:`memsync.compile.support`.
"""

from __future__ import annotations
