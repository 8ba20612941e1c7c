"""``python -m memsync.runtime.app.cli``: the same as the ``memsync`` command."""

from __future__ import annotations

from memsync.runtime.app.entry import main

main()
