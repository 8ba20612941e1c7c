"""A route class for the hottest JSON route: FastAPI's documentation, a shorter request path.

FastAPI's request handler, on every request, reads the body, decodes it with ``json``,
then solves the endpoint's dependency tree: each dependency's parameters looked up,
validated and cached, the body validated from the decoded objects. On
``POST /v1/episodes`` that was about a quarter of the HTTP stack's own instructions
(``bench.http_stack``; docs/benchmarks.md, "Single ingest over HTTP: the sixth pass").

:class:`LeanJsonRoute` leaves FastAPI everything it documents (the declared body,
dependencies and headers make the OpenAPI document, unchanged) and answers a request
whose body is ``application/json`` that validates as the declared model by a shorter
path: pydantic validates the model straight from the bytes, and the endpoint's
dependencies, coroutines of the request and of plain string headers, are called
directly. Every other request (a body that does not validate, another content type,
dependency overrides in force) goes to FastAPI's own handler with the body already
read, so every error answer is FastAPI's, byte for byte.

It serves only endpoints it can serve exactly, and says so when the route is built: a
coroutine that takes one body model and dependencies (each a coroutine taking the
``Request`` and optional ``str`` headers, nothing else, its own or an including
router's), and returns a ``Response`` of its own.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from fastapi import routing as fastapi_routing
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError

__all__ = ["LeanJsonRoute"]

_JSON = "application/json"


@dataclass(frozen=True)
class _Dependency:
    """One dependency of the endpoint, as the short path calls it: a parameter's, or
    one declared for its effect alone (``dependencies=[Depends(...)]``, no name)."""

    name: str | None
    call: Callable[..., Awaitable[Any]]
    request_parameter: str | None
    headers: tuple[tuple[str, str], ...]
    """(parameter, header) pairs: ``x_tenant_id`` is read from ``x-tenant-id``."""

    async def value(self, request: Request) -> Any:
        arguments: dict[str, Any] = {
            parameter: request.headers.get(header) for parameter, header in self.headers
        }
        if self.request_parameter is not None:
            arguments[self.request_parameter] = request
        return await self.call(**arguments)


@dataclass(frozen=True)
class _ShortPath:
    """What the short path needs of an endpoint; built once, with the route."""

    body_parameter: str
    body_model: type[BaseModel]
    dependencies: tuple[_Dependency, ...]

    @classmethod
    def of(cls, route: APIRoute, dependant: Dependant) -> _ShortPath:
        """The short path of ``route`` as served with ``dependant`` (its own, or the one
        an including router gave it)."""
        where = f"LeanJsonRoute {route.path}"
        if not inspect.iscoroutinefunction(route.endpoint):
            raise TypeError(f"{where}: the endpoint must be a coroutine")
        if inspect.signature(route.endpoint).return_annotation not in (Response, "Response"):
            raise TypeError(f"{where}: the endpoint must return a Response of its own")
        _refuse_parameters(dependant, where, allow_body=True)
        if (
            dependant.request_param_name is not None
            or dependant.header_params
            or len(dependant.body_params) != 1
        ):
            raise TypeError(
                f"{where}: the endpoint must take one body, dependencies and nothing else"
            )
        [body] = dependant.body_params
        model = body.field_info.annotation
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"{where}: the body must be a pydantic model")
        dependencies = tuple(_dependency(sub, where) for sub in dependant.dependencies)
        if len({dependency.call for dependency in dependencies}) < len(dependencies):
            # FastAPI would call a repeated dependency once and share its value.
            raise TypeError(f"{where}: a dependency is declared twice")
        return cls(body_parameter=body.name, body_model=model, dependencies=dependencies)


def _refuse_parameters(dependant: Dependant, where: str, *, allow_body: bool) -> None:
    """Refuse what the short path does not resolve: path, query and cookie parameters,
    bodies of dependencies, and anything needing FastAPI's machinery (responses to
    amend, background tasks, security scopes, websockets)."""
    unserved = [
        *dependant.path_params,
        *dependant.query_params,
        *dependant.cookie_params,
        *([] if allow_body else dependant.body_params),
    ]
    special = (
        dependant.response_param_name,
        dependant.background_tasks_param_name,
        dependant.security_scopes_param_name,
        dependant.websocket_param_name,
        dependant.http_connection_param_name,
    )
    if unserved or any(name is not None for name in special):
        raise TypeError(f"{where}: takes parameters the short path does not resolve")


def _dependency(dependant: Dependant, where: str) -> _Dependency:
    call = dependant.call
    if call is None or not inspect.iscoroutinefunction(call):
        raise TypeError(f"{where}: each dependency must be a coroutine")
    if dependant.dependencies:
        raise TypeError(f"{where}: dependency {call.__name__} has dependencies of its own")
    _refuse_parameters(dependant, where, allow_body=False)
    headers = []
    for field in dependant.header_params:
        info = field.field_info
        plain = (
            info.annotation == str | None
            and info.default is None
            and info.validation_alias is None
            # FastAPI's own alias: the name with underscores as hyphens.
            and field.alias == field.name.replace("_", "-")
            and getattr(info, "convert_underscores", True)
            and not info.metadata
        )
        if not plain:
            raise TypeError(f"{where}: header {field.name} must be a plain optional str")
        headers.append((field.name, field.alias))
    return _Dependency(dependant.name, call, dependant.request_param_name, tuple(headers))


def _is_json(content_type: str | None) -> bool:
    """``application/json``, with or without parameters (FastAPI ignores ``charset``:
    JSON is UTF-8). Other JSON types (``+json``) take FastAPI's handler."""
    if content_type is None:
        return False
    media_type = content_type.partition(";")[0].strip().lower()
    return media_type == _JSON


def _as_served(route: APIRoute) -> Any:
    """``route`` as FastAPI serves it. A route of an included router is served through
    the include's context (its dependencies added, the app as the provider of dependency
    overrides), which FastAPI hands to ``get_route_handler`` in a context variable; the
    handler it builds there reads them, and so must the short path."""
    # Private to FastAPI (0.165 has it); without it, the route itself.
    context_var = getattr(fastapi_routing, "_effective_route_context_var", None)
    context = context_var.get() if context_var is not None else None
    if context is not None and getattr(context, "original_route", None) is route:
        return context
    return route


class LeanJsonRoute(APIRoute):
    """An :class:`~fastapi.routing.APIRoute` whose valid JSON requests skip FastAPI's
    dependency solving (module docstring). Documented as any route; a request the
    short path does not take is answered by FastAPI's handler, as on a plain route."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        documented = super().get_route_handler()
        served = _as_served(self)
        short_path = _ShortPath.of(self, served.dependant)
        endpoint = self.endpoint
        # Read at each request, as FastAPI's handler reads it: overrides come and go.
        provider = served.dependency_overrides_provider

        async def handler(request: Request) -> Response:
            overrides = getattr(provider, "dependency_overrides", None)
            if overrides or not _is_json(request.headers.get("content-type")):
                return await documented(request)
            # Read once: Starlette's Request keeps the body, so FastAPI's handler below
            # reads the same bytes.
            body = await request.body()
            try:
                model = short_path.body_model.model_validate_json(body)
            except ValidationError:
                # FastAPI answers from the same bytes, in its own order: a body that is
                # not JSON before the caller is judged (422), a model after it (401/403
                # first).
                return await documented(request)
            arguments: dict[str, Any] = {short_path.body_parameter: model}
            # In FastAPI's order: an including router's dependencies first.
            for dependency in short_path.dependencies:
                value = await dependency.value(request)
                if dependency.name is not None:
                    arguments[dependency.name] = value
            response: Response = await endpoint(**arguments)
            return response

        return handler
