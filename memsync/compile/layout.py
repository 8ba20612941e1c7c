"""How a context bundle is laid out: a module of its own, so that reading the
configuration (which names a default layout) imports none of the compile types."""

from __future__ import annotations

import enum

__all__ = ["BundleLayout"]


class BundleLayout(enum.StrEnum):
    """How ``assembled_context`` is laid out: memsync's plain headings, or Statewave's
    Markdown sections (what Statewave's clients parse)."""

    MEMSYNC = "memsync"
    STATEWAVE = "statewave"
