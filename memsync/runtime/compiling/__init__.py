"""Compiling: episodes not yet compiled at their revision become memories, as a set.

- :mod:`.settings` — the ``compile:`` configuration and the resolver's rules;
- :mod:`.episodes` — which episodes are uncompiled, and marking them compiled;
- :mod:`.memories` — loading memories for the resolver and applying its change sets;
- :mod:`.recorder` — the LLM compiler's recorded extractions;
- :mod:`.service` — :class:`CompileService`, the one compile path;
- :mod:`.triggers` — what enqueues compile jobs (every N episodes, schedules).

What this package offers is listed in ``__init__.pyi`` and imported on first use, so
the configuration can read :mod:`.settings` without loading SQL.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
