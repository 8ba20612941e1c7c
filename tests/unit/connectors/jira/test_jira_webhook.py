"""The Jira webhook receiver (``memsync.connectors.jira.webhook``), reached through
:meth:`JiraConnector.webhook_receiver` and reading back from the fake Jira: signatures,
which events become which records or tombstones, the project scope, and what a failed
read-back leaves."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from memsync.clock import FakeClock
from memsync.connectors import Tombstone, Window
from memsync.connectors.fake_http import load_fixture
from memsync.connectors.jira import JiraComment, JiraConfig, JiraConnector, JiraIssue, JiraRecord
from memsync.connectors.jira.fake_api import FakeJira, FakeJiraComment, FakeJiraIssue
from memsync.connectors.webhooks import Refusal, WebhookDelivery, WebhookRefused
from memsync.stopping import FakeSleeper

NOW = datetime(2026, 3, 1, tzinfo=UTC)
SECRET = "jira-webhook-secret"


@pytest.fixture
def fake() -> Iterator[FakeJira]:
    with FakeJira() as server:
        yield server


@pytest.fixture
def issue(fake: FakeJira) -> FakeJiraIssue:
    return fake.add_issue("ENG", "Checkout fails", "Safari only.")


@pytest.fixture
def comment(fake: FakeJira, issue: FakeJiraIssue) -> FakeJiraComment:
    return fake.add_comment(issue.id, "Reproduced on 17.2")


def connector(fake: FakeJira, **fields: object) -> JiraConnector:
    config = JiraConfig.model_validate(
        {
            "name": "eng-jira",
            "site": "acme",
            "base_url": fake.base_url,
            "email": "bot@acme.example",
            "token": "jira-token",
            "retry": {"max_attempts": 1},
            "webhook": {"secret": SECRET},
            **({"projects": ["ENG"]} | fields),
        }
    )
    sleeper = FakeSleeper(FakeClock(NOW))
    return JiraConnector(config, sleeper=sleeper, clock=sleeper.clock)


def headers(body: bytes, *, secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"x-hub-signature": f"sha256={digest}", "x-atlassian-webhook-identifier": "d-1"}


def receive(jira: JiraConnector, body: bytes) -> WebhookDelivery[JiraRecord]:
    receiver = jira.webhook_receiver()
    assert receiver is not None
    return receiver.receive(headers(body), body, NOW)


def refusal(jira: JiraConnector, body: bytes, sent: dict[str, str] | None = None) -> Refusal:
    receiver = jira.webhook_receiver()
    assert receiver is not None
    with pytest.raises(WebhookRefused) as refused:
        receiver.receive(headers(body) if sent is None else sent, body, NOW)
    return refused.value.refusal


def test_the_documented_example_verifies_and_nothing_is_taken_from_its_body(fake: FakeJira) -> None:
    # Atlassian's example (fixtures README): issue 99291 of JRA, unknown to this fake.
    body = json.dumps(load_fixture("jira", "webhook_issue_event.variant.json")).encode()

    delivery = receive(connector(fake, projects=["JRA"]), body)

    # Read back: the issue is not on this site (404), so nothing is taken from the body.
    assert (delivery.delivery_id, delivery.event, delivery.ignored) == (
        "d-1",
        "jira:issue_updated",
        True,
    )
    assert delivery.records == ()


def test_a_created_issue_is_the_re_read_of_that_issue_with_its_comments(
    fake: FakeJira, issue: FakeJiraIssue, comment: FakeJiraComment
) -> None:
    jira = connector(fake)
    re_read = [
        r
        for r in jira.fetch(Window(start=None, end=NOW), None)
        if isinstance(r, JiraIssue | JiraComment)
    ]

    delivery = receive(jira, fake.webhook_body("jira:issue_created", issue.id))

    assert list(delivery.records) == re_read
    assert [jira.to_episode(r) for r in delivery.records] == [jira.to_episode(r) for r in re_read]
    assert (delivery.event, delivery.ignored, delivery.tombstones) == (
        "jira:issue_created",
        False,
        (),
    )


def test_comment_events_read_back_the_issue_and_are_ignored_without_comments(
    fake: FakeJira, issue: FakeJiraIssue, comment: FakeJiraComment
) -> None:
    body = fake.webhook_body("comment_updated", issue.id, comment_id=comment.id)

    with_comments = receive(connector(fake), body)
    without = receive(connector(fake, include_comments=False), body)

    assert [r.key() for r in with_comments.records] == [
        f"jira:acme:issue:{issue.id}",
        f"jira:acme:issue:{issue.id}:comment:{comment.id}",
    ]
    assert (without.records, without.ignored) == ((), True)


def test_deletions_are_tombstones_without_a_read(
    fake: FakeJira, issue: FakeJiraIssue, comment: FakeJiraComment
) -> None:
    issue_gone = fake.webhook_body("jira:issue_deleted", issue.id)
    comment_gone = fake.webhook_body("comment_deleted", issue.id, comment_id=comment.id)
    fake.limit_budget(0)  # Jira answers nothing: a deletion must not need it

    jira = connector(fake)

    assert receive(jira, issue_gone).tombstones == (
        Tombstone(f"jira:acme:issue:{issue.id}", with_children=True, deleted_at=NOW),
    )
    assert receive(jira, comment_gone).tombstones == (
        Tombstone(f"jira:acme:issue:{issue.id}:comment:{comment.id}", deleted_at=NOW),
    )


def test_an_issue_that_cannot_be_read_back_is_acknowledged_and_left_to_the_re_read(
    fake: FakeJira, issue: FakeJiraIssue
) -> None:
    body = fake.webhook_body("jira:issue_updated", issue.id)
    fake.limit_budget(0)
    limited = receive(connector(fake), body)
    fake.limit_budget(None)
    fake.delete_issue(issue.id)
    deleted_since = receive(connector(fake), body)

    assert (limited.ignored, limited.records) == (True, ())
    assert (deleted_since.ignored, deleted_since.records) == (True, ())


def test_an_issue_moved_out_of_the_projects_since_the_event_is_ignored(
    fake: FakeJira, issue: FakeJiraIssue
) -> None:
    body = fake.webhook_body("jira:issue_updated", issue.id)
    fake.move_issue(issue.id, "OPS")

    delivery = receive(connector(fake), body)

    assert (delivery.ignored, delivery.records) == (True, ())


def test_with_jql_only_deletions_are_taken(fake: FakeJira, issue: FakeJiraIssue) -> None:
    jira = connector(fake, projects=[], jql="labels = memory")

    updated = receive(jira, fake.webhook_body("jira:issue_updated", issue.id))
    deleted = receive(jira, fake.webhook_body("jira:issue_deleted", issue.id))

    assert (updated.ignored, updated.records) == (True, ())
    assert [t.key for t in deleted.tombstones] == [f"jira:acme:issue:{issue.id}"]


def test_without_a_scope_every_project_is_taken(fake: FakeJira, issue: FakeJiraIssue) -> None:
    other = fake.add_issue("OPS", "Pager storm")

    delivery = receive(
        connector(fake, projects=[]), fake.webhook_body("jira:issue_created", other.id)
    )

    assert [r.key() for r in delivery.records] == [f"jira:acme:issue:{other.id}"]


def test_events_the_connector_does_not_read_are_ignored(fake: FakeJira) -> None:
    for event in ("worklog_created", "jira:version_released", "issuelink_created"):
        body = json.dumps({"timestamp": 1525698237764, "webhookEvent": event}).encode()
        delivery = receive(connector(fake), body)
        assert (delivery.event, delivery.ignored) == (event, True)


def test_signatures_are_checked_before_the_body_is_read(
    fake: FakeJira, issue: FakeJiraIssue
) -> None:
    body = fake.webhook_body("jira:issue_created", issue.id)
    jira = connector(fake)
    good = headers(body)

    assert refusal(jira, body, {"x-atlassian-webhook-identifier": "d-1"}) is Refusal.UNSIGNED
    assert refusal(jira, body, headers(body, secret="guess")) is Refusal.BAD_SIGNATURE
    # GitHub's header name, or the digest without its prefix, is not Jira's signature.
    bare = {"x-hub-signature": good["x-hub-signature"].removeprefix("sha256=")}
    assert refusal(jira, body, bare) is Refusal.BAD_SIGNATURE
    assert refusal(jira, b"{not json", headers(body)) is Refusal.BAD_SIGNATURE


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b"{not json", Refusal.MALFORMED),
        (b"[]", Refusal.MALFORMED),
        (b'{"timestamp": 1}', Refusal.MALFORMED),
        (b'{"webhookEvent": "jira:issue_created"}', Refusal.MALFORMED),
        (b'{"webhookEvent": "jira:issue_created", "issue": {"id": "../x"}}', Refusal.MALFORMED),
        (b'{"webhookEvent": "jira:issue_created", "issue": {"id": "1"}}', Refusal.MALFORMED),
        (
            b'{"webhookEvent": "comment_deleted", '
            b'"issue": {"id": "1", "fields": {"project": {"key": "ENG"}}}}',
            Refusal.MALFORMED,
        ),
        (
            b'{"webhookEvent": "jira:issue_deleted", '
            b'"issue": {"id": "1", "fields": {"project": {"key": "OPS"}}}}',
            Refusal.UNPROCESSABLE,
        ),
    ],
)
def test_bodies_that_are_not_a_delivery_of_this_connector_are_refused(
    fake: FakeJira, payload: bytes, expected: Refusal
) -> None:
    assert refusal(connector(fake), payload) is expected


def test_only_a_connector_with_a_webhook_has_a_receiver(fake: FakeJira) -> None:
    config = connector(fake).config.model_copy(update={"webhook": None})

    assert JiraConnector(config).webhook_receiver() is None


def test_revisions_are_ordered_by_jiras_updated_time(
    fake: FakeJira, issue: FakeJiraIssue, comment: FakeJiraComment
) -> None:
    fake.edit_comment(issue.id, comment.id, "Reproduced on 17.3")
    jira = connector(fake)
    records = jira.read_issue(str(issue.id))
    assert records is not None
    read_issue, read_comment = records

    assert jira.source_updated_at(read_issue) == fake.issue(issue.id).updated
    assert jira.source_updated_at(read_comment) == fake.issue(issue.id).comments[0].updated
    assert read_comment.occurred_at == comment.created  # an edit does not move the comment
