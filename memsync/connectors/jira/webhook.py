"""Jira Cloud webhook deliveries (``jira:issue_*``, ``comment_*``) as the connector's own
records.

A webhook registered with a secret (https://developer.atlassian.com/cloud/jira/platform/webhooks/,
"Secure admin webhooks") is signed as WebSub's ``method=signature``: ``X-Hub-Signature:
sha256=<hex HMAC-SHA256 of the raw body under the secret>``; each delivery is named by
``X-Atlassian-Webhook-Identifier``, which a retry repeats. The body is the event
(``webhookEvent``, ``timestamp``) with the ``issue`` it concerns (``id``, ``key``,
``fields``) and, for ``comment_*``, the ``comment`` (same page, "Example callback").

Jira signs no timestamp header, so there is no replay window to check: a replayed
delivery is a duplicate by its delivery id, or by its records' keys (which store nothing
new). A replay cannot roll anything back either: see the next paragraph.

Why created and updated events are read back: the connector reads the REST API v3, which
answers descriptions and comment bodies as Atlassian Document Format, while a webhook
carries them as wiki-markup strings; a record built from the delivery would store a
different text than the scheduled re-read and make every push a revision, and every
re-read another. So a ``jira:issue_created`` / ``jira:issue_updated`` / ``comment_created``
/ ``comment_updated`` delivery only names the issue: the connector re-reads that one
issue with its comments (:meth:`~memsync.connectors.jira.connector.JiraConnector.read_issue`,
the requests and parsers of the scheduled read), which gives the very records, keys,
subjects and payloads the re-read gives, as Jira has them now (never older than the
event). When that read fails (Jira down, rate limited), the delivery is acknowledged
and left to the scheduled re-read. Deletions need no read: ``jira:issue_deleted`` is a
tombstone of the issue and its comments, ``comment_deleted`` of the comment, each dated
by when the delivery is received (``Tombstone.deleted_at``): so no version a re-read
read before the deletion brings the record back when it is ingested after it. The
event's ``timestamp`` is not used: it is on Jira's clock like ``updated``, but a retried
delivery carries the first attempt's, and receipt is never earlier than the deletion.

Scope: with ``projects`` configured, a delivery about an issue of another project is
refused (422: the webhook is registered on more than this connector reads); with ``jql``,
the receiver cannot tell whether an issue matches (the search that could is eventually
consistent, so it may not see an issue just created), so created and updated events are
acknowledged and left to the re-read, and only deletions are taken.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from memsync.connectors._parsing import optional_str
from memsync.connectors.errors import ConnectorError
from memsync.connectors.jira.connector import JiraRecord, issue_key_prefix
from memsync.connectors.jira.declaration import JiraConfig
from memsync.connectors.webhooks import (
    Refusal,
    WebhookDelivery,
    WebhookRefused,
    check_hex_signature,
    json_object,
)
from memsync.episode import Tombstone

__all__ = ["JiraWebhookReceiver"]

log = logging.getLogger("memsync.webhooks")

SIGNATURE_HEADER = "x-hub-signature"
DELIVERY_HEADER = "x-atlassian-webhook-identifier"

_ISSUE_EVENTS = frozenset({"jira:issue_created", "jira:issue_updated", "jira:issue_deleted"})
_COMMENT_EVENTS = frozenset({"comment_created", "comment_updated", "comment_deleted"})
_DELETIONS = frozenset({"jira:issue_deleted", "comment_deleted"})

IssueReader = Callable[[str], Sequence[JiraRecord] | None]
"""Issue id -> the re-read of that issue and its comments, ``None`` when it is gone."""


class JiraWebhookReceiver:
    """Receives one Jira connector's deliveries (see the module docstring).

    Repeats: the same delivery gives the records of the issue as Jira has it when it is
    received (ingest stores nothing new if it has not changed). Conflicts: an issue of a
    project the connector does not read is refused (422), so a webhook registered on the
    whole site stores nothing under this connector's keys for other projects; a pushed
    edit is never older than the event, and ingest keeps the newest ``updated``.
    """

    def __init__(self, config: JiraConfig, secret: str, read_issue: IssueReader) -> None:
        self._secret = secret
        self._site = config.site
        self._projects = frozenset(config.projects)
        self._by_jql = config.jql is not None
        self._include_comments = config.include_comments
        self._read_issue = read_issue

    def receive(
        self, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> WebhookDelivery[JiraRecord]:
        check_hex_signature(
            self._secret,
            body,
            headers.get(SIGNATURE_HEADER),
            prefix="sha256=",
            header=SIGNATURE_HEADER,
        )
        delivery_id = headers.get(DELIVERY_HEADER)
        payload = json_object(body)
        event = payload.get("webhookEvent")
        if not isinstance(event, str) or not event:
            raise WebhookRefused(Refusal.MALFORMED, "no webhookEvent")
        read = _ISSUE_EVENTS | (_COMMENT_EVENTS if self._include_comments else frozenset())
        if event not in read:
            # Worklogs, sprints, …: acknowledged, so Jira does not retry them.
            return WebhookDelivery(delivery_id, event=event, ignored=True)
        issue_id = self._issue_id(payload)
        if event in _DELETIONS:
            return WebhookDelivery(
                delivery_id,
                tombstones=(self._deletion(event, issue_id, payload, now),),
                event=event,
            )
        if self._by_jql:
            return WebhookDelivery(delivery_id, event=event, ignored=True)
        return self._read_back(delivery_id, event, issue_id)

    def _issue_id(self, payload: Mapping[str, Any]) -> str:
        """The numeric id of the delivery's issue, once its project is one this connector
        reads (any, when no ``projects`` are configured)."""
        issue = _object_field(payload, "issue")
        issue_id = _numeric(issue.get("id"), "issue.id")
        if self._projects:
            fields = issue.get("fields")
            project = fields.get("project") if isinstance(fields, dict) else None
            key = optional_str(project.get("key")) if isinstance(project, dict) else None
            if key is None:
                raise WebhookRefused(Refusal.MALFORMED, "no issue.fields.project.key")
            if key not in self._projects:
                raise WebhookRefused(
                    Refusal.UNPROCESSABLE, f"project {key} is not one this connector reads"
                )
        return issue_id

    def _deletion(
        self, event: str, issue_id: str, payload: Mapping[str, Any], received: datetime
    ) -> Tombstone:
        """The deletion the event reports, dated ``received`` (see the module
        docstring)."""
        prefix = issue_key_prefix(self._site, issue_id)
        if event == "jira:issue_deleted":
            return Tombstone(prefix, with_children=True, deleted_at=received)
        comment_id = _numeric(_object_field(payload, "comment").get("id"), "comment.id")
        return Tombstone(f"{prefix}:comment:{comment_id}", deleted_at=received)

    def _read_back(
        self, delivery_id: str | None, event: str, issue_id: str
    ) -> WebhookDelivery[JiraRecord]:
        try:
            records = self._read_issue(issue_id)
        except ConnectorError as error:
            # Jira unreachable, rate limited or refusing: the scheduled re-read reads the
            # issue later. Only the error's type: its text may quote a response.
            log.warning(
                "jira webhook %s: issue %s not read back (%s); left to the next re-read",
                event,
                issue_id,
                type(error).__name__,
            )
            return WebhookDelivery(delivery_id, event=event, ignored=True)
        if not records or (self._projects and records[0].issue.project_key not in self._projects):
            # Deleted since (its jira:issue_deleted follows) or moved out of the projects
            # read (the next full read lists it as gone).
            return WebhookDelivery(delivery_id, event=event, ignored=True)
        return WebhookDelivery(delivery_id, records=tuple(records), event=event)


def _object_field(payload: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = payload.get(name)
    if not isinstance(value, dict):
        raise WebhookRefused(Refusal.MALFORMED, f"no {name} object in the payload")
    return value


def _numeric(value: object, what: str) -> str:
    # Keys are built from these ids, and the read-back puts them in a URL: digits only.
    text = str(value) if isinstance(value, int | str) and not isinstance(value, bool) else ""
    if not (text.isascii() and text.isdigit()):
        raise WebhookRefused(Refusal.MALFORMED, f"{what} is not a Jira id: {value!r:.40}")
    return text
