from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.compile.heuristic import HeuristicCompiler
from memsync.compile.types import CandidateMemory, EpisodeView, MemoryKind
from memsync.episode import content_hash

WHEN = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
COMPILER = HeuristicCompiler()


def view(payload: dict[str, Any], *, number: int = 1, source: str = "api") -> EpisodeView:
    return EpisodeView(
        id=uuid.UUID(int=number),
        subject_id="alice",
        source=source,
        type="note",
        payload=payload,
        occurred_at=WHEN,
        revision=1,
        content_hash=content_hash(payload),
    )


def claims(payload: dict[str, Any]) -> list[CandidateMemory]:
    return [
        c for c in COMPILER.compile([view(payload)]) if c.kind is not MemoryKind.EPISODE_SUMMARY
    ]


def only_claim(text: str) -> tuple[str, str | None, str | None, bool, bool]:
    (candidate,) = claims({"text": text})
    return (
        candidate.kind.value,
        candidate.claim_key,
        candidate.claim_value,
        candidate.negated,
        candidate.explicit_change,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My name is Ana Silva.", ("profile_fact", "identity.name", "ana silva", False, False)),
        ("I work at Acme.", ("profile_fact", "employment.current_employer", "acme", False, False)),
        ("I live in Lisbon.", ("profile_fact", "location.home_city", "lisbon", False, False)),
        (
            "I'm a senior engineer.",
            ("profile_fact", "employment.role", "senior engineer", False, False),
        ),
        (
            "I'm on the platform team.",
            ("profile_fact", "employment.team", "platform", False, False),
        ),
        ("I like Rust.", ("preference", "preferences.likes", "rust", False, False)),
        ("I prefer tea over coffee.", ("preference", "preferences.prefers", "tea", False, False)),
        ("I use Neovim.", ("preference", "tools.used", "neovim", False, False)),
        (
            "My favourite editor is Helix.",
            ("preference", "preferences.favourite", "helix", False, False),
        ),
        ("I'm in Berlin this week.", ("current_state", "location.current", "berlin", False, False)),
        (
            "I'm working on the billing migration.",
            ("current_state", "work.current_project", "the billing migration", False, False),
        ),
        ("The v1 API is deprecated.", ("decision", "decisions.deprecated", "v1 api", False, False)),
    ],
)
def test_first_person_statements_become_typed_claims(
    text: str, expected: tuple[str, str | None, str | None, bool, bool]
) -> None:
    assert only_claim(text) == expected


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("I am on the Enterprise plan.", "account.plan", "enterprise"),
        ("I'm on the free tier.", "account.plan", "free"),
        ("We're on the Business Critical plan.", "account.plan", "business critical"),
        ("Our plan is Enterprise.", "account.plan", "enterprise"),
        ("My subscription is the Pro plan.", "account.plan", "pro"),
        ("I'm the account owner.", "account.role", "account owner"),
        ("I'm an admin of our workspace.", "account.role", "workspace admin"),
        ("I'm the billing contact.", "account.role", "billing contact"),
        ("I'm the CTO.", "employment.role", "cto"),
    ],
)
def test_plan_tier_and_role_statements_are_profile_facts(text: str, key: str, value: str) -> None:
    (candidate,) = claims({"text": text})

    assert (candidate.kind, candidate.claim_key, candidate.claim_value) == (
        MemoryKind.PROFILE_FACT,
        key,
        value,
    )


def test_plan_and_role_memories_read_as_statements_about_the_subject() -> None:
    said = "I am on the Enterprise plan. I'm the account owner. My tier is the Gold tier."

    assert [candidate.content for candidate in claims({"text": said})] == [
        "On the Enterprise plan",
        "Has the account owner role",
        "On the Gold tier",
    ]


def test_two_wordings_of_one_account_role_are_one_memory() -> None:
    (before,) = claims({"text": "I'm the account owner."})
    (after,) = claims({"text": "I'm the owner of the account."})

    assert before.memory_key == after.memory_key


@pytest.mark.parametrize(
    "text",
    [
        "I'm on the same plan as Bob.",
        "We upgraded to Postgres 16.",
        "Our plan is simple.",
        "I'm on the platform team.",
        "I'm an admin.",
    ],
)
def test_plans_and_account_roles_need_their_own_words(text: str) -> None:
    assert not [c for c in claims({"text": text}) if (c.claim_key or "").startswith("account.")]


def test_berlin_this_week_is_current_location_and_lisbon_is_home() -> None:
    berlin, lisbon = claims({"text": "I'm in Berlin this week. I live in Lisbon."})

    assert (berlin.kind, berlin.claim_key) == (MemoryKind.CURRENT_STATE, "location.current")
    assert (lisbon.kind, lisbon.claim_key) == (MemoryKind.PROFILE_FACT, "location.home_city")


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("I moved to Porto.", "location.home_city", "porto"),
        ("I now live in Porto.", "location.home_city", "porto"),
        ("I now work at Globex.", "employment.current_employer", "globex"),
        ("I just joined Globex.", "employment.current_employer", "globex"),
        ("We upgraded to the Enterprise plan.", "account.plan", "enterprise"),
        ("I'm now on the Pro tier.", "account.plan", "pro"),
        ("I'm now the CTO.", "employment.role", "cto"),
    ],
)
def test_change_phrases_mark_an_explicit_change(text: str, key: str, value: str) -> None:
    (candidate,) = claims({"text": text})

    assert (candidate.claim_key, candidate.claim_value) == (key, value)
    assert candidate.explicit_change


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("I no longer work at Acme.", "employment.current_employer", "acme"),
        ("I left Acme.", "employment.current_employer", "acme"),
        ("I don't use Vim.", "tools.used", "vim"),
        ("I've stopped using Slack.", "tools.used", "slack"),
        ("I no longer live in Lisbon.", "location.home_city", "lisbon"),
        ("I'm no longer on the Pro plan.", "account.plan", "pro"),
    ],
)
def test_negations_are_retractions_not_claims(text: str, key: str, value: str) -> None:
    (candidate,) = claims({"text": text})

    assert (candidate.claim_key, candidate.claim_value, candidate.negated) == (key, value, True)


def test_i_dont_use_vim_never_says_vim_is_used() -> None:
    assert not [
        c
        for c in claims({"text": "I don't use Vim."})
        if c.claim_key == "tools.used" and not c.negated
    ]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("I used to live in Paris.", "location.previous_city"),
        ("I lived in Paris.", "location.previous_city"),
        ("I used to work at Initech.", "employment.previous_employer"),
    ],
)
def test_past_tense_is_history_not_the_current_claim(text: str, key: str) -> None:
    (candidate,) = claims({"text": text})

    assert candidate.claim_key == key


def test_i_used_to_use_a_tool_claims_nothing() -> None:
    assert claims({"text": "I used to use Emacs."}) == []


@pytest.mark.parametrize(
    "text",
    [
        "He said 'I live in Paris'.",
        'She told me "I work at Acme".',
        "He wrote \u201cI live in Paris\u201d yesterday.",
        "If I moved to Rome I would learn Italian.",
        "Maybe I'll move to Rome.",
        "I might work at Globex next year.",
        "Do I live in Madrid?",
        "Should we use Postgres?",
        "I'm in a meeting.",
    ],
)
def test_quoted_hypothetical_and_interrogative_sentences_claim_nothing(text: str) -> None:
    assert claims({"text": text}) == []


def test_figures_with_a_rate_or_price_are_facts() -> None:
    (fact,) = claims({"text": "Stripe charges 2.9% + 30¢ per transaction."})

    assert fact.kind is MemoryKind.FACT
    assert fact.content == "Stripe charges 2.9% + 30¢ per transaction"
    assert fact.claim_key is None


def test_decisions_are_found_in_any_role() -> None:
    payload = {
        "messages": [
            {"role": "assistant", "content": "We decided to use Postgres for the queue."},
        ]
    }

    (decision,) = claims(payload)

    assert decision.kind is MemoryKind.DECISION
    assert decision.content == "We decided to use Postgres for the queue"


def test_only_the_subjects_own_messages_make_first_person_claims() -> None:
    payload = {
        "messages": [
            {"role": "user", "content": "I live in Lisbon."},
            {"role": "assistant", "content": "I live in Dublin, in a data centre."},
            {"role": "system", "content": "I work at OpenAI."},
        ]
    }

    assert [c.claim_value for c in claims(payload)] == ["lisbon"]


def test_connector_payloads_are_read_from_title_body_and_text() -> None:
    issue = {"title": "Rate limit is 100 requests per minute", "body": "I work at Acme."}
    slack = {"text": "I'm in Berlin this week", "channel": "C123"}

    assert [c.kind for c in claims(issue)] == [MemoryKind.FACT, MemoryKind.PROFILE_FACT]
    assert [c.claim_key for c in claims(slack)] == ["location.current"]


def test_two_claims_joined_by_and_are_both_found() -> None:
    found = claims({"text": "I use Neovim and I like Rust."})

    assert [(c.claim_key, c.claim_value) for c in found] == [
        ("tools.used", "neovim"),
        ("preferences.likes", "rust"),
    ]


def test_every_episode_gets_one_short_summary() -> None:
    long_text = "word " * 200
    (summary,) = [
        c
        for c in COMPILER.compile([view({"text": long_text}, source="slack")])
        if c.kind is MemoryKind.EPISODE_SUMMARY
    ]

    assert summary.content.startswith("slack note: word word")
    assert len(summary.content) <= len("slack note: ") + 160
    assert summary.source_episode_ids == (uuid.UUID(int=1),)


def test_candidates_carry_the_episode_time_and_id() -> None:
    (candidate,) = claims({"text": "I live in Lisbon."})

    assert candidate.valid_from == WHEN
    assert candidate.source_episode_ids == (uuid.UUID(int=1),)
    assert candidate.subject_id == "alice"


sentences = st.sampled_from(
    [
        "I live in Lisbon.",
        "I'm in Berlin this week.",
        "I don't use Vim.",
        "Stripe charges 2.9% + 30¢.",
        "We decided to ship on Friday.",
        "Maybe I'll move to Rome.",
        "hello there",
    ]
)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(sentences, min_size=1, max_size=4), min_size=1, max_size=4))
def test_compiling_is_deterministic_whatever_the_episode_order(
    texts: list[list[str]],
) -> None:
    episodes = [view({"text": " ".join(t)}, number=n) for n, t in enumerate(texts, start=1)]

    first = COMPILER.compile(episodes)
    second = COMPILER.compile(list(reversed(episodes)))

    assert first == second
    assert [c.memory_key for c in first] == [c.memory_key for c in second]


# Words the rules start with and look for, so that random clauses reach deep into the
# rule list, match late rules, and fail the proper-noun checks of early ones.
# fmt: off
_RULE_WORDS = (
    "i", "i'm", "i've", "we", "we're", "my", "the", "our", "a", "an", "am", "is", "was",
    "are", "have", "has", "no", "longer", "don't", "not", "left", "quit", "used", "to",
    "work", "at", "for", "live", "in", "moved", "now", "based", "prefer", "like", "love",
    "hate", "use", "using", "on", "plan", "tier", "subscription", "account", "owner",
    "admin", "of", "workspace", "deprecated", "decided", "agreed", "name", "call", "me",
    "favourite", "team", "project", "Lisbon", "Acme", "Enterprise", "vim", "Kafka",
)
# fmt: on


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_RULE_WORDS), min_size=1, max_size=9))
def test_the_one_pass_rule_finder_finds_the_first_rule_that_matches(words: list[str]) -> None:
    from memsync.compile.heuristic import _FIRST_RULE, _RULES

    clause = " ".join(words)
    expected = next((n for n, rule in enumerate(_RULES) if rule.pattern.search(clause)), None)
    assert _FIRST_RULE.first(clause) == expected


_CASED_WORDS = st.sampled_from(_RULE_WORDS).map(str.upper) | st.sampled_from(_RULE_WORDS).map(
    str.title
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(_RULE_WORDS) | _CASED_WORDS | st.text(st.characters(max_codepoint=127)),
        min_size=1,
        max_size=9,
    )
)
def test_a_caseless_pattern_matches_ascii_text_as_ignorecase_does(words: list[str]) -> None:
    from memsync.compile.heuristic import (
        _FACT_WORDS,
        _FIRST_RULE,
        _HYPOTHETICAL,
        _QUESTION_START,
        _RULES,
        _Caseless,
    )

    text = " ".join(words)
    patterns = [_FIRST_RULE.pattern, _FACT_WORDS, _HYPOTHETICAL, _QUESTION_START]
    for pattern in [*patterns, *(rule.pattern for rule in _RULES)]:
        for fast, folding in (
            (pattern.search(text), pattern.folding.search(text)),
            (pattern.match(text), pattern.folding.match(text)),
        ):
            assert (fast is None) == (folding is None), pattern.source
            if fast is not None and folding is not None:
                assert fast.span() == folding.span()
                assert fast.lastindex == folding.lastindex
                assert _Caseless.groups(fast, text) == {
                    name: value for name, value in folding.groupdict().items() if value
                }


@pytest.mark.parametrize("source", [r"^I live", "kelvin \u212a", "stra\u00dfe"])
def test_a_caseless_pattern_must_be_written_in_lowercase_ascii(source: str) -> None:
    from memsync.compile.heuristic import _Caseless

    with pytest.raises(ValueError, match="lowercase ASCII"):
        _Caseless.compile(source)


def test_a_caseless_pattern_keeps_capital_escapes_and_group_names() -> None:
    from memsync.compile.heuristic import _Caseless

    pattern = _Caseless.compile(r"(?P<Value>\S+) \W (?P=Value)")

    found = pattern.search("Lisbon - LISBON")
    assert found is not None
    assert _Caseless.groups(found, "Lisbon - LISBON") == {"Value": "Lisbon"}


PLAIN_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
"""Where a sentence ends, the plain way: after ``.``, ``!`` or ``?`` and spaces, or at
newlines. The compiler finds the same cuts faster (``_split_sentences``)."""


def plain_clauses(text: str) -> list[str]:
    """The clauses of ``text`` that may assert something, cut by the plain patterns and
    every check made on every clause: what the compiler's shortcuts must agree with."""
    from memsync.compile.heuristic import (
        _CLAUSE_SPLIT,
        _HYPOTHETICAL,
        _QUESTION_START,
        _QUOTED,
        _TYPOGRAPHIC,
    )

    found = []
    for sentence in PLAIN_SENTENCE_END.split(text.translate(_TYPOGRAPHIC)):
        stripped = sentence.strip()
        if not stripped or stripped.endswith("?"):
            continue
        unquoted = _QUOTED.sub(" ", stripped)
        if _HYPOTHETICAL.folding.search(unquoted):
            continue
        for clause in _CLAUSE_SPLIT.split(unquoted):
            cleaned = " ".join(clause.split()).rstrip(".!")
            if cleaned and not _QUESTION_START.folding.match(cleaned):
                found.append(cleaned)
    return found


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [*_RULE_WORDS, "and", "AND", "but", "So", "so", "\u017fo", '"quoted"', "'quoted'", ","]
        )
        | st.text(st.characters(max_codepoint=0x17F), max_size=6),
        min_size=1,
        max_size=12,
    )
)
def test_clauses_are_cut_as_the_patterns_alone_cut_them(words: list[str]) -> None:
    from memsync.compile.heuristic import _clauses

    text = " ".join(words)
    assert list(_clauses(text)) == plain_clauses(text)
