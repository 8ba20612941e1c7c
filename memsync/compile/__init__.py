"""Compile: derive memories from episodes. Pure: no SQL, no HTTP.

The one exception is ``memsync.compile.llm``, which talks to a model through an
injected ``httpx.Client``; it is not re-exported here so importing the pure engine never
loads an HTTP stack. See docs/compile.md for kinds, claim keys, policies and ranking.

What this package offers is listed in ``__init__.pyi`` and imported on first use, so
reading the configuration loads no compiler.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
