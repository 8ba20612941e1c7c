"""A declarative HTTP connector base: a REST or GraphQL source is declared, not programmed.

A source is an :class:`HttpSource` (base URL, auth, vendor name for error messages) with
:class:`HttpStream` s (path, record list, pagination, incremental cursor, key template,
children, how a deletion shows); a connector class is that source and a
:class:`~memsync.connectors.declaration.ConnectorDeclaration` (type, key policy and
rationale, config model)::

    NOTES = HttpStream(
        name="notes", path="/v1/tickets/{parent[id]}/notes", records="notes",
        key="{config.account}:ticket:{parent[id]}:note:{id}", occurred_at="created_at",
        pagination=NextUrl("next"), on_not_found=NotFound.PARENT_GONE,
    )
    TICKETS = HttpStream(
        name="tickets", path="/v1/tickets", records="tickets", children=(NOTES,),
        key="{config.account}:ticket:{id}", ordered=True, pagination=LinkHeader(),
        incremental=Incremental(field="updated_at", param="updated_since"),
    )

    class DeskConnector(HttpConnector[DeskConfig, HttpRecord], declaration=DESK):
        source = HttpSource("https://{config.account}.desk.example", (TICKETS,), "Desk",
                            BearerAuth())

The whole example is :mod:`memsync.connectors.http.example`; the reference is in
docs/connectors.md ("Declaring an HTTP source"). Keys are ``{type}:`` + the rendered key
template; the runner applies overlap windows and checkpoints as for any connector; 429s
and ``Retry-After`` / ``X-RateLimit-*`` go through the configured retry policy and end
the run ``partial`` when it is exhausted.

What this package offers is listed in ``__init__.pyi`` and imported on first use, so a
declaration module can import the declarations without the connector (and httpx).
"""

from __future__ import annotations

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
