"""A connector's records as episodes with the sensitivity labels its rules give them:
the one mapping the sync runner and the webhook receivers share, so a record pushed and
the same record read again carry the same labels."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from memsync.compile.sensitivity import LabelRule
from memsync.connectors import Connector, ConnectorConfig
from memsync.episode import EpisodeDraft

__all__ = ["label_rules_of", "labelled_episode"]


def label_rules_of(config: ConnectorConfig) -> list[LabelRule]:
    """The connector's ``labels`` rules, ready to match."""
    return [LabelRule(rule.when, tuple(rule.add)) for rule in config.labels]


def labelled_episode(
    connector: Connector[Any, Any], record: Any, rules: Sequence[LabelRule]
) -> EpisodeDraft:
    """``connector.to_episode(record)`` with the labels ``rules`` give it. On every read
    of the record (and every pushed delivery), so a revision carries them as the first
    version did; a rule's ``fields.…`` paths are the record's subject fields. Raises what
    ``to_episode`` raises (``SkipRecord``)."""
    draft = connector.to_episode(record)
    if not rules:
        return draft
    labels = LabelRule.labels_of(
        rules,
        {
            "type": draft.type,
            "source": draft.source,
            "subject_id": draft.subject_id,
            "session_id": draft.session_id,
            "idempotency_key": draft.idempotency_key,
            "payload": draft.payload,
            "metadata": draft.metadata,
            "fields": dict(connector.subject_values(record)),
        },
    )
    return replace(draft, sensitivity_labels=labels) if labels else draft
