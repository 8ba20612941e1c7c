"""The Linear connector: issues and comments of a workspace, through its GraphQL API.

What this package offers is listed in ``__init__.pyi`` and imported on first use, so
the registry reads :data:`LINEAR` (``declaration``) without importing the connector.
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
