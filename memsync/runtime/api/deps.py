"""What request handlers depend on: the process's services and the authenticated caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Request

from memsync.clock import Clock, SystemClock
from memsync.runtime.api.auth import Authenticator, Caller
from memsync.runtime.compile import CompileService
from memsync.runtime.config import Settings
from memsync.runtime.episodes import EpisodeRepository
from memsync.runtime.ingest import IngestService
from memsync.runtime.jobs import JobQueue, ingest_service
from memsync.runtime.memories import MemoryRepository
from memsync.runtime.storage.engine import Store

__all__ = ["MAX_PAGE", "CallerDep", "Services", "ServicesDep"]

# The largest page any list endpoint returns.
MAX_PAGE = 200


@dataclass(frozen=True)
class Services:
    """Everything a request handler may use, built once per process."""

    settings: Settings
    store: Store
    clock: Clock
    ingest: IngestService
    episodes: EpisodeRepository
    memories: MemoryRepository
    compiler: CompileService
    authenticator: Authenticator
    jobs: JobQueue

    @classmethod
    def build(cls, settings: Settings, store: Store, clock: Clock | None = None) -> Services:
        clock = clock or SystemClock()
        jobs = JobQueue.from_settings(store, settings.jobs)
        return cls(
            settings=settings,
            store=store,
            clock=clock,
            # The every-N-episodes compile trigger rides on the one ingest path.
            ingest=ingest_service(store, settings.jobs, jobs, clock),
            episodes=EpisodeRepository(store),
            memories=MemoryRepository(store),
            compiler=CompileService.from_settings(store, settings.compile, clock),
            authenticator=Authenticator(settings.api),
            jobs=jobs,
        )


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _caller(
    request: Request,
    x_api_key: Annotated[str | None, Header()] = None,
    x_tenant_id: Annotated[str | None, Header()] = None,
) -> Caller:
    return _services(request).authenticator.authenticate(x_api_key, x_tenant_id)


ServicesDep = Annotated[Services, Depends(_services)]
CallerDep = Annotated[Caller, Depends(_caller)]
