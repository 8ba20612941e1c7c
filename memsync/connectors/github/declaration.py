"""The ``github`` connector type as the registry knows it without importing the connector:
its configuration model and its declaration (see :mod:`memsync.connectors.declaration`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Literal, get_args

from pydantic import Field, SecretStr, field_validator

from memsync.connectors.config import ConnectorConfig, Duration
from memsync.connectors.declaration import ConnectorDeclaration, KeyPolicy

__all__ = ["DEFAULT_EVENT_TYPES", "GITHUB", "GitHubConfig", "GitHubStream"]

GitHubStream = Literal[
    "issues",
    "pull_requests",
    "issue_comments",
    "reviews",
    "issue_events",
    "review_comments",
    "timeline",
]
_ALL_STREAMS: frozenset[GitHubStream] = frozenset(get_args(GitHubStream))

#: Issue events that say something happened to the issue. ``subscribed``, ``mentioned``
#: and ``referenced`` are left out: they are notifications, not changes.
DEFAULT_EVENT_TYPES: frozenset[str] = frozenset(
    {
        "closed",
        "reopened",
        "labeled",
        "unlabeled",
        "assigned",
        "unassigned",
        "milestoned",
        "demilestoned",
        "renamed",
        "merged",
        "locked",
        "unlocked",
        "transferred",
        "review_requested",
        "review_request_removed",
        "converted_to_draft",
        "ready_for_review",
    }
)

_PUBLIC_API = "https://api.github.com"


class GitHubConfig(ConnectorConfig):
    """Repositories, credentials and streams of one GitHub connector instance.

    ``repo`` is ``owner/name`` or a list of them. ``token`` (a ``SecretStr``, never in
    reprs, logs or messages) may be omitted for public repositories, at 60 requests an
    hour. ``base_url`` defaults to ``https://api.github.com``; for GitHub Enterprise
    Server use ``https://<host>/api/v3``. ``streams`` selects what is read;
    ``event_types`` which issue events become episodes.
    """

    type: Literal["github"] = "github"
    repo: list[str] = Field(min_length=1)
    token: SecretStr | None = None
    streams: frozenset[GitHubStream] = _ALL_STREAMS
    event_types: frozenset[str] = DEFAULT_EVENT_TYPES
    per_page: int = Field(default=100, ge=1, le=100)
    timeout: Duration = timedelta(seconds=30)

    @field_validator("repo", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("repo")
    @classmethod
    def _owner_slash_name(cls, value: list[str]) -> list[str]:
        for full_name in value:
            owner, _, name = full_name.partition("/")
            if not owner or not name or "/" in name or full_name != full_name.strip():
                raise ValueError(f"repo '{full_name}' must be 'owner/name', e.g. acme/api-server")
        return value

    @property
    def api_base(self) -> str:
        return self.base_url or _PUBLIC_API


GITHUB = ConnectorDeclaration(
    type="github",
    key_policy=KeyPolicy.IDENTITY,
    key_rationale=(
        "Issues, pull requests, comments, review comments, reviews and events have numbers "
        "and ids that GitHub never reuses within a repository and that survive edits, so "
        "keys are built from the (lower-cased) owner, repository and ids, never from text: "
        "an edited title or body is a new revision of the same episode, a closed issue gets "
        "its close event once, and re-reading an unchanged item stores nothing. Timeline "
        "items without an id are named by what they link: a commit by its sha on its pull "
        "request, a cross-reference by the referencing issue on the referenced one."
    ),
    config_model=GitHubConfig,
    example_key="github:acme:api-server:issue:4471:opened",
    implementation="memsync.connectors.github.connector:GitHubConnector",
    webhooks=(
        "issues, issue_comment, pull_request, pull_request_review and "
        "pull_request_review_comment events (X-Hub-Signature-256)"
    ),
    subject_fields=frozenset({"owner", "repo", "repository", "number", "author", "kind"}),
    deletions=(
        "An issue whose events in the window say it was transferred or deleted, and "
        "that answers 404 or 410 (or from another repository) when read again, is "
        "reported with its comments and events. A pull request review comment absent from "
        "a read of the review-comment list to its end is reported (for the comments that "
        "read covers: created since its window start). GitHub lists no deletions "
        "otherwise: an issue, comment, review or timeline item deleted without such an "
        "event is not seen."
    ),
)
