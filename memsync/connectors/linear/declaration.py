"""The ``linear`` connector type as the registry knows it without importing the connector:
its configuration model and its declaration (see :mod:`memsync.connectors.declaration`)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from memsync.connectors.config import (
    ConnectorConfig,
    Duration,
    SubjectTemplate,
    SubjectTemplateValue,
)
from memsync.connectors.declaration import ConnectorDeclaration, KeyPolicy

__all__ = ["LINEAR", "LinearConfig"]

_PUBLIC_API = "https://api.linear.app"
# Linear team keys are short upper-case codes (the ENG of ENG-123).
_TEAM_KEY = re.compile(r"[A-Z0-9][A-Z0-9_]{0,14}")


class LinearConfig(ConnectorConfig):
    """Credentials and scope of one Linear workspace.

    ``token`` is a Linear API key (``${LINEAR_API_KEY}``), sent as the ``Authorization``
    header; a ``SecretStr``, so it never appears in reprs, logs or messages. ``teams``
    lists team keys (``ENG``); absent, every team the key can see is read. ``base_url``
    defaults to ``https://api.linear.app`` (requests go to ``{base_url}/graphql``).
    ``page_size`` is the ``first`` of every page: Linear's own default, 50, unless set
    (Linear allows up to 250, but charges a query's complexity by it: see the docs).
    """

    type: Literal["linear"] = "linear"
    subject: SubjectTemplateValue = SubjectTemplate("team:{team_key}")
    token: SecretStr
    teams: list[str] | None = None
    page_size: int = Field(default=50, ge=1, le=250)
    timeout: Duration = timedelta(seconds=30)

    @field_validator("teams", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("teams")
    @classmethod
    def _team_keys(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError(
                "teams is empty: list team keys such as [ENG, OPS], or leave teams out to "
                "read every team"
            )
        for key in value:
            if not _TEAM_KEY.fullmatch(key):
                raise ValueError(
                    f"teams: '{key}' is not a Linear team key (upper-case letters and digits, "
                    "the ENG of ENG-123)"
                )
        return sorted(set(value))

    @property
    def api_base(self) -> str:
        return self.base_url or _PUBLIC_API


LINEAR = ConnectorDeclaration(
    type="linear",
    key_policy=KeyPolicy.IDENTITY,
    key_rationale=(
        "Issues and comments have UUIDs that Linear never reuses and that survive edits "
        "and moves, so keys are built from the workspace's and the records' UUIDs, never "
        "from identifiers such as ENG-12 (which change when an issue moves to another "
        "team) or from text: an edited title or comment is a revision of the same "
        "episode, a moved issue keeps its key, and re-reading an unchanged one stores "
        "nothing. A comment's key lies under its issue's, so an issue's tombstone covers "
        "its comments."
    ),
    config_model=LinearConfig,
    example_key=(
        "linear:7c9e6679-7425-40de-944b-e07fc1f90ae7:issue:"
        "2b5f2c84-1b8e-4f2f-9a53-0b1d5c3e8f10:comment:9d3b1f6e-5c2a-4e8b-8f7d-3a6c2e1b4d5f"
    ),
    implementation="memsync.connectors.linear.connector:LinearConnector",
    subject_fields=frozenset(
        {"workspace", "team_key", "team_id", "issue_id", "issue_identifier", "project_id"}
    ),
    deletions=(
        "An issue or comment the API returns archived (archivedAt set) or trashed "
        "(includeArchived: true) is reported; an issue with its comments, and a comment "
        "of an archived issue with it. A comment deleted outright, and an issue purged "
        "from the trash before the next run, are not seen by a re-read; with webhook: "
        "configured, a pushed remove of either is a tombstone at once."
    ),
    webhooks="Issue and Comment create, update and remove (Linear-Signature)",
)
