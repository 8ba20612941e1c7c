"""The inspector: everything the store knows about one subject, for people and machines.

The read path (context bundles) shows active memories only; this is the audit path,
showing every episode with its revisions, memories in every status, the supersession
records with rule, claim key, score and threshold, and conflicts.
"""

from __future__ import annotations

from typing import Any

from memsync.compile.bundle import memory_to_dict
from memsync.compile.types import MemoryStatus
from memsync.runtime.compiling.memories import ConflictRecord
from memsync.runtime.reading.episodes import EpisodeRepository
from memsync.runtime.reading.memories import MemoryRepository

__all__ = ["conflict_to_dict", "inspect_subject"]

INSPECT_EPISODES = 1000


def conflict_to_dict(record: ConflictRecord) -> dict[str, Any]:
    conflict = record.conflict
    return {
        "id": str(conflict.id),
        "subject_id": conflict.subject_id,
        "kind": conflict.kind.value,
        "claim_key": conflict.claim_key,
        "rule": conflict.rule.value,
        "score": conflict.score,
        "threshold": conflict.threshold,
        "memory_ids": [str(memory_id) for memory_id in conflict.memory_ids],
        "contents": list(conflict.contents),
        "status": record.status,
        "job_id": conflict.job_id,
        "detected_at": conflict.detected_at.isoformat(),
        "resolved_at": record.resolved_at.isoformat() if record.resolved_at else None,
        "kept_memory_id": str(record.chosen_memory_id) if record.chosen_memory_id else None,
    }


def inspect_subject(
    episodes: EpisodeRepository, memories: MemoryRepository, tenant_id: str, subject_id: str
) -> dict[str, Any]:
    """A JSON-ready report of one subject (the newest 1,000 episodes at most)."""
    page = episodes.timeline(
        tenant_id, subject_id, limit=INSPECT_EPISODES, offset=0, newest_first=True
    )
    every_memory = memories.memories(tenant_id, subject_id, statuses=tuple(MemoryStatus))
    by_status: dict[str, list[dict[str, Any]]] = {status.value: [] for status in MemoryStatus}
    for memory in every_memory:
        by_status[memory.status.value].append(
            {
                **memory_to_dict(memory),
                "claim_value": memory.claim_value,
                "status_rule": memory.status_rule.value if memory.status_rule else None,
            }
        )
    return {
        "subject_id": subject_id,
        "episodes": [
            {
                "id": str(episode.id),
                "source": episode.source,
                "type": episode.type,
                "idempotency_key": episode.idempotency_key,
                "occurred_at": episode.occurred_at.isoformat(),
                "revision": episode.revision,
                "revisions_kept": episode.revision - 1,
                "compiled_revision": episode.compiled_revision,
            }
            for episode in page.episodes
        ],
        "episodes_truncated": page.has_more,
        "memories": by_status,
        "supersessions": [
            {
                "id": str(record.id),
                "rule": record.rule,
                "claim_key": record.claim_key,
                "score": record.score,
                "threshold": record.threshold,
                "winner_memory_id": str(record.winner_memory_id)
                if record.winner_memory_id
                else None,
                "loser_memory_id": str(record.loser_memory_id) if record.loser_memory_id else None,
                "winner_episode_ids": record.winner_episode_ids,
                "loser_episode_ids": record.loser_episode_ids,
                "winner_episode_count": record.winner_episode_count,
                "loser_episode_count": record.loser_episode_count,
                "job_id": record.job_id,
                "decided_at": record.decided_at.isoformat(),
            }
            for record in memories.supersessions(tenant_id, subject_id)
        ],
        "conflicts": [
            conflict_to_dict(record)
            for record in memories.conflicts(tenant_id, subject_id, status=None)
        ],
    }
