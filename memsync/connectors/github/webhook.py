"""GitHub webhook deliveries as the connector's own records: ``issues``,
``issue_comment``, ``pull_request``, ``pull_request_review`` and
``pull_request_review_comment``.

GitHub signs each delivery with ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the
raw body under the webhook secret>`` and names it with ``X-GitHub-Delivery`` (a GUID a
redelivery repeats) and the event with ``X-GitHub-Event``:
https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries and
https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers.
Each payload's object is parsed by the very function the re-read uses, so a pushed
record and its re-read share key, subject and payload
(https://docs.github.com/en/webhooks/webhook-events-and-payloads#issues, …#issue_comment,
…#pull_request, …#pull_request_review, …#pull_request_review_comment):

- ``issue`` and ``comment`` (of ``issues``, ``issue_comment``) are the REST API's issue
  and issue comment;
- ``pull_request`` is a pull request object, where the re-read reads the issues list's
  item for the pull request: the two differ in where ``merged_at`` is and in
  ``state_reason`` (the issue item's alone), which the connector's one mapping of both
  shapes settles (``_issue_or_pull``);
- ``review`` is the reviews list's item but for its ``state``, lower-case
  (``approved``) where the list says ``APPROVED``: the shared parser upper-cases it.
  Reviews have no update time; they are ordered by their pull request's
  (:meth:`~memsync.connectors.github.connector.GitHubConnector.source_updated_at`);
- ``comment`` of ``pull_request_review_comment`` is the review-comment list's item.

Deletions the re-read cannot see are pushed: ``issues`` ``deleted`` / ``transferred``
(the issue and every key below it), ``issue_comment`` and
``pull_request_review_comment`` ``deleted``. A pull request is never deleted; closing
or merging it is an edit (a revision), as when re-read.

GitHub signs no timestamp, so there is no replay window to check: a replayed delivery
is a duplicate by its delivery id, or by its record's key (which stores nothing new).

A deletion (``issues.deleted`` / ``transferred``, a comment's ``deleted``) is dated
by when the delivery is received: GitHub's payload carries no deletion time, and the
deleted object's ``updated_at`` would not do for an issue's comments (editing a
comment does not move its issue's ``updated_at``, so a comment edited after the issue's
last change would escape the deletion). Every version a re-read could have read
before the deletion is older than its receipt, so none brings the record back when it
arrives after. The cost: the receipt is on our clock, not GitHub's, so an issue
transferred back within the two clocks' skew of its delivery stays deleted until its
next edit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memsync.connectors.errors import StopRun
from memsync.connectors.github.connector import (
    GitHubRecord,
    RepoRef,
    _comment,
    _issue,
    _pull,
    _review,
    _review_comment,
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
        parse = _PARSERS.get(event)
        if parse is None:
            # ping, and events this receiver does not read: acknowledged, so GitHub
            # does not mark the hook failing; the scheduled re-read still finds them.
            return WebhookDelivery(delivery_id, event=event, ignored=True)
        payload = json_object(body)
        action = payload.get("action")
        if not isinstance(action, str):
            raise WebhookRefused(Refusal.MALFORMED, "no action in the payload")
        described = f"{event}.{action}"
        repo = self._repo(payload)
        try:
            parsed = parse(repo, payload, action, now)
        except StopRun as error:
            # The re-read's parsers say "this is not a record" with StopRun.
            raise WebhookRefused(Refusal.UNPROCESSABLE, str(error)) from None
        if parsed.stream not in self._streams:
            return WebhookDelivery(delivery_id, event=described, ignored=True)
        if parsed.gone is not None:
            return WebhookDelivery(delivery_id, tombstones=(parsed.gone,), event=described)
        if parsed.record is None:
            return WebhookDelivery(delivery_id, event=described, ignored=True)
        return WebhookDelivery(delivery_id, records=(parsed.record,), event=described)

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


@dataclass(frozen=True, slots=True)
class _Parsed:
    """What a delivery carries: its record (``None`` when it is no record the re-read
    stores, a pending review), the stream the re-read finds it in, and its deletion if
    the action removed it from the repository."""

    record: GitHubRecord | None
    stream: GitHubStream
    gone: Tombstone | None = None


def _issues(repo: RepoRef, payload: Mapping[str, Any], action: str, received: datetime) -> _Parsed:
    issue = _issue(repo, _object_field(payload, "issue"))
    gone = (
        Tombstone(repo.issue_key_prefix(issue.number), with_children=True, deleted_at=received)
        if action in _ISSUE_GONE
        else None
    )
    return _Parsed(issue, "pull_requests" if issue.is_pull_request else "issues", gone)


def _issue_comment(
    repo: RepoRef, payload: Mapping[str, Any], action: str, received: datetime
) -> _Parsed:
    return _comment_parsed(
        _comment(repo, _object_field(payload, "comment")), "issue_comments", action, received
    )


def _pull_request(
    repo: RepoRef, payload: Mapping[str, Any], action: str, received: datetime
) -> _Parsed:
    # Every action (opened, edited, closed, labeled, synchronize, …) carries the pull
    # request as it is now: a change of what the payload keeps is a revision, the rest
    # stores nothing. A pull request cannot be deleted.
    return _Parsed(_pull(repo, _object_field(payload, "pull_request")), "pull_requests")


def _pull_request_review(
    repo: RepoRef, payload: Mapping[str, Any], action: str, received: datetime
) -> _Parsed:
    # submitted, edited and dismissed all carry the review as it is now; none deletes it.
    pull = _pull(repo, _object_field(payload, "pull_request"))
    return _Parsed(_review(pull, _object_field(payload, "review")), "reviews")


def _pull_request_review_comment(
    repo: RepoRef, payload: Mapping[str, Any], action: str, received: datetime
) -> _Parsed:
    comment = _review_comment(repo, _object_field(payload, "comment"))
    return _comment_parsed(comment, "review_comments", action, received)


def _comment_parsed(
    record: GitHubRecord, stream: GitHubStream, action: str, received: datetime
) -> _Parsed:
    """A comment delivery: ``deleted`` is a tombstone of the comment's key (dated
    ``received``), every other action the comment as it is now."""
    gone = Tombstone(record.key(), deleted_at=received) if action == "deleted" else None
    return _Parsed(record, stream, gone)


_PARSERS: Mapping[str, Callable[[RepoRef, Mapping[str, Any], str, datetime], _Parsed]] = {
    "issues": _issues,
    "issue_comment": _issue_comment,
    "pull_request": _pull_request,
    "pull_request_review": _pull_request_review,
    "pull_request_review_comment": _pull_request_review_comment,
}


def _object_field(payload: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = payload.get(name)
    if not isinstance(value, dict):
        raise WebhookRefused(Refusal.MALFORMED, f"no {name} object in the payload")
    return value
