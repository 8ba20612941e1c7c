"""Sensitivity labels and read policies: which memory a caller may read, decided purely.

A label is a short tag (``pii``, ``confidential``) on a memory or an episode. A memory's
labels are its own (``PATCH /v1/memories/{id}/labels``) plus those of every episode it
was derived from, so a label set on a source reaches what is compiled from it. A
:class:`ReadPolicy` maps labels and the caller to a decision: the first rule that
matches wins, and no matching rule means the memory is shown as it is.

Nothing here reads the store or the clock: the read path gathers labels and calls
:meth:`ReadPolicy.decide`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memsync.compile.label_terms import (
    MAX_LABEL_LENGTH,
    MAX_LABELS,
    PolicyAction,
    PolicyMode,
    normalise_labels,
)

__all__ = [
    "MAX_LABELS",
    "MAX_LABEL_LENGTH",
    "REDACTION_MARKER",
    "CallerIdentity",
    "Decision",
    "LabelRule",
    "PolicyAction",
    "PolicyMode",
    "PolicyRule",
    "ReadPolicy",
    "normalise_labels",
]

REDACTION_MARKER = "[redacted]"
"""What a redacted memory's or episode's text reads instead of itself."""


@dataclass(frozen=True, slots=True)
class CallerIdentity:
    """Who reads, as the request says (body ``caller_id``/``caller_type``, or the
    ``X-Caller-ID``/``X-Caller-Type`` headers); both may be unknown."""

    caller_id: str | None = None
    caller_type: str | None = None

    @property
    def known(self) -> bool:
        """Whether the request named its caller at all."""
        return self.caller_id is not None or self.caller_type is not None

    def overridden_by(self, caller_id: str | None, caller_type: str | None) -> CallerIdentity:
        """This identity with the fields a request body names taking precedence."""
        return CallerIdentity(caller_id or self.caller_id, caller_type or self.caller_type)


@dataclass(frozen=True, slots=True)
class PolicyRule:
    """One rule: if the labels include any of ``labels`` and the caller matches every
    caller predicate given (an empty one matches any caller), apply ``action``."""

    name: str
    labels: frozenset[str]
    action: PolicyAction
    caller_ids: frozenset[str] = frozenset()
    caller_types: frozenset[str] = frozenset()

    def matches(self, labels: Collection[str], caller: CallerIdentity) -> bool:
        if self.labels.isdisjoint(labels):
            return False
        if self.caller_ids and caller.caller_id not in self.caller_ids:
            return False
        return not self.caller_types or caller.caller_type in self.caller_types


@dataclass(frozen=True, slots=True)
class Decision:
    """A rule that matched, and whether the policy applies it (``enforced``) or only
    logs it (``log_only``)."""

    rule: str
    action: PolicyAction
    enforced: bool


@dataclass(frozen=True, slots=True)
class ReadPolicy:
    """Rules in order, the mode, and whether a read must name its caller.

    Repeats: the same labels and caller always get the same decision. Conflicts between
    rules: the first match wins, so put the narrow rule before the broad one."""

    rules: tuple[PolicyRule, ...] = ()
    mode: PolicyMode = PolicyMode.ENFORCE
    require_caller_identity: bool = False

    @property
    def active(self) -> bool:
        """Whether any read can be decided otherwise than "shown"."""
        return bool(self.rules)

    def decide(self, labels: Collection[str], caller: CallerIdentity) -> Decision | None:
        """The first matching rule's decision; None when none matches (shown)."""
        if not labels:
            return None
        for rule in self.rules:
            if rule.matches(labels, caller):
                return Decision(rule.name, rule.action, self.mode is PolicyMode.ENFORCE)
        return None


@dataclass(frozen=True, slots=True)
class LabelRule:
    """A connector's rule: an episode whose fields match every entry of ``when`` gets
    the labels ``add``.

    ``when`` maps a dotted path in the episode (``type``, ``source``, ``subject_id``,
    ``session_id``, ``idempotency_key``, ``payload.…``, ``metadata.…``, and
    ``fields.…``: the connector's subject fields of the record, e.g. Slack's
    ``fields.channel``, Zendesk's ``fields.group_id``) to the value it must have; a
    string value is a glob (``docs/hr/*``, ``*secret*``) matched against a string
    field; through a list, any element may match (``payload.files.path``)."""

    when: Mapping[str, Any]
    add: tuple[str, ...]
    _paths: tuple[tuple[tuple[str, ...], Any], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        paths = tuple((tuple(path.split(".")), value) for path, value in self.when.items())
        object.__setattr__(self, "_paths", paths)

    def labels_for(self, episode: Mapping[str, Any]) -> tuple[str, ...]:
        """``add`` when every condition holds of ``episode`` (its fields as a mapping),
        else nothing."""
        for path, expected in self._paths:
            if not any(_holds(actual, expected) for actual in _values(episode, path)):
                return ()
        return self.add

    @staticmethod
    def labels_of(rules: Sequence[LabelRule], episode: Mapping[str, Any]) -> tuple[str, ...]:
        """The normalised union of what every matching rule adds."""
        return normalise_labels(label for rule in rules for label in rule.labels_for(episode))


def _values(document: Any, path: tuple[str, ...]) -> list[Any]:
    """Every value at ``path``; a list on the way (``payload.files.path``) is
    stepped into, element by element, and so is a list at the end."""
    found = [document]
    for step in path:
        found = [
            item[step]
            for value in found
            for item in (value if isinstance(value, list) else [value])
            if isinstance(item, Mapping) and step in item
        ]
    return [item for value in found for item in (value if isinstance(value, list) else [value])]


def _holds(actual: Any, expected: Any) -> bool:
    if isinstance(expected, str) and isinstance(actual, str):
        return fnmatch.fnmatchcase(actual, expected)
    # bool is an int in Python: True must not match 1.
    return type(actual) is type(expected) and bool(actual == expected)
