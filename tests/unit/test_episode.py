from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import rfc8785
from hypothesis import example, given
from hypothesis import strategies as st

from memsync.episode import (
    EpisodeDraft,
    IngestStatus,
    NotCanonicalJSON,
    Tombstone,
    canonical_json,
    classify,
    content_hash,
)

SAFE_INTEGERS = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
json_scalars = st.none() | st.booleans() | SAFE_INTEGERS | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=10,
)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_content_hash_ignores_key_order(payload: dict[str, object]) -> None:
    reordered = dict(reversed(list(payload.items())))
    assert content_hash(reordered) == content_hash(payload)


def test_canonical_json_has_sorted_keys_and_no_spaces() -> None:
    assert (
        canonical_json({"b": 1, "a": [1, {"d": 2, "c": "é"}]}) == '{"a":[1,{"c":"é","d":2}],"b":1}'
    )


def test_numerically_equal_values_hash_alike() -> None:
    assert content_hash({"score": 1}) == content_hash({"score": 1.0})
    assert content_hash({"ratio": 0.5}) == content_hash({"ratio": 5e-1})
    assert content_hash({"n": 1e21}) == content_hash({"n": 1.0e21})
    assert canonical_json({"score": 1.0, "nested": [2.50, -0.0]}) == (
        '{"nested":[2.5,0],"score":1}'
    )


def test_keys_sort_by_utf16_code_units_as_rfc_8785_says() -> None:
    # U+1F600 is a surrogate pair (D83D DE00) in UTF-16 and sorts before U+FB01.
    assert canonical_json({"\ufb01": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ufb01":1}'


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"x": float("nan")}, "nan"),
        ({"x": float("inf")}, "inf"),
        ({"id": 2**53}, "as strings"),
    ],
)
def test_values_json_cannot_hold_exactly_are_refused_with_a_reason(
    value: dict[str, object], named: str
) -> None:
    with pytest.raises(ValueError, match="RFC 8785") as refused:
        content_hash(value)
    assert named in str(refused.value)


json_without_fractions = st.recursive(
    st.none()
    | st.booleans()
    | SAFE_INTEGERS
    | st.text(alphabet=st.characters(max_codepoint=0xD7FF), max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.text(alphabet=st.characters(max_codepoint=0xD7FF), max_size=5), children, max_size=3
        )
    ),
    max_leaves=12,
)


@given(json_without_fractions)
def test_without_fractional_numbers_the_canonical_form_is_the_one_hashed_before(
    value: object,
) -> None:
    # Memory keys and every stored hash of such payloads stay what they were.
    before = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    assert canonical_json(value) == before


# Anything a caller may hand canonical_json: every JSON type at its edges (floats of
# every size, integers past the safe range, keys and strings beyond the BMP, lone
# surrogates) and what JSON does not have (tuples, datetimes, str subclasses).
anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats()
    | st.text(max_size=6)
    | st.text(alphabet=st.characters(codec=None, min_codepoint=0xD800, max_codepoint=0xE001))
    | st.sampled_from([IngestStatus.CREATED, datetime(2024, 1, 1, tzinfo=UTC)]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children)
        | st.dictionaries(
            st.text(max_size=4) | st.sampled_from(["\U0001f600", "\ufb01", "\ue000"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(anything)
@example({"\ufb01": 1, "\U0001f600": 2})  # code point and UTF-16 orders differ
@example([1.0, -0.0, 2.0**52, 0.1 + 0.2, 123.456, 1e-7, 9.99e-7, 1e-5])  # ECMAScript's forms
@example([1e-6])  # orjson writes 1e-6 to 1e-5 with an exponent, ECMAScript without
@example([5e-6])
@example([1e21, 2.0**53])  # integral, past the safe range
@example({"id": 2**53})  # past the safe range: refused
def test_canonical_json_is_rfc8785_whichever_encoder_writes_it(value: object) -> None:
    # canonical_json writes plain JSON with orjson and leaves the rest to rfc8785: the
    # answer, or the refusal, must be rfc8785's either way.
    try:
        expected: str | type[Exception] = rfc8785.dumps(value).decode("utf-8")
    except (rfc8785.CanonicalizationError, ValueError, TypeError, RecursionError):
        expected = NotCanonicalJSON
    try:
        written: str | type[Exception] = canonical_json(value)
    except NotCanonicalJSON:
        written = NotCanonicalJSON
    assert written == expected


def test_content_hash_changes_with_any_value() -> None:
    assert content_hash({"title": "Bug"}) != content_hash({"title": "Bug!"})


def test_classify_covers_the_three_outcomes() -> None:
    assert classify(None, "h1") is IngestStatus.CREATED
    assert classify("h1", "h1") is IngestStatus.DUPLICATE
    assert classify("h1", "h2") is IngestStatus.REVISED


def test_draft_hashes_its_payload() -> None:
    draft = EpisodeDraft(subject_id="s", source="api", type="note", payload={"x": 1})
    assert draft.content_hash == content_hash({"x": 1})


def test_a_tombstone_is_dated_only_by_an_aware_time() -> None:
    aware = datetime(2024, 3, 1, tzinfo=UTC)
    assert Tombstone("k", deleted_at=aware).deleted_at == aware
    with pytest.raises(ValueError, match="timezone-aware"):
        Tombstone("k", deleted_at=datetime(2024, 3, 1))
