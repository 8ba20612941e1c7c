"""The words of sensitivity labels and read policies: how a label is spelt, and what a
rule does and whether it is applied.

Apart from :mod:`.sensitivity` (which offers them too, with the decisions) because the
configuration validates against these alone: reading a configuration builds none of
the policy's decision types.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

__all__ = ["MAX_LABELS", "MAX_LABEL_LENGTH", "PolicyAction", "PolicyMode", "normalise_labels"]

MAX_LABELS = 32
"""The most labels one memory or episode carries (Statewave's limit)."""

MAX_LABEL_LENGTH = 64
"""The longest label, after trimming."""


def normalise_labels(labels: Iterable[str]) -> tuple[str, ...]:
    """Labels trimmed, lowercased, deduplicated and sorted; empty ones dropped.

    Raises ValueError (saying why) for more than :data:`MAX_LABELS` distinct labels or a
    label longer than :data:`MAX_LABEL_LENGTH`. Idempotent: normalising a normalised
    tuple returns it unchanged. The policy compares labels exactly, so this is the only
    place where spelling is forgiven."""
    distinct = {label.strip().lower() for label in labels} - {""}
    too_long = sorted(label for label in distinct if len(label) > MAX_LABEL_LENGTH)
    if too_long:
        raise ValueError(
            f"label {too_long[0][:20]!r}… is longer than {MAX_LABEL_LENGTH} characters"
        )
    if len(distinct) > MAX_LABELS:
        raise ValueError(f"{len(distinct)} distinct labels; at most {MAX_LABELS}")
    return tuple(sorted(distinct))


class PolicyAction(StrEnum):
    """What a matching rule does to a memory."""

    DENY = "deny"
    """Absent: the memory, and the text of the episodes it came from, in every read."""
    REDACT = "redact"
    """Shown as :data:`~memsync.compile.sensitivity.REDACTION_MARKER` instead of its
    text."""


class PolicyMode(StrEnum):
    """Whether decisions are applied or only logged."""

    LOG_ONLY = "log_only"
    """Every decision is logged and counted; reads answer as without a policy."""
    ENFORCE = "enforce"
