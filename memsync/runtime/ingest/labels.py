"""Ingest's writes of the sensitivity labels a connector's rules gave its drafts.

Labels are kept per episode, not per revision: every ingest of a labelled draft
(created, duplicate or revised) writes the episode's labels again, under the subject
it is filed under now, so an edit of the record keeps them and a record that moved
takes them along. A draft without labels leaves what is stored as it is."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from memsync.episode import EpisodeDraft
from memsync.runtime.ingest.statements import IngestOutcome
from memsync.runtime.storage import tables

__all__ = ["write_episode_labels"]

_episode_labels = tables.episode_labels


def write_episode_labels(
    connection: Connection,
    tenant_id: str,
    drafts: Sequence[EpisodeDraft],
    outcomes: Sequence[IngestOutcome],
) -> None:
    """Store the labels of the labelled drafts (``outcomes`` in the drafts' order); a
    key repeated in the call keeps its last draft's labels."""
    labelled: dict[uuid.UUID, tuple[str, list[str]]] = {
        outcome.episode_id: (draft.subject_id, list(draft.sensitivity_labels))
        for draft, outcome in zip(drafts, outcomes, strict=True)
        if draft.sensitivity_labels
    }
    if not labelled:
        return
    for ids in tables.in_slices(list(labelled)):
        connection.execute(
            _episode_labels.delete().where(
                _episode_labels.c.tenant_id == tenant_id, _episode_labels.c.episode_id.in_(ids)
            )
        )
    connection.execute(
        _episode_labels.insert(),
        [
            {"tenant_id": tenant_id, "episode_id": key, "subject_id": subject, "labels": labels}
            for key, (subject, labels) in labelled.items()
        ],
    )
