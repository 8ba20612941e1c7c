"""The heuristic compiler's shortcuts on long texts change nothing it derives.

The shortcuts (issue #30 part 3): the combined rule pattern without the "deprecated"
rule for clauses that lack the word, the hypothetical and question checks made only for
clauses that yield a memory, and (second pass) sentences cut by a pattern that opens
with a set of characters instead of a look-behind. Third pass: the combined pattern's
rules grouped under the words they open with, sentences that cannot yield passed over
(``_MAY_YIELD``), and the summary cut from only the start of the text. Each is compared
with the plain way, every check on every clause, the rules tried one by one, the plain
sentence split and the whole text folded, on texts built from the rules' own words.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.compile import heuristic
from memsync.compile.heuristic import HeuristicCompiler
from memsync.compile.text import Passage
from memsync.compile.types import CandidateMemory, EpisodeView, in_episode_order
from tests.unit.compile.test_heuristic import (
    _CASED_WORDS,
    _RULE_WORDS,
    PLAIN_SENTENCE_END,
    plain_clauses,
)

WORDS = st.lists(
    st.sampled_from([*_RULE_WORDS, "maybe", "if", "do", "should", ".", "?", "and", ",", "7"])
    | _CASED_WORDS
    | st.text(st.characters(max_codepoint=0x17F), max_size=6),
    min_size=1,
    max_size=24,
)


def plain_summary_text(texts: list[Passage]) -> str:
    """The text a summary is cut from, the plain way: the first three passages folded
    whole."""
    return " ".join(" ".join(passage.text.split()) for passage in texts[:3])


def plain_first_rule(clause: str) -> int | None:
    """The first rule that matches ``clause``, the rules tried one by one."""
    return next((n for n, rule in enumerate(heuristic._RULES) if rule.pattern.search(clause)), None)


class PlainCompiler(HeuristicCompiler):
    """The compiler as it was: every clause the plain patterns cut, through the whole
    combined pattern, and the summary cut from the whole text."""

    def _episode(self, episode: EpisodeView) -> Any:
        texts = list(heuristic.passages(episode.payload))
        for passage in texts:
            for clause in plain_clauses(passage.text):
                candidate = self._clause(episode, clause, passage.speaks_for_subject)
                if candidate is not None:
                    yield candidate
        text = plain_summary_text(texts)
        if text:
            content = f"{episode.source} {episode.type}: {heuristic._summary_cut(text)}"
            yield self._candidate(episode, heuristic._SUMMARY_RULE, content, None)


def derived(
    compiler: HeuristicCompiler, text: str, *, assistant: str | None = None
) -> list[CandidateMemory]:
    messages = [{"role": "user", "content": text}]
    if assistant is not None:  # a passage that does not speak for the subject
        messages.append({"role": "assistant", "content": assistant})
    episode = EpisodeView(
        id=uuid.UUID(int=1),
        subject_id="ana",
        source="chat",
        type="message",
        payload={"messages": messages, "body": text},
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        revision=1,
        content_hash="h",
    )
    return compiler.compile([episode])


@settings(max_examples=400, deadline=None)
@given(WORDS)
def test_the_first_rule_without_deprecated_agrees_on_clauses_without_the_word(
    words: list[str],
) -> None:
    clause = " ".join(words)
    if not clause.isascii() or "deprecated" in clause.lower():
        return
    fast = heuristic._FIRST_RULE_NOT_DEPRECATED.first(clause)
    assert fast == heuristic._FIRST_RULE.first(clause)


@settings(max_examples=400, deadline=None)
@given(st.lists(WORDS.map(" ".join), min_size=1, max_size=4))
def test_the_compiler_derives_what_every_check_on_every_clause_derives(
    sentences: list[str],
) -> None:
    text = ". ".join(sentences)
    assert derived(HeuristicCompiler(), text) == derived(PlainCompiler(), text)


# Sentence ends, spaces of every kind (a newline inside a run of spaces, after a full
# stop or alone), and words.
SPLIT_TEXT = st.lists(
    st.sampled_from([".", "!", "?", "\n", "\n\n", " ", "  ", "\t", "\r", "\u2028", "\x85",
                     "\u3000", "a", "I", "live", "..", "?!", "'", '"', ","])
    | st.text(st.characters(max_codepoint=0x17F), max_size=4),
    max_size=30,
).map("".join)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(SPLIT_TEXT)
def test_sentences_are_cut_where_the_plain_pattern_cuts_them(text: str) -> None:
    assert heuristic._split_sentences(text) == PLAIN_SENTENCE_END.split(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(SPLIT_TEXT | WORDS.map(" ".join), min_size=1, max_size=6).map("".join))
def test_the_compiler_derives_what_the_plain_way_derives_across_lines(text: str) -> None:
    assert derived(HeuristicCompiler(), text) == derived(PlainCompiler(), text)


@settings(max_examples=200)
@given(
    moments=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=3),  # few moments: ties are common
            st.integers(min_value=0, max_value=2**128 - 1),
        ),
        max_size=30,
    )
)
def test_episodes_of_one_moment_are_ordered_by_id_as_their_text_orders_them(
    moments: list[tuple[int, int]],
) -> None:
    views = [
        EpisodeView(
            id=uuid.UUID(int=number),
            subject_id="ana",
            source="chat",
            type="message",
            payload={},
            occurred_at=datetime(2026, 3, 1, minute, tzinfo=UTC),
            revision=1,
            content_hash="h",
        )
        for minute, number in moments
    ]

    ordered = in_episode_order(views)

    assert ordered == sorted(views, key=lambda view: (view.occurred_at, str(view.id)))


# --- the rules grouped by their opening words -------------------------------------------

RULE_NUMBERS = range(len(heuristic._RULES))
RULE_NAMES = [rule.name for rule in heuristic._RULES]


@pytest.mark.parametrize("number", RULE_NUMBERS, ids=RULE_NAMES)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_rule_opens_with_its_words_and_the_finder_finds_it_as_the_rules_one_by_one(
    number: int, data: st.DataObject
) -> None:
    rule = heuristic._RULES[number]
    alphabet = st.characters(max_codepoint=0x7F) | st.characters(max_codepoint=0x17F)
    # Caseless, as the rule matches: "A" is the article its plan names may not be.
    caseless = re.compile(rule.pattern.source, re.IGNORECASE)
    matching = data.draw(st.from_regex(caseless, fullmatch=False, alphabet=alphabet))
    flips = data.draw(st.lists(st.booleans(), min_size=len(matching), max_size=len(matching)))
    cased = "".join(c.upper() if flip else c for c, flip in zip(matching, flips, strict=True))

    assert rule.pattern.match(matching)
    if rule.opens is not None:  # what ``opens`` promises, on text the rule matches
        opening = rf"(?:{'|'.join(rule.opens)})\b"
        assert re.match(opening, matching, re.IGNORECASE), (rule.opens, matching)
        assert heuristic._MAY_YIELD_FOR_SUBJECT.match(matching)
        if not rule.first_person:
            assert heuristic._MAY_YIELD.match(matching)
    # The deprecated rule may match what another rule matches: the first is reported.
    for clause in (matching, cased, matching + " is deprecated"):
        first = heuristic._FIRST_RULE.first(clause)
        assert first == plain_first_rule(clause)
        if clause.isascii() and "deprecated" not in clause.lower():
            assert heuristic._FIRST_RULE_NOT_DEPRECATED.first(clause) == first


# --- sentences that cannot yield passed over ----------------------------------------------

# Long texts of many sentences: the rules' words, figures, quotes, split words, the
# word "deprecated", questions, letters outside ASCII and typographic quotes.
SENTENCE = st.lists(
    st.sampled_from(
        [*_RULE_WORDS, "and", "but", "so", "And I", "but we", "so my", "7", "v2", "per",
         "ms", "'quoted'", '"quoted"', "I'm", "don't", "\u2019", "\u201c", "DEPRECATED",
         "decision:", "Decision", "please", "call", "our", "\u0131t", "\u017fo", "é", ",", "?",
         "!", "  ", "\t"]
    )
    | _CASED_WORDS
    | st.text(st.characters(max_codepoint=0x17F), max_size=4),
    min_size=1,
    max_size=14,
).map(" ".join)  # fmt: skip
LONG_TEXT = st.lists(
    st.tuples(SENTENCE, st.sampled_from([". ", "! ", "? ", "\n", ".\n\n", " ", ".  "])),
    min_size=1,
    max_size=12,
).map(lambda pairs: "".join(sentence + end for sentence, end in pairs))
# ASCII only, so that the passages are looked at for sentences to pass over.
ASCII_SENTENCE = st.lists(
    st.sampled_from([*_RULE_WORDS, "and", "but", "so", "7", "per", "'x'", '"x"', "I'm", ","])
    | _CASED_WORDS,
    min_size=1,
    max_size=12,
).map(" ".join)
ASCII_TEXT = st.lists(ASCII_SENTENCE, min_size=1, max_size=12).map(". ".join)
# Texts whose sentences are one clause (no "deprecated", few split words), so that the
# sentences are passed over unless they open as a rule opens or have a figure: the
# rules' words, figures and the words that make a figure a fact, fillers.
PLAIN_WORDS = [word for word in _RULE_WORDS if word != "deprecated"]
PLAIN_SENTENCE = st.lists(
    st.sampled_from([*PLAIN_WORDS, "the", "it", "build", "7", "42", "per", "ms", "users",
                     "limit", "costs", "decision:", "please", "our", "'x'", "I'm", ",",
                     "so I", "and we", "but my"])
    | _CASED_WORDS.filter(lambda word: word.lower() != "deprecated"),
    min_size=1,
    max_size=10,
).map(" ".join)  # fmt: skip
PLAIN_TEXT = st.lists(
    st.tuples(PLAIN_SENTENCE, st.sampled_from([". ", "! ", "? ", "\n", ".  ", " "])),
    min_size=1,
    max_size=12,
).map(lambda pairs: "".join(sentence + end for sentence, end in pairs))


@settings(max_examples=500, deadline=None)
@given(LONG_TEXT, LONG_TEXT | st.none())
def test_the_compiler_derives_what_the_plain_way_derives_from_long_texts(
    text: str, assistant: str | None
) -> None:
    fast = derived(HeuristicCompiler(), text, assistant=assistant)
    assert fast == derived(PlainCompiler(), text, assistant=assistant)


@settings(max_examples=500, deadline=None)
@given(ASCII_TEXT | PLAIN_TEXT, ASCII_TEXT | PLAIN_TEXT)
def test_the_compiler_derives_what_the_plain_way_derives_from_long_ascii_texts(
    text: str, assistant: str
) -> None:
    fast = derived(HeuristicCompiler(), text, assistant=assistant)
    assert fast == derived(PlainCompiler(), text, assistant=assistant)


# Split words next to the words a clause is split before, spaces of every kind, commas.
SPLIT_WORDS = st.lists(
    st.sampled_from(["so", "and", "but", "So", "AND", "i", "I", "I'm", "we", "We're", "my",
                     "me", "swe", "andi", "x", ",", " ", "  ", "\t", "\n", "\x1c", "."]),
    max_size=16,
).map(" ".join)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(SPLIT_WORDS | PLAIN_TEXT)
def test_a_passage_said_to_be_one_clause_a_sentence_has_no_split_and_no_deprecated(
    text: str,
) -> None:
    if not text.isascii() or not heuristic._one_clause_each(text):
        return
    for sentence in heuristic._split_sentences(text):
        stripped = sentence.strip()
        if '"' not in stripped and "'" not in stripped:
            assert heuristic._CLAUSE_SPLIT.split(stripped) == [stripped]
            assert "deprecated" not in stripped.lower()


@settings(max_examples=500, deadline=None)
@given(ASCII_TEXT | PLAIN_TEXT, st.booleans())
def test_a_sentence_passed_over_yields_nothing(text: str, speaks_for_subject: bool) -> None:
    may_yield = heuristic._MAY_YIELD_FOR_SUBJECT if speaks_for_subject else heuristic._MAY_YIELD
    kept = {sentence for sentence, _ in heuristic._sentences(text, may_yield)}
    compiler = HeuristicCompiler()
    episode = EpisodeView(
        id=uuid.UUID(int=1),
        subject_id="ana",
        source="chat",
        type="message",
        payload={},
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        revision=1,
        content_hash="h",
    )
    for sentence, clauses in heuristic._sentences(text):
        if sentence not in kept:
            for clause in clauses:
                assert compiler._clause(episode, clause, speaks_for_subject) is None, clause


# --- the summary cut from the start of the text -------------------------------------------

# Passages around the cut: words and runs of spaces of every kind, long enough to cross
# it, so that folding the spaces shrinks a text below it or not.
SUMMARY_PASSAGE = st.lists(
    st.sampled_from(["a", "bb", "word", "x" * 40, " ", "  ", " " * 30, " " * 170, "\t\n" * 90,
                     "\t", "\n \n", "\u3000"])
    | st.text(st.characters(max_codepoint=0x17F), max_size=5),
    max_size=80,
).map("".join)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(st.lists(SUMMARY_PASSAGE, max_size=5), st.integers(min_value=0, max_value=200))
def test_the_summary_is_cut_from_the_start_as_from_the_whole_text(
    texts: list[str], pad: int
) -> None:
    passages = [Passage(("w " * pad)[:pad] + text, True) for text in texts]
    plain = plain_summary_text(passages)
    fast = heuristic._summary_text(passages)
    assert plain.startswith(fast)
    assert (fast == "") == (plain == "")
    assert heuristic._summary_cut(fast) == heuristic._summary_cut(plain)
