"""What request handlers depend on: the process's services and the authenticated caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from memsync.compile.sensitivity import CallerIdentity
from memsync.runtime.app.api.auth import Caller
from memsync.runtime.app.api.openapi import API_KEY_HEADER
from memsync.runtime.app.services import Services

__all__ = ["MAX_PAGE", "CallerDep", "ReaderDep", "ServicesDep"]

MAX_PAGE = 200
"""The largest page any list endpoint returns."""


def _services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


# The dependencies are coroutines: FastAPI runs a plain function dependency on the
# thread pool, a hand-off per dependency per request, for work that does no I/O.
async def _services(request: Request) -> Services:
    return _services_of(request)


async def _caller(request: Request, x_tenant_id: Annotated[str | None, Header()] = None) -> Caller:
    # X-API-Key is read as it is, not declared: FastAPI resolves and validates each
    # declared parameter on every request (a twentieth of the HTTP stack's own work on
    # POST /v1/episodes, for a string it has nothing to check), and the OpenAPI document
    # shows the key as a security scheme anyway (``document_api``). X-Tenant-ID stays
    # declared: the document lists it, and marks the routes that take it as needing
    # the key.
    api_key = request.headers.get(API_KEY_HEADER)
    return _services_of(request).authenticator.authenticate(api_key, x_tenant_id)


ServicesDep = Annotated[Services, Depends(_services)]
CallerDep = Annotated[Caller, Depends(_caller)]


async def _reader(
    x_caller_id: Annotated[str | None, Header(max_length=255)] = None,
    x_caller_type: Annotated[str | None, Header(max_length=255)] = None,
) -> CallerIdentity:
    # Who reads, for the read policy (Statewave's headers); a body's caller_id and
    # caller_type (context, handoff) take precedence over these.
    return CallerIdentity(x_caller_id or None, x_caller_type or None)


ReaderDep = Annotated[CallerIdentity, Depends(_reader)]
"""The caller the read policy decides for, from ``X-Caller-ID`` / ``X-Caller-Type``."""
