"""Sensitivity labels and read policies, decided purely (issue #31 part 1)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memsync.compile.sensitivity import (
    MAX_LABELS,
    CallerIdentity,
    LabelRule,
    PolicyAction,
    PolicyMode,
    PolicyRule,
    ReadPolicy,
    normalise_labels,
)

AGENT = CallerIdentity("bot-7", "agent")
PERSON = CallerIdentity("dana", "human")
labels = st.lists(st.text(alphabet="aAbB -_", max_size=6), max_size=40)


@given(labels)
def test_normalising_is_idempotent_and_sorted_lowercase_trimmed_distinct(raw: list[str]) -> None:
    try:
        once = normalise_labels(raw)
    except ValueError:
        return
    assert normalise_labels(once) == once
    assert list(once) == sorted(set(once))
    assert all(label == label.strip().lower() and label for label in once)


def test_normalising_refuses_too_many_and_too_long_labels_saying_why() -> None:
    assert normalise_labels([" PII", "pii ", "", "Billing"]) == ("billing", "pii")
    assert len(normalise_labels([f"l{n}" for n in range(MAX_LABELS)])) == MAX_LABELS
    with pytest.raises(ValueError, match="at most 32"):
        normalise_labels([f"l{n}" for n in range(MAX_LABELS + 1)])
    with pytest.raises(ValueError, match="longer than 64"):
        normalise_labels(["x" * 65])


def test_the_first_matching_rule_wins_and_no_match_shows() -> None:
    policy = ReadPolicy(
        (
            PolicyRule(
                "agents-redact",
                frozenset({"pii"}),
                PolicyAction.REDACT,
                caller_types=frozenset({"agent"}),
            ),
            PolicyRule("pii-deny", frozenset({"pii", "hr"}), PolicyAction.DENY),
        )
    )
    redacted = policy.decide({"pii"}, AGENT)
    denied = policy.decide({"hr", "x"}, AGENT)
    assert redacted is not None
    assert (redacted.rule, redacted.action, redacted.enforced) == ("agents-redact", "redact", True)
    assert denied is not None
    assert denied.rule == "pii-deny"
    person = policy.decide({"pii"}, PERSON)
    assert person is not None
    assert person.rule == "pii-deny"
    assert policy.decide({"public"}, AGENT) is None
    assert policy.decide(set(), AGENT) is None


def test_caller_predicates_name_ids_and_types_and_an_unknown_caller_matches_neither() -> None:
    rule = PolicyRule(
        "only-dana", frozenset({"pii"}), PolicyAction.DENY, caller_ids=frozenset({"dana"})
    )
    assert rule.matches({"pii"}, PERSON)
    assert not rule.matches({"pii"}, AGENT)
    assert not rule.matches({"pii"}, CallerIdentity())


def test_log_only_decides_the_same_but_does_not_enforce() -> None:
    rule = PolicyRule("deny", frozenset({"pii"}), PolicyAction.DENY)
    decision = ReadPolicy((rule,), PolicyMode.LOG_ONLY).decide({"pii"}, AGENT)
    assert decision is not None
    assert not decision.enforced


def test_a_body_caller_overrides_the_headers_field_by_field() -> None:
    headers = CallerIdentity("from-header", "agent")
    assert headers.overridden_by(None, "human") == CallerIdentity("from-header", "human")
    assert not CallerIdentity().known


def test_label_rules_match_dotted_paths_globs_and_exact_values() -> None:
    private = LabelRule({"metadata.channel_private": True}, ("Confidential",))
    hr_files = LabelRule({"type": "file", "payload.path": "docs/hr/*"}, ("hr",))
    episode = {"type": "file", "payload": {"path": "docs/hr/pay.md"}, "metadata": {}}
    assert LabelRule.labels_of([private, hr_files], episode) == ("hr",)
    slack = {"type": "message", "payload": {}, "metadata": {"channel_private": True}}
    assert LabelRule.labels_of([private, hr_files], slack) == ("confidential",)
    # True is not 1, and a missing field matches nothing.
    assert LabelRule.labels_of([private], {"metadata": {"channel_private": 1}}) == ()
    assert LabelRule.labels_of([hr_files], {"type": "file"}) == ()


def test_a_label_rule_steps_through_lists_any_element_matching() -> None:
    rule = LabelRule({"payload.files.path": "secrets/*"}, ("secret",))
    scan = {"payload": {"files": [{"path": "src/a.py"}, {"path": "secrets/key.pem"}]}}
    assert LabelRule.labels_of([rule], scan) == ("secret",)
    assert LabelRule.labels_of([rule], {"payload": {"files": [{"path": "src/a.py"}]}}) == ()
    group = LabelRule({"fields.group_id": 42}, ("restricted",))
    assert LabelRule.labels_of([group], {"fields": {"group_id": 42}}) == ("restricted",)
