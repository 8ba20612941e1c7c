"""The context of the work in hand, added to every log line written meanwhile.

The stage doing the work binds it (``tenant``, ``connector``, ``run_id``, ``job_id``,
``subject``) with :func:`bound_log_context`; the log pipeline
(:mod:`memsync.runtime.app.observability.logs`) adds :func:`log_context` to every
line. A ``ContextVar`` holds it, so it belongs to the thread (and the asyncio task)
that bound it. Kept apart from structlog so that binding costs no import: a command
that writes no log line never imports structlog.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType

__all__ = ["bound_log_context", "log_context"]

_NOTHING_BOUND: Mapping[str, object] = MappingProxyType({})
_bound: ContextVar[Mapping[str, object]] = ContextVar("memsync_log_context", default=_NOTHING_BOUND)


@contextmanager
def bound_log_context(**fields: object) -> Iterator[None]:
    """Add ``fields`` to every log line written in this context until the block ends.

    Nested blocks add to the outer one's fields; a field bound again inside wins there
    and is restored on the way out.
    """
    token = _bound.set(MappingProxyType({**_bound.get(), **fields}))
    try:
        yield
    finally:
        _bound.reset(token)


def log_context() -> Mapping[str, object]:
    """The fields bound in this context (empty when none are)."""
    return _bound.get()
