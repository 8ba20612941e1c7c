"""Connectors: read a source and turn its records into episode drafts.

Connectors know nothing of SQL or of the scheduler; the runtime owns windows,
cursors, batching and run records. This module is the public surface for runner and
connector authors; built-in connectors live in subpackages (``github``, ``linear``, ``slack``,
``tickets``, ``workspace``)
and in ``fake``, and are found through the ``memsync.connectors`` entry-point group.

What this package offers is listed in ``__init__.pyi`` and imported on first use:
validating a configuration needs the registry and the config models, not the
connector base classes and their retry machinery.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
