"""The ``workspace`` connector type as the registry knows it without importing the connector:
its configuration model and its declaration (see :mod:`memsync.connectors.declaration`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from memsync.connectors.checkpoints import DEFAULT_STREAM
from memsync.connectors.config import ConnectorConfig
from memsync.connectors.declaration import ConnectorDeclaration, KeyPolicy
from memsync.fields import empty_list

__all__ = ["WORKSPACE", "WorkspaceConfig"]


class WorkspaceConfig(ConnectorConfig):
    """A directory to scan.

    ``workspace_id`` (default: the connector name) namespaces the keys; ``include`` /
    ``exclude`` are gitignore-style globs relative to ``root``; files larger than
    ``max_file_bytes`` are skipped; payloads carry at most ``max_content_bytes`` of text.
    """

    type: Literal["workspace"] = "workspace"
    root: Path
    workspace_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    include: list[str] = Field(default_factory=empty_list)
    exclude: list[str] = Field(default_factory=empty_list)
    respect_gitignore: bool = True
    max_file_bytes: int = Field(default=1_048_576, gt=0)
    max_content_bytes: int = Field(default=65_536, gt=0)

    @property
    def effective_workspace_id(self) -> str:
        return self.workspace_id or self.name

    def stream_names(self) -> tuple[str, ...]:
        """One stream: a scan reads the whole tree at once."""
        return (DEFAULT_STREAM,)


WORKSPACE = ConnectorDeclaration(
    type="workspace",
    key_policy=KeyPolicy.CONTENT,
    key_rationale=(
        "A file in a workspace has no identity apart from its path and content: nothing "
        "records edits, renames or deletions as events. So a file's key is its path plus "
        "its content hash, and a scan's key is the hash of all path:hash lines. An "
        "unchanged re-scan maps to existing keys and stores nothing; any change is a new "
        "episode, and the previous version stays as it was seen."
    ),
    config_model=WorkspaceConfig,
    example_key=(
        "workspace:acme-api:file:src/app.py:"
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    ),
    implementation="memsync.connectors.workspace.connector:WorkspaceConnector",
    subject_fields=frozenset({"workspace_id"}),
    deletions=(
        "Every scan is complete, so a file present before and absent now (removed, "
        "renamed away, or no longer included) is reported with every stored version of "
        "it. A scan that could not read a directory reports no deletion."
    ),
)
