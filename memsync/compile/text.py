"""Where the text of an episode lives, shared by every compiler and the bundle.

Read in this order: ``payload.messages`` (a list of ``{role, content}``), then
``payload.title``, ``payload.subject``, ``payload.text``, ``payload.content``,
``payload.body`` and ``payload.description`` (issues, Zendesk tickets and comments, Slack
messages, notes). A passage *speaks for the subject* when the subject
wrote it: a message whose role is in ``SUBJECT_ROLES``, or any of the plain text fields.
Only such passages may make first-person claims about the subject.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SUBJECT_ROLES", "TEXT_FIELDS", "Passage", "passages"]

SUBJECT_ROLES: frozenset[str] = frozenset({"user", "human", "customer", "requester", "author"})
TEXT_FIELDS: tuple[str, ...] = ("title", "subject", "text", "content", "body", "description")


@dataclass(frozen=True, slots=True)
class Passage:
    """A piece of episode text and whether it speaks for the subject."""

    text: str
    speaks_for_subject: bool


def passages(payload: Mapping[str, Any]) -> Iterator[Passage]:
    """Yield the text passages of ``payload`` in the documented order; skip non-strings."""
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, Mapping) and isinstance(message.get("content"), str):
                role = str(message.get("role", "user")).casefold()
                yield Passage(message["content"], role in SUBJECT_ROLES)
    for field_name in TEXT_FIELDS:
        value = payload.get(field_name)
        if isinstance(value, str):
            yield Passage(value, True)
