"""A memory's key is the SHA-256 of the RFC 8785 form of its identity, whatever the text."""

from __future__ import annotations

import hashlib
import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memsync.compile.types import MemoryKind, fold, memory_key, normalise_text
from memsync.episode import NotCanonicalJSON, canonical_json

# Every code point a payload can carry, control characters and astral planes included;
# lone surrogates are the canonicaliser's to refuse, tested below.
texts = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


def canonical_key(
    subject_id: str,
    kind: MemoryKind,
    claim_key: str | None,
    claim_value: str | None,
    content: str,
    negated: bool,
) -> str:
    identity = (
        ["claim", claim_key, normalise_text(claim_value or "")]
        if claim_key is not None
        else ["content", normalise_text(content)]
    )
    parts = [subject_id, str(kind), identity, negated]
    return hashlib.sha256(canonical_json(parts).encode("utf-8")).hexdigest()


@settings(max_examples=300, deadline=None)
@given(
    subject_id=texts,
    kind=st.sampled_from(list(MemoryKind)),
    claim=st.none() | st.tuples(texts, texts),
    content=texts,
    negated=st.booleans(),
)
def test_memory_key_is_the_hash_of_the_canonical_identity(
    subject_id: str,
    kind: MemoryKind,
    claim: tuple[str, str] | None,
    content: str,
    negated: bool,
) -> None:
    claim_key, claim_value = claim if claim is not None else (None, None)
    key = memory_key(
        subject_id,
        kind,
        claim_key=claim_key,
        claim_value=claim_value,
        content=content,
        negated=negated,
    )
    assert key == canonical_key(subject_id, kind, claim_key, claim_value, content, negated)


def test_memory_key_of_a_lone_surrogate_is_refused_as_not_canonical() -> None:
    with pytest.raises(NotCanonicalJSON):
        memory_key("ana", MemoryKind.FACT, claim_key=None, claim_value=None, content="a\ud800")


@settings(max_examples=300, deadline=None)
@given(texts | st.text(st.characters(max_codepoint=127)))
def test_fold_is_nfkc_casefold(text: str) -> None:
    assert fold(text) == unicodedata.normalize("NFKC", text).casefold()


# Every character str.isspace() knows, and neighbours that are not spaces.
_SPACES = "".join(chr(code) for code in range(0x3100) if chr(code).isspace()) + "\u200b\ufeff"


@settings(max_examples=300, deadline=None)
@given(texts | st.text(st.sampled_from(_SPACES + "ab.,'\" "), max_size=20))
def test_normalise_text_collapses_what_a_regular_expression_calls_space(text: str) -> None:
    folded = unicodedata.normalize("NFKC", text).casefold()
    expected = re.sub(r"\s+", " ", folded).strip(" \t\n.,;:!?\"'`()[]{}")
    assert normalise_text(text) == expected
