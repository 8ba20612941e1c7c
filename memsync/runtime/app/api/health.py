"""Health probes: liveness, readiness, and memsync's own ``/v1/health``. None needs a key.

Liveness (``/healthz``) says the process answers and touches nothing else, so a slow or
absent store never gets a live server restarted. Readiness (``/readyz``) asks the store
for its schema revision, so a load balancer stops sending requests to a node whose store
is unreachable or not yet migrated.
"""

from __future__ import annotations

import logging
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError

import memsync
from memsync.runtime.app.api.deps import ServicesDep
from memsync.runtime.app.api.errors import ApiError
from memsync.runtime.app.api.openapi import error_responses
from memsync.runtime.storage import SchemaState, schema_state

__all__ = ["HealthResponse", "LivenessResponse", "ReadinessResponse", "router"]

router = APIRouter()

logger = logging.getLogger("memsync.api")

_UNAVAILABLE = 503


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"
    version: str
    store: str


class LivenessResponse(BaseModel):
    status: Literal["ok"] = "ok"


class ReadinessResponse(BaseModel):
    """The store answered and its schema is one this code can serve."""

    status: Literal["ready"] = "ready"
    store: str
    schema_state: SchemaState


# The two liveness probes are coroutines: they touch nothing that blocks, and a plain
# route would hand each probe to the thread pool and back (about 0.8 ms of CPU), which
# is most of what a probe costs.


@router.get("/v1/health")
async def health(services: ServicesDep) -> HealthResponse:
    """Liveness: the process answers. Needs no API key."""
    return HealthResponse(version=memsync.__version__, store=services.store.dialect)


@router.get("/healthz")
async def liveness() -> LivenessResponse:
    """Liveness, as Statewave serves it: the process answers; the store is not asked."""
    return LivenessResponse()


@router.get("/readyz", responses=error_responses(_UNAVAILABLE))
def readiness(services: ServicesDep) -> ReadinessResponse:
    """Readiness: one query of the store's schema revision.

    503 (in the error envelope) when the store does not answer or its schema is behind
    this code's migrations. A schema migrated by a newer memsync (a rolling upgrade)
    counts as ready: refusing it would take every old node out of rotation the moment
    the first new one migrates.
    """
    try:
        state = schema_state(services.store)
    except SQLAlchemyError as error:
        # The driver's own text (host, port, user; never the password) goes to the log
        # for the operator; the caller only learns that the store did not answer.
        logger.warning("readiness: the store did not answer: %s", getattr(error, "orig", error))
        raise ApiError(_UNAVAILABLE, "service_unavailable", "the store is not reachable") from None
    if state is SchemaState.BEHIND:
        raise ApiError(
            _UNAVAILABLE,
            "service_unavailable",
            "the store's schema is behind this memsync: run `memsync db upgrade`",
        )
    return ReadinessResponse(store=services.store.dialect, schema_state=state)
