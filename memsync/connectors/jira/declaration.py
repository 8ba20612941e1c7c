"""The ``jira`` connector type as the registry knows it without importing the connector:
its configuration model and its declaration (see :mod:`memsync.connectors.declaration`)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator

from memsync.connectors.config import (
    ConnectorConfig,
    Duration,
    SubjectTemplate,
    SubjectTemplateValue,
)
from memsync.connectors.declaration import ConnectorDeclaration, KeyPolicy

__all__ = ["JIRA", "JiraConfig"]

# Jira project keys: an upper-case letter, then upper-case letters, digits or "_".
_PROJECT_KEY = re.compile(r"[A-Z][A-Z0-9_]{0,254}")


class JiraConfig(ConnectorConfig):
    """Credentials and scope for one Jira Cloud site.

    ``site`` is the site's name (``acme`` for ``https://acme.atlassian.net``) and the
    second segment of every key; ``base_url`` overrides the address (a fake server or a
    gateway), never the keys. ``email`` and ``token`` (an API token, a ``SecretStr``:
    never in reprs, logs or messages) are sent as HTTP basic auth. The issues read are
    those of ``projects`` or those ``jql`` selects (one of them, or neither: every
    project the account can browse), updated in the window; the connector adds the
    ``updated`` bound and the order itself, so ``jql`` holds no ``ORDER BY``.
    """

    type: Literal["jira"] = "jira"
    subject: SubjectTemplateValue = SubjectTemplate("project:{project_key}")
    site: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")
    email: str = Field(min_length=3)
    token: SecretStr
    projects: tuple[str, ...] = ()
    jql: str | None = None
    include_comments: bool = True
    page_size: int = Field(default=100, ge=1, le=5000)
    timeout: Duration = timedelta(seconds=30)

    @field_validator("projects")
    @classmethod
    def _project_keys(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for key in value:
            if not _PROJECT_KEY.fullmatch(key):
                raise ValueError(
                    f"projects: '{key}' is not a Jira project key (upper-case letters, digits "
                    "and '_', starting with a letter, e.g. ENG)"
                )
        if len(set(value)) != len(value):
            raise ValueError(f"projects: a key is listed twice: {list(value)}")
        return value

    @field_validator("jql")
    @classmethod
    def _jql_is_a_filter(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.strip():
            raise ValueError("jql must not be empty (leave it out to read every project)")
        if re.search(r"\border\s+by\b", value, re.IGNORECASE):
            raise ValueError(
                "jql must not contain ORDER BY: the connector orders the search by updated "
                "itself (its checkpoints depend on that order)"
            )
        return value.strip()

    @model_validator(mode="after")
    def _one_scope(self) -> Self:
        if self.projects and self.jql is not None:
            raise ValueError(
                "projects and jql: give one of them (put the projects into the jql, e.g. "
                '"project in (ENG, OPS) AND labels = memory")'
            )
        return self

    @property
    def api_base(self) -> str:
        return self.base_url or f"https://{self.site}.atlassian.net"


JIRA = ConnectorDeclaration(
    type="jira",
    key_policy=KeyPolicy.IDENTITY,
    key_rationale=(
        "Issues and comments are keyed by their numeric ids, which Jira never reuses in a "
        "site and keeps across edits and moves; issue keys (ENG-12) are not used, because "
        "moving an issue to another project gives it a new key. A comment's key sits below "
        "its issue's (a comment never changes issue), so an edited summary or comment is a "
        "revision, a moved issue keeps its episodes, and an unchanged re-read stores nothing."
    ),
    config_model=JiraConfig,
    example_key="jira:acme:issue:10002:comment:10000",
    implementation="memsync.connectors.jira.connector:JiraConnector",
    subject_fields=frozenset(
        {
            "site",
            "project_key",
            "project_id",
            "issue_key",
            "issue_id",
            "reporter_id",
            "assignee_id",
        }
    ),
    deletions=(
        "An issue whose comments answer 404 while it is read (deleted meanwhile) is reported "
        "with its comments; a full read (from `start`, e.g. --full-refresh) lists every issue "
        "in scope, so a stored issue absent from it is reported with its comments; each read "
        "of an issue's comments lists them, so a deleted comment is reported. An issue deleted "
        "between full reads is not seen until the next one, unless a webhook reports it "
        "(jira:issue_deleted, comment_deleted)."
    ),
    webhooks=(
        "jira:issue_created/updated/deleted and comment_created/updated/deleted "
        "(X-Hub-Signature), created and updated read back through the REST API"
    ),
)
