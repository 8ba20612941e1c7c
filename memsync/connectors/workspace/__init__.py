"""The ``workspace`` connector: a directory tree scanned as content-keyed episodes."""

from __future__ import annotations

from memsync.connectors.workspace.connector import (
    WorkspaceConfig,
    WorkspaceConnector,
    WorkspaceFile,
    WorkspaceRecord,
    WorkspaceSnapshot,
    display_name,
    snapshot_digest,
)

__all__ = [
    "WorkspaceConfig",
    "WorkspaceConnector",
    "WorkspaceFile",
    "WorkspaceRecord",
    "WorkspaceSnapshot",
    "display_name",
    "snapshot_digest",
]
