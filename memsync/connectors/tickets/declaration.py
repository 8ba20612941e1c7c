"""The ``zendesk`` connector type as the registry knows it without importing the connector:
its configuration model and its declaration (see :mod:`memsync.connectors.declaration`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal

from pydantic import Field, SecretStr

from memsync.connectors.config import ConnectorConfig, Duration
from memsync.connectors.declaration import ConnectorDeclaration, KeyPolicy

__all__ = ["ZENDESK", "ZendeskConfig"]


class ZendeskConfig(ConnectorConfig):
    """Credentials and scope for one Zendesk account.

    ``token`` is an API token (HTTP basic auth as ``{email}/token``); it is a
    ``SecretStr``, so it never appears in reprs, logs or error messages. ``base_url``
    defaults to ``https://{subdomain}.zendesk.com``.
    """

    type: Literal["zendesk"] = "zendesk"
    subdomain: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    email: str = Field(min_length=3)
    token: SecretStr
    include_comments: bool = True
    include_status_changes: bool = True
    page_size: int = Field(default=100, ge=1, le=100)
    timeout: Duration = timedelta(seconds=30)

    @property
    def api_base(self) -> str:
        return self.base_url or f"https://{self.subdomain}.zendesk.com"


ZENDESK = ConnectorDeclaration(
    type="zendesk",
    key_policy=KeyPolicy.IDENTITY,
    key_rationale=(
        "Tickets, comments and audits have ids that Zendesk never reuses and that survive "
        "edits, so keys are built from ids only (never from the body): a ticket whose "
        "status or subject changed is a new revision of the same episode, a redacted "
        "comment revises its comment, and re-reading an unchanged ticket stores nothing."
    ),
    config_model=ZendeskConfig,
    example_key="zendesk:acme:ticket:35436:comment:1274",
    implementation="memsync.connectors.tickets.zendesk:ZendeskConnector",
    subject_fields=frozenset(
        {
            "subdomain",
            "ticket_id",
            "organization_id",
            "requester_id",
            "assignee_id",
            "group_id",
            "brand_id",
        }
    ),
    deletions=(
        "A ticket the incremental export shows with status 'deleted' (soft-deleted, in "
        "the trash) is reported with its comments and status changes. A ticket purged "
        "from the trash before the next run is not seen, and neither is a comment "
        "redacted or removed from a ticket that still exists. With a webhook, the "
        "ticket.soft_deleted, ticket.permanently_deleted and ticket.marked_as_spam events "
        "report the same at once, purged tickets included."
    ),
    webhooks="ticket events of an event-subscribed webhook (X-Zendesk-Webhook-Signature)",
)
