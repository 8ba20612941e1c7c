"""Jira Cloud: issues found by JQL and their comments, through httpx.

What this package offers is listed in ``__init__.pyi`` and imported on first use, so
the registry reads :data:`JIRA` (``declaration``) without importing the connector.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
