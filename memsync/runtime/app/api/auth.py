"""API keys and tenants: who is calling, and for which tenant.

Keys are configured by their SHA-256 (``memsync keys new`` makes one). With keys
configured, every request except the health check must send a known ``X-API-Key``,
and ``X-Tenant-ID`` must be one of that key's tenants. With no keys configured the
server only listens on loopback (``memsync serve`` refuses anything else) and only
answers requests addressed to a loopback name (:class:`LoopbackHostOnly`).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from memsync.runtime.app.api.errors import ApiError, error_response, validation_error
from memsync.runtime.app.config import ApiKey, ApiSettings, hash_api_key

__all__ = ["Authenticator", "Caller", "LoopbackHostOnly", "is_loopback_host"]

_TENANT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated caller of one request and the tenant it acts for."""

    tenant_id: str
    key_name: str | None


class Authenticator:
    """Maps request headers to a :class:`Caller`, or refuses with 400 / 401 / 403 / 422.

    Without ``X-Tenant-ID`` a request acts for the tenant its key is bound to, or else
    for the key's first tenant or ``api.default_tenant``; with ``api.require_tenant``
    that fallback is refused (400 ``missing_tenant``), so no request lands in a tenant
    it did not name.
    """

    def __init__(self, settings: ApiSettings) -> None:
        self._default_tenant = settings.default_tenant
        self._require_tenant = settings.require_tenant
        self._keys: dict[str, ApiKey] = {key.stored_hash(): key for key in settings.keys}

    @property
    def enabled(self) -> bool:
        return bool(self._keys)

    def authenticate(self, api_key: str | None, tenant_header: str | None) -> Caller:
        if tenant_header is not None and not _TENANT_ID.fullmatch(tenant_header):
            raise validation_error(
                "X-Tenant-ID", "1 to 64 characters: letters, digits, '.', '_', ':' or '-'"
            )
        if not self._keys:
            return Caller(tenant_header or self._unnamed_tenant(None), None)
        if not api_key:
            raise ApiError(401, "unauthorized", "missing X-API-Key header")
        return self.authenticate_hash(hash_api_key(api_key), tenant_header)

    def authenticate_hash(self, key_hash: str, tenant_header: str | None) -> Caller:
        """As :meth:`authenticate`, for a key known only by its stored hash (the admin
        page's session keeps the hash, never the key)."""
        # A dictionary lookup on the hash: the comparison never sees the key itself.
        key = self._keys.get(key_hash)
        if key is None:
            raise ApiError(401, "unauthorized", "unknown API key")
        tenant_id = tenant_header or key.bound_tenant or self._unnamed_tenant(key)
        if not key.allows(tenant_id):
            raise ApiError(403, "forbidden", f"this API key may not act for tenant {tenant_id!r}")
        return Caller(tenant_id, key.name)

    def _unnamed_tenant(self, key: ApiKey | None) -> str:
        """The tenant of a request that names none and whose key is bound to none."""
        if self._require_tenant:
            raise ApiError(400, "missing_tenant", "X-Tenant-ID header is required")
        if key is not None and key.tenants[0] != "*":
            return key.tenants[0]
        return self._default_tenant


# A client sends the same few Host values again and again; parsing an address is a
# measurable part of a small request. Bounded, so varied values only churn the cache.
@functools.lru_cache(maxsize=256)
def is_loopback_host(host_header: str) -> bool:
    """Whether a ``Host`` header names this machine: ``localhost`` or a loopback address
    (``127.0.0.0/8``, ``[::1]``), with or without a port."""
    host = host_header.strip().lower()
    if host.startswith("["):  # an IPv6 literal: [::1]:8100
        host = host[1 : host.find("]")] if "]" in host else ""
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LoopbackHostOnly:
    """ASGI middleware for the no-key mode: answer only requests addressed to loopback.

    Listening on 127.0.0.1 is not enough without keys: a web page on a name that
    resolves to 127.0.0.1 (DNS rebinding) would be same-origin with the API in a
    browser and could read it. Such a request carries that name in ``Host``, so any
    ``Host`` but ``localhost`` or a loopback address is refused with 400.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = Headers(scope=scope).get("host", "")
        if is_loopback_host(host):
            await self.app(scope, receive, send)
            return
        response = error_response(
            400,
            "bad_request",
            f"Host {host!r} is not a loopback name: with no API keys configured, memsync "
            "answers only requests addressed to localhost, 127.0.0.1 or [::1] (configure "
            "api.keys to serve other names)",
        )
        await response(scope, receive, send)
