"""Durable jobs: a generic queue in the database, workers, and schedules.

The queue knows nothing of what a job does. The application registers a handler per
job kind on its workers (:class:`Worker`) and a tick action per kind on its schedule
firer (:class:`ScheduleFirer`), the way procrastinate's ``App`` registers tasks.

What this package offers is listed in ``__init__.pyi`` and imported on first use, so
``from memsync.runtime.jobs import JobStatus`` loads no SQL (see docs/benchmarks.md,
"CLI start-up").
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
