"""The heuristic compiler's shortcuts on long texts change nothing it derives.

Two shortcuts (issue #30 part 3): the combined rule pattern without the "deprecated"
rule for clauses that lack the word, and the hypothetical and question checks made
only for clauses that yield a memory. Each is compared with the plain way, every
check on every clause and the whole pattern, on texts built from the rules' own words.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.compile import heuristic
from memsync.compile.heuristic import HeuristicCompiler
from memsync.compile.types import CandidateMemory, EpisodeView
from tests.unit.compile.test_heuristic import _CASED_WORDS, _RULE_WORDS

WORDS = st.lists(
    st.sampled_from([*_RULE_WORDS, "maybe", "if", "do", "should", ".", "?", "and", ",", "7"])
    | _CASED_WORDS
    | st.text(st.characters(max_codepoint=0x17F), max_size=6),
    min_size=1,
    max_size=24,
)


class PlainCompiler(HeuristicCompiler):
    """The compiler as it was: every clause ``_clauses`` yields, through the whole
    combined pattern."""

    def _episode(self, episode: EpisodeView) -> Any:
        texts = list(heuristic.passages(episode.payload))
        for passage in texts:
            for clause in heuristic._clauses(passage.text):
                candidate = self._clause(episode, clause, passage.speaks_for_subject)
                if candidate is not None:
                    yield candidate
        summary = self._summary(episode, texts)
        if summary is not None:
            yield summary


def derived(compiler: HeuristicCompiler, text: str) -> list[CandidateMemory]:
    episode = EpisodeView(
        id=uuid.UUID(int=1),
        subject_id="ana",
        source="chat",
        type="message",
        payload={"messages": [{"role": "user", "content": text}], "body": text},
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
    fast = heuristic._FIRST_RULE_NOT_DEPRECATED.match(clause)
    full = heuristic._FIRST_RULE.match(clause)
    assert (fast is None) == (full is None)
    if fast is not None and full is not None:
        assert fast.lastgroup == full.lastgroup


@settings(max_examples=400, deadline=None)
@given(st.lists(WORDS.map(" ".join), min_size=1, max_size=4))
def test_the_compiler_derives_what_every_check_on_every_clause_derives(
    sentences: list[str],
) -> None:
    text = ". ".join(sentences)
    assert derived(HeuristicCompiler(), text) == derived(PlainCompiler(), text)
