"""GitHub webhook deliveries (``issues``, ``issue_comment``) as the connector's own records.

GitHub signs each delivery with ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the
raw body under the webhook secret>`` and names it with ``X-GitHub-Delivery`` (a GUID a
redelivery repeats) and the event with ``X-GitHub-Event``:
https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries and
https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers.
The ``issue`` and ``comment`` objects of the ``issues`` and ``issue_comment`` payloads
(https://docs.github.com/en/webhooks/webhook-events-and-payloads#issues,
…#issue_comment) are the REST API's issue and issue comment, so they are parsed by the
very functions the re-read uses: one key, subject and payload for both.

GitHub signs no timestamp, so there is no replay window to check: a replayed delivery
is a duplicate by its delivery id, or by its record's key (which stores nothing new).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from memsync.connectors.errors import StopRun
from memsync.connectors.github.connector import (
    GitHubComment,
    GitHubIssue,
    GitHubRecord,
    RepoRef,
    _comment,
    _issue,
)
from memsync.connectors.github.declaration import GitHubConfig, GitHubStream
from memsync.connectors.webhooks import (
    Refusal,
    WebhookDelivery,
    WebhookRefused,
    check_hex_signature,
    json_object,
)
from memsync.episode import Tombstone

__all__ = ["GitHubWebhookReceiver"]

SIGNATURE_HEADER = "x-hub-signature-256"
DELIVERY_HEADER = "x-github-delivery"
EVENT_HEADER = "x-github-event"

#: Actions after which the record is no longer in the repository the connector reads
#: (the re-read reports the same with a tombstone of the issue and what hangs off it).
_ISSUE_GONE = frozenset({"deleted", "transferred"})


class GitHubWebhookReceiver:
    """Receives one GitHub connector's deliveries (see the module docstring).

    Repeats: the same delivery gives the same records. Conflicts: a repository the
    connector is not configured for is refused (422), so a webhook set up on the wrong
    repository stores nothing under this connector's keys.
    """

    def __init__(self, config: GitHubConfig, secret: str) -> None:
        self._secret = secret
        self._repos = {RepoRef.parse(full_name) for full_name in config.repo}
        self._streams: frozenset[GitHubStream] = config.streams

    def receive(
        self, headers: Mapping[str, str], body: bytes, now: datetime
    ) -> WebhookDelivery[GitHubRecord]:
        check_hex_signature(
            self._secret,
            body,
            headers.get(SIGNATURE_HEADER),
            prefix="sha256=",
            header=SIGNATURE_HEADER,
        )
        event = headers.get(EVENT_HEADER, "")
        delivery_id = headers.get(DELIVERY_HEADER)
        if event not in ("issues", "issue_comment"):
            # ping, and events this receiver does not read yet: acknowledged, so GitHub
            # does not mark the hook failing; the scheduled re-read still finds them.
            return WebhookDelivery(delivery_id, event=event, ignored=True)
        payload = json_object(body)
        action = payload.get("action")
        described = f"{event}.{action}"
        repo = self._repo(payload)
        try:
            record, stream, gone = _parsed(event, repo, payload, action)
        except StopRun as error:
            # The re-read's parsers say "this is not a record" with StopRun.
            raise WebhookRefused(Refusal.UNPROCESSABLE, str(error)) from None
        if stream not in self._streams:
            return WebhookDelivery(delivery_id, event=described, ignored=True)
        if gone is not None:
            return WebhookDelivery(delivery_id, tombstones=(gone,), event=described)
        return WebhookDelivery(delivery_id, records=(record,), event=described)

    def _repo(self, payload: Mapping[str, Any]) -> RepoRef:
        repository = payload.get("repository")
        full_name = repository.get("full_name") if isinstance(repository, dict) else None
        if not isinstance(full_name, str) or "/" not in full_name:
            raise WebhookRefused(Refusal.MALFORMED, "no repository.full_name")
        repo = RepoRef.parse(full_name)
        if repo not in self._repos:
            raise WebhookRefused(
                Refusal.UNPROCESSABLE, f"repository {full_name} is not one this connector reads"
            )
        return repo


def _parsed(
    event: str, repo: RepoRef, payload: Mapping[str, Any], action: object
) -> tuple[GitHubIssue | GitHubComment, GitHubStream, Tombstone | None]:
    """The delivery's record, the stream the re-read finds it in, and its deletion if
    the action removed it from the repository (else ``None``)."""
    if event == "issues":
        issue = _issue(repo, _object_field(payload, "issue"))
        gone = (
            Tombstone(repo.issue_key_prefix(issue.number), with_children=True)
            if action in _ISSUE_GONE
            else None
        )
        return issue, "pull_requests" if issue.is_pull_request else "issues", gone
    comment = _comment(repo, _object_field(payload, "comment"))
    return comment, "issue_comments", Tombstone(comment.key()) if action == "deleted" else None


def _object_field(payload: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = payload.get(name)
    if not isinstance(value, dict):
        raise WebhookRefused(Refusal.MALFORMED, f"no {name} object in the payload")
    return value
