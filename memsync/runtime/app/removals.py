"""What removing data reports: a connector's data forgotten, a subject deleted.

Apart from :mod:`.services` because every command imports the services and only
``forget`` and the delete routes build these: each frozen dataclass costs a command's
start-up about half a millisecond to define (its methods are generated and compiled).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConnectorForgotten", "SubjectDeletion"]


@dataclass(frozen=True, slots=True)
class ConnectorForgotten:
    """What forgetting a connector's data removed, or with ``dry_run`` would remove."""

    tenant_id: str
    connector: str
    dry_run: bool
    episodes: int
    revisions: int
    """Earlier revisions of those episodes."""
    memories_deleted: int
    """Memories derived from nothing else."""
    memories_kept: int
    """Memories that lost a source and keep their others."""
    memories_reactivated: int
    """Memories that only a deleted memory had superseded, active again."""
    supersessions: int
    conflicts: int
    subjects_changed: int
    """Subjects whose memories changed (a new memory version each)."""
    streams: int
    """Stream checkpoints."""
    runs: int
    backfills: int
    resolutions: int
    """Resolution records of support sessions the connector recorded last."""

    @property
    def found_anything(self) -> bool:
        """Whether the connector had anything stored in the tenant."""
        return any((self.episodes, self.streams, self.runs, self.backfills, self.resolutions))


@dataclass(frozen=True, slots=True)
class SubjectDeletion:
    subject_id: str
    episodes_deleted: int
    memories_deleted: int
