"""GitHub's pull request deliveries (``pull_request``, ``pull_request_review``,
``pull_request_review_comment``) through the connector's receiver: GitHub's documented
example deliveries (fixtures ``webhook_*.json``, cited in the fixtures README) give
the records they describe, and a delivery rendered by FakeGitHub gives the very episode
draft the connector's re-read of the same pull request, review or review comment gives
(key, subject, type and payload), whatever shape differences GitHub has between the two."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from memsync.connectors.base import Listing, Window
from memsync.connectors.fake_http import load_fixture
from memsync.connectors.github import (
    GitHubConfig,
    GitHubConnector,
    GitHubIssue,
    GitHubRecord,
    GitHubReview,
    GitHubReviewComment,
)
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.webhooks import Refusal, WebhookDelivery, WebhookRefused
from memsync.episode import EpisodeDraft, Tombstone
from memsync.stopping import FakeSleeper

T0 = datetime(2024, 3, 1, tzinfo=UTC)
NOW = datetime(2025, 1, 1, tzinfo=UTC)
# The secret of GitHub's worked example in "Validating webhook deliveries":
# https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
SECRET = "It's a Secret to Everybody"
DOCUMENTED_PR = "github:codertocat:hello-world:pull:2"


def connector(
    repo: str, *, base_url: str = "https://api.github.invalid", **more: Any
) -> GitHubConnector:
    config = GitHubConfig(
        name="gh",
        repo=repo,
        token="t",
        base_url=base_url,
        subject="repo:{repository}",
        webhook={"secret": SECRET},
        **more,
    )
    return GitHubConnector(config, sleeper=FakeSleeper(max_waits=0))


def receive(conn: GitHubConnector, event: str, body: bytes) -> WebhookDelivery[GitHubRecord]:
    receiver = conn.webhook_receiver()
    assert receiver is not None
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "x-hub-signature-256": f"sha256={digest}",
        "x-github-event": event,
        "x-github-delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
    }
    return receiver.receive(headers, body, NOW)


def documented(name: str) -> bytes:
    return json.dumps(load_fixture("github", f"webhook_{name}.json")).encode()


def the_record(delivery: WebhookDelivery[GitHubRecord]) -> GitHubRecord:
    assert delivery.tombstones == ()
    [record] = delivery.records
    return record


# -- GitHub's documented deliveries ---------------------------------------------------------


def test_githubs_worked_signature_example_is_accepted_and_a_changed_byte_is_not() -> None:
    # The docs' example: this secret, the body "Hello, World!", and this signature.
    signature = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    receiver = connector("codertocat/hello-world").webhook_receiver()
    assert receiver is not None
    headers = {"x-hub-signature-256": signature, "x-github-event": "pull_request"}

    with pytest.raises(WebhookRefused) as accepted_then_unparsed:
        receiver.receive(headers, b"Hello, World!", NOW)
    with pytest.raises(WebhookRefused) as forged:
        receiver.receive(headers, b"Hello, World?", NOW)

    # The signature held, so the body was parsed (and is no JSON); the other was not.
    assert accepted_then_unparsed.value.refusal is Refusal.MALFORMED
    assert forged.value.refusal is Refusal.BAD_SIGNATURE


def test_a_documented_closed_pull_request_is_the_pull_request_in_its_closed_state() -> None:
    delivery = receive(
        connector("Codertocat/Hello-World"), "pull_request", documented("pull_request_closed")
    )

    pull = the_record(delivery)
    assert isinstance(pull, GitHubIssue)
    assert delivery.event == "pull_request.closed"
    assert pull.key() == f"{DOCUMENTED_PR}:opened"
    assert pull.updated_at == datetime(2019, 5, 15, 15, 21, 18, tzinfo=UTC)
    assert {
        field: pull.data[field]
        for field in (
            "state",
            "state_reason",
            "merged_at",
            "closed_at",
            "is_pull_request",
            "labels",
        )
    } == {
        "state": "closed",
        "state_reason": None,  # a pull request object has none; its issue item may
        "merged_at": None,  # closed without merging
        "closed_at": "2019-05-15T15:21:18Z",
        "is_pull_request": True,
        "labels": ["bug"],
    }


def test_a_documented_review_is_stored_with_the_state_as_the_reviews_list_writes_it() -> None:
    delivery = receive(
        connector("codertocat/hello-world"),
        "pull_request_review",
        documented("pull_request_review_submitted"),
    )

    review = the_record(delivery)
    assert isinstance(review, GitHubReview)
    assert review.key() == f"{DOCUMENTED_PR}:review:237895671"
    assert review.data["state"] == "COMMENTED"  # the delivery says "commented"
    # Dated by its pull request as delivered with it: reviews have no updated_at.
    assert connector("codertocat/hello-world").source_updated_at(review) == datetime(
        2019, 5, 15, 15, 20, 38, tzinfo=UTC
    )


def test_a_documented_review_comment_is_stored_and_its_deletion_is_a_tombstone_of_it() -> None:
    conn = connector("codertocat/hello-world")
    created = receive(
        conn, "pull_request_review_comment", documented("pull_request_review_comment_created")
    )
    deleted = receive(
        conn, "pull_request_review_comment", documented("pull_request_review_comment_deleted")
    )

    comment = the_record(created)
    assert isinstance(comment, GitHubReviewComment)
    assert comment.key() == f"{DOCUMENTED_PR}:review_comment:284312630"
    gone = Tombstone(comment.key(), deleted_at=NOW)
    assert (deleted.records, deleted.tombstones) == ((), (gone,))
    assert deleted.event == "pull_request_review_comment.deleted"


def test_pull_request_events_of_streams_the_connector_does_not_read_are_ignored() -> None:
    conn = connector("codertocat/hello-world", streams=["issues", "issue_comments"])

    deliveries = [
        receive(conn, "pull_request", documented("pull_request_closed")),
        receive(conn, "pull_request_review", documented("pull_request_review_submitted")),
        receive(
            conn, "pull_request_review_comment", documented("pull_request_review_comment_deleted")
        ),
    ]

    assert [(d.ignored, d.records, d.tombstones) for d in deliveries] == [(True, (), ())] * 3


def test_a_pending_review_is_acknowledged_and_stores_nothing() -> None:
    # A review not yet submitted is visible to its author only; the re-read skips it too.
    payload = load_fixture("github", "webhook_pull_request_review_submitted.json")
    payload["review"].update(state="pending", submitted_at=None)

    delivery = receive(
        connector("codertocat/hello-world"), "pull_request_review", json.dumps(payload).encode()
    )

    assert (delivery.ignored, delivery.records) == (True, ())


@pytest.mark.parametrize(
    ("event", "fixture", "broken", "refusal"),
    [
        ("pull_request", "pull_request_closed", {"pull_request": None}, Refusal.MALFORMED),
        (
            "pull_request_review",
            "pull_request_review_submitted",
            {"review": "x"},
            Refusal.MALFORMED,
        ),
        (
            "pull_request_review",
            "pull_request_review_submitted",
            {"pull_request": None},
            Refusal.MALFORMED,
        ),
        (
            "pull_request_review_comment",
            "pull_request_review_comment_created",
            {"comment": []},
            Refusal.MALFORMED,
        ),
        (
            "pull_request",
            "pull_request_closed",
            {"repository": {"full_name": "acme/web"}},
            Refusal.UNPROCESSABLE,
        ),
    ],
)
def test_a_delivery_without_its_object_or_from_another_repository_is_refused(
    event: str, fixture: str, broken: dict[str, Any], refusal: Refusal
) -> None:
    payload = {**load_fixture("github", f"webhook_{fixture}.json"), **broken}

    with pytest.raises(WebhookRefused) as refused:
        receive(connector("codertocat/hello-world"), event, json.dumps(payload).encode())

    assert refused.value.refusal is refusal


def test_a_pull_without_a_number_or_a_review_comment_without_its_pull_is_unprocessable() -> None:
    pull = load_fixture("github", "webhook_pull_request_closed.json")
    del pull["pull_request"]["number"]
    comment = load_fixture("github", "webhook_pull_request_review_comment_created.json")
    comment["comment"]["pull_request_url"] = None
    conn = connector("codertocat/hello-world")

    refusals = []
    for event, payload in (("pull_request", pull), ("pull_request_review_comment", comment)):
        with pytest.raises(WebhookRefused) as refused:
            receive(conn, event, json.dumps(payload).encode())
        refusals.append(refused.value.refusal)

    assert refusals == [Refusal.UNPROCESSABLE, Refusal.UNPROCESSABLE]


# -- pushed and re-read: one draft ----------------------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=T0) as server:
        yield server


def draft_fields(draft: EpisodeDraft) -> tuple[object, ...]:
    return (
        draft.idempotency_key,
        draft.subject_id,
        draft.type,
        draft.payload,
        draft.occurred_at,
        draft.content_hash,
    )


def re_read(conn: GitHubConnector) -> dict[str, tuple[object, ...]]:
    """Every record the connector reads now, by key, as the fields of its draft."""
    drafts = (
        conn.to_episode(item)
        for item in conn.fetch(Window(start=T0, end=NOW), None)
        if not isinstance(item, Tombstone | Listing)
    )
    return {str(draft.idempotency_key): draft_fields(draft) for draft in drafts}


def pushed(conn: GitHubConnector, event: str, body: bytes) -> tuple[object, ...]:
    return draft_fields(conn.to_episode(the_record(receive(conn, event, body))))


def test_a_merged_pull_request_its_review_and_its_review_comment_pushed_are_the_re_reads_drafts(
    fake: FakeGitHub,
) -> None:
    fake.add_issue(
        "acme", "api", 7, "Honour Retry-After", "Fixes #1.", is_pull_request=True, labels=["bug"]
    )
    review = fake.add_review("acme", "api", 7, "CHANGES_REQUESTED", "Cap the wait.")
    comment = fake.add_review_comment("acme", "api", 7, "This sleeps forever.")
    fake.edit_issue("acme", "api", 7, state="closed")  # the fake's issue item says "completed"
    fake.merge_pull("acme", "api", 7)
    conn = connector("acme/api", base_url=fake.base_url)
    prefix = "github:acme:api:pull:7"

    by_push = {
        f"{prefix}:opened": pushed(
            conn, "pull_request", fake.webhook_body("pull_request", "closed", "acme", "api", 7)
        ),
        f"{prefix}:review:{review.id}": pushed(
            conn,
            "pull_request_review",
            fake.webhook_body(
                "pull_request_review", "submitted", "acme", "api", 7, review_id=review.id
            ),
        ),
        f"{prefix}:review_comment:{comment.id}": pushed(
            conn,
            "pull_request_review_comment",
            fake.webhook_body(
                "pull_request_review_comment", "created", "acme", "api", 7, comment_id=comment.id
            ),
        ),
    }
    by_read = re_read(conn)

    assert {key: by_read[key] for key in by_push} == by_push
    payload = by_push[f"{prefix}:opened"][3]
    assert isinstance(payload, dict)
    assert (payload["state"], payload["state_reason"]) == ("closed", None)
    assert payload["merged_at"] is not None
    review_payload = by_push[f"{prefix}:review:{review.id}"][3]
    assert isinstance(review_payload, dict)
    assert review_payload["state"] == "CHANGES_REQUESTED"


def test_a_dismissed_review_pushed_is_dated_after_the_review_read_before_it(
    fake: FakeGitHub,
) -> None:
    fake.add_issue("acme", "api", 7, "Honour Retry-After", is_pull_request=True)
    review = fake.add_review("acme", "api", 7, "APPROVED", "lgtm")
    conn = connector("acme/api", base_url=fake.base_url)
    [read_before] = [
        r for r in conn.fetch(Window(start=T0, end=NOW), None) if isinstance(r, GitHubReview)
    ]
    fake.edit_review("acme", "api", review.id, state="DISMISSED")

    delivery = receive(
        conn,
        "pull_request_review",
        fake.webhook_body(
            "pull_request_review", "dismissed", "acme", "api", 7, review_id=review.id
        ),
    )
    dismissed = the_record(delivery)

    assert dismissed.key() == read_before.key()
    assert isinstance(dismissed, GitHubReview)
    assert dismissed.data["state"] == "DISMISSED"
    before, after = conn.source_updated_at(read_before), conn.source_updated_at(dismissed)
    assert before is not None
    assert after is not None
    assert before < after
