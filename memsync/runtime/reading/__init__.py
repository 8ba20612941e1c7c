"""Reading: what the store holds, for agents (bundles, search) and people (inspector).

- :mod:`.episodes` — episodes, their revisions, subjects and timelines;
- :mod:`.memories` — memories, supersession records and conflicts;
- :mod:`.indexes` — what reads precompute per subject and memory version; search;
- :mod:`.bundles` — context bundles (current truth only, deterministic, dated by the
  store);
- :mod:`.inspector` — everything about one subject, the audit path.

What this package offers is listed in ``__init__.pyi`` and imported on first use, so
listing episodes loads no bundle or ranking code.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
