from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.compile.similarity import (
    LexicalIndex,
    SimilarityThresholds,
    jaccard,
    matches,
    tokens,
)
from memsync.compile.types import MemoryKind


def test_tokens_are_casefolded_unicode_words_without_stopwords() -> None:
    assert tokens("I LIVE in Zürich, and the Straße is long") == {
        "live",
        "zürich",
        "strasse",
        "long",
    }


def test_figures_fold_into_one_number_token() -> None:
    assert tokens("Stripe charges 3.5% + 35¢") == tokens("Stripe charges 2.9% + 30¢")
    assert tokens("Stripe charges 2.9%") == {"stripe", "charges", "#"}


def test_negation_words_are_kept() -> None:
    assert "not" in tokens("the v1 API is not deprecated")


def test_jaccard_is_shared_over_distinct_words() -> None:
    assert jaccard(frozenset("abc"), frozenset("abd")) == 0.5
    assert jaccard(frozenset(), frozenset()) == 0.0


def test_a_score_equal_to_the_threshold_matches_and_one_just_below_does_not() -> None:
    three_of_five = (frozenset({"a", "b", "c", "d"}), frozenset({"a", "b", "c", "e"}))
    shared = {f"s{i}" for i in range(59)}
    fifty_nine_of_hundred = (
        frozenset(shared | {f"l{i}" for i in range(21)}),
        frozenset(shared | {f"r{i}" for i in range(20)}),
    )

    assert jaccard(*three_of_five) == 0.6
    assert matches(*three_of_five, 0.6)
    assert jaccard(*fifty_nine_of_hundred) == 0.59
    assert not matches(*fifty_nine_of_hundred, 0.6)
    assert matches(*fifty_nine_of_hundred, 0.59)


def test_thresholds_default_to_0_6_and_can_be_set_per_kind() -> None:
    thresholds = SimilarityThresholds(per_kind={MemoryKind.DECISION: 0.8})

    assert thresholds.for_kind(MemoryKind.FACT) == 0.6
    assert thresholds.for_kind(MemoryKind.DECISION) == 0.8


def test_a_threshold_outside_zero_to_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="kind fact must be in"):
        SimilarityThresholds(per_kind={MemoryKind.FACT: 1.5})


def test_index_returns_the_best_match_of_the_same_kind_only() -> None:
    index = LexicalIndex()
    index.add("fee", MemoryKind.FACT, tokens("Stripe charges 3.5% per transaction"))
    index.add("other", MemoryKind.FACT, tokens("Invoices are due in 30 days"))
    index.add("decision", MemoryKind.DECISION, tokens("Stripe charges 2.9% per transaction"))

    match = index.best_match(MemoryKind.FACT, tokens("Stripe charges 2.9% per transaction"), 0.6)

    assert match is not None
    assert (match.key, match.score) == ("fee", 1.0)


def test_index_forgets_removed_entries_and_ties_go_to_the_smaller_key() -> None:
    index = LexicalIndex()
    probe = tokens("rate limit 100 per minute")
    index.add("b", MemoryKind.FACT, probe)
    index.add("a", MemoryKind.FACT, probe)
    index.add("c", MemoryKind.FACT, probe)

    index.remove("a")
    index.remove("never-added")
    match = index.best_match(MemoryKind.FACT, probe, 0.6)

    assert match is not None
    assert match.key == "b"


def test_index_finds_nothing_without_a_shared_token() -> None:
    index = LexicalIndex()
    index.add("a", MemoryKind.FACT, tokens("rate limit"))

    assert index.best_match(MemoryKind.FACT, tokens("coffee beans"), 0.01) is None


_WORDS = st.sampled_from("abcdefgh")


@settings(max_examples=300, deadline=None)
@given(
    stored=st.dictionaries(
        st.text("xyz", min_size=1, max_size=3), st.frozensets(_WORDS, max_size=6), max_size=8
    ),
    probe=st.frozensets(_WORDS, max_size=6),
    threshold=st.sampled_from([0.01, 0.25, 1 / 3, 0.5, 0.59, 0.6, 2 / 3, 0.75, 0.99, 1.0]),
)
def test_best_match_is_the_best_of_an_exhaustive_scan(
    stored: dict[str, frozenset[str]], probe: frozenset[str], threshold: float
) -> None:
    index = LexicalIndex()
    for key, words in stored.items():
        index.add(key, MemoryKind.FACT, words)

    reaching = [
        (Fraction(len(probe & words), len(probe | words)), key)
        for key, words in stored.items()
        if probe and words and matches(probe, words, threshold)
    ]
    best = min(reaching, key=lambda pair: (-pair[0], pair[1]), default=None)

    found = index.best_match(MemoryKind.FACT, probe, threshold)
    expected = (best[1], float(best[0])) if best else None
    assert ((found.key, found.score) if found else None) == expected
