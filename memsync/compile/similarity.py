"""Lexical similarity: the fallback that finds contradictions between unkeyed memories.

Tokeniser (``tokens``), in order:

1. Unicode NFKC normalisation and ``casefold`` ("Straße" → "strasse").
2. Split into Unicode word runs (``\\w+``): letters, digits and underscores of any
   script; everything else separates words.
3. Every run made only of digits becomes the single token ``#``. Two statements that
   differ only in their figures ("charges 3.5%" / "charges 2.9%") are about the same
   thing with different values, which is exactly the contradiction worth catching.
4. Drop the stopwords in ``STOPWORDS``: a short, fixed list of English function words
   that make unrelated sentences look alike ("I have a …").

Score: Jaccard overlap of the two token *sets*, ``len(A & B) / len(A | B)``, 0.0 when both are
empty. A pair matches when ``score >= threshold``, compared exactly as fractions so a
threshold of 0.6 means three shared words out of five, not 0.6 ± rounding.

Cost: ``LexicalIndex`` is an inverted index from token to memory, per kind, probed with
*prefix filtering*: a stored set B can reach ``J(A, B) >= t`` only if it shares at least
``ceil(t * |A|)`` tokens with the probe A, so it must contain one of A's
``|A| - ceil(t * |A|) + 1`` rarest tokens (pigeonhole). Only those tokens' postings are
read, and a length filter (``t * |A| <= |B| <= |A| / t``) drops the rest before any
overlap is computed. Common tokens ("#", "service") therefore never make a lookup scan
the whole kind: a compile costs in proportion to the new memories and the postings of
rare tokens, not to the square of the store.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from memsync.compile.types import MemoryKind, fold

__all__ = [
    "DEFAULT_THRESHOLD",
    "STOPWORDS",
    "LexicalIndex",
    "LexicalMatch",
    "SimilarityThresholds",
    "jaccard",
    "matches",
    "tokens",
]

DEFAULT_THRESHOLD = 0.6

# "not" and "no" are deliberately kept: they are what makes two sentences disagree.
_STOPWORD_TEXT = """
a an the and or but if of to in on at by for with from as is are was were be been being
am i me my we our us you your he his she her it its they their them this that these
those have has had do does did so than then there here
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())

_WORD = re.compile(r"\w+")
NUMBER_TOKEN = "#"


@functools.lru_cache(maxsize=4096)
def tokens(text: str) -> frozenset[str]:
    """Return the token set of ``text`` as described in the module docstring.

    Cached (the most recent texts): the resolver tokenises a new memory's content to
    contest it and again to index it."""
    folded = fold(text)
    words = (NUMBER_TOKEN if word.isdigit() else word for word in _WORD.findall(folded))
    return frozenset(word for word in words if word not in STOPWORDS)


def _overlap(left: frozenset[str], right: frozenset[str]) -> Fraction:
    union = len(left | right)
    return Fraction(len(left & right), union) if union else Fraction(0)


def jaccard(left: frozenset[str], right: frozenset[str]) -> float:
    """Jaccard overlap of two token sets, in [0, 1]."""
    return float(_overlap(left, right))


def matches(left: frozenset[str], right: frozenset[str], threshold: float) -> bool:
    """True when the overlap is at least ``threshold``, compared exactly.

    The threshold is read as the decimal a person wrote (:func:`_as_written`), so 3/5
    matches 0.6 and 59/100 does not.
    """
    return _overlap(left, right) >= _as_written(threshold)


@functools.cache
def _as_written(threshold: float) -> Fraction:
    """``threshold`` as the exact decimal its shortest repr spells. Cached: a resolver
    asks for it once per candidate, and a config holds a handful of thresholds."""
    return Fraction(str(threshold))


@dataclass(frozen=True, slots=True)
class SimilarityThresholds:
    """Jaccard threshold per memory kind; kinds not listed use ``default``."""

    default: float = DEFAULT_THRESHOLD
    per_kind: Mapping[MemoryKind, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        settings: dict[str, float] = {"default": self.default}
        settings.update({f"kind {kind}": value for kind, value in self.per_kind.items()})
        for where, value in settings.items():
            if not 0.0 < value <= 1.0:
                raise ValueError(f"similarity threshold for {where} must be in (0, 1], got {value}")

    def for_kind(self, kind: MemoryKind) -> float:
        return self.per_kind.get(kind, self.default)


@dataclass(frozen=True, slots=True)
class LexicalMatch:
    """A stored entry whose overlap with a probe reached the threshold."""

    key: str
    score: float


class LexicalIndex:
    """Inverted index of token sets, partitioned by kind, keyed by an opaque string.

    Adding a key twice replaces its tokens; removing an absent key does nothing.
    """

    def __init__(self) -> None:
        self._postings: dict[MemoryKind, dict[str, set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self._entries: dict[str, tuple[MemoryKind, frozenset[str]]] = {}

    def add(self, key: str, kind: MemoryKind, text_tokens: frozenset[str]) -> None:
        self.remove(key)
        self._entries[key] = (kind, text_tokens)
        for token in text_tokens:
            self._postings[kind][token].add(key)

    def remove(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        kind, text_tokens = entry
        for token in text_tokens:
            self._postings[kind][token].discard(key)

    def best_match(
        self,
        kind: MemoryKind,
        probe: frozenset[str],
        threshold: float,
        exclude: Iterable[str] = (),
    ) -> LexicalMatch | None:
        """Return the highest-scoring entry of ``kind`` at or above ``threshold``.

        Ties are broken by the smaller key so the answer never depends on insertion
        order. Only entries that can reach the threshold are scored (see the module
        docstring); the comparison is exact, in integers.
        """
        if not probe:
            return None
        limit = _as_written(threshold)
        # Plain ints throughout: Fraction arithmetic costs more than the set
        # intersections it guards. ceil(t * size) and floor(size / t), exactly:
        numerator, denominator = limit.numerator, limit.denominator
        size = len(probe)
        required = -(-numerator * size // denominator)
        shortest, longest = required, size * denominator // numerator
        postings = self._postings[kind]
        rarest_first = sorted(probe, key=lambda token: (len(postings.get(token, ())), token))
        candidates: set[str] = set()
        for token in rarest_first[: size - required + 1]:
            candidates.update(postings.get(token, ()))
        candidates.difference_update(exclude)

        entries = self._entries
        best: tuple[int, int, str] | None = None  # (shared, union, key)
        for key in candidates:
            stored = entries[key][1]
            stored_size = len(stored)
            if stored_size < shortest or stored_size > longest:
                continue
            shared = len(probe & stored)
            union = size + stored_size - shared
            if shared * denominator < numerator * union:
                continue
            if best is None or _better(shared, union, key, best):
                best = (shared, union, key)
        return None if best is None else LexicalMatch(best[2], best[0] / best[1])


def _better(shared: int, union: int, key: str, best: tuple[int, int, str]) -> bool:
    """Higher overlap wins (compared as exact fractions), then the smaller key."""
    left, right = shared * best[1], best[0] * union
    return left > right or (left == right and key < best[2])
