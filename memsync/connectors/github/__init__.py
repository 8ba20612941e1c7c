"""The GitHub connector (PyGithub): issues, pull requests, comments, reviews, events."""

from __future__ import annotations

from memsync.connectors.github.connector import (
    DEFAULT_EVENT_TYPES,
    GitHubComment,
    GitHubConfig,
    GitHubConnector,
    GitHubIssue,
    GitHubIssueEvent,
    GitHubRecord,
    GitHubReview,
    GitHubStream,
    RepoRef,
)

__all__ = [
    "DEFAULT_EVENT_TYPES",
    "GitHubComment",
    "GitHubConfig",
    "GitHubConnector",
    "GitHubIssue",
    "GitHubIssueEvent",
    "GitHubRecord",
    "GitHubReview",
    "GitHubStream",
    "RepoRef",
]
