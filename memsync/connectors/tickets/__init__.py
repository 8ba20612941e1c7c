"""Support-ticket connectors. Zendesk Support, through httpx."""

from __future__ import annotations

from memsync.connectors.tickets.zendesk import (
    TicketRef,
    ZendeskComment,
    ZendeskConfig,
    ZendeskConnector,
    ZendeskRecord,
    ZendeskStatusChange,
    ZendeskTicket,
)

__all__ = [
    "TicketRef",
    "ZendeskComment",
    "ZendeskConfig",
    "ZendeskConnector",
    "ZendeskRecord",
    "ZendeskStatusChange",
    "ZendeskTicket",
]
