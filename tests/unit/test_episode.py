from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memsync.episode import EpisodeDraft, IngestStatus, canonical_json, classify, content_hash

json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
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


def test_content_hash_changes_with_any_value() -> None:
    assert content_hash({"title": "Bug"}) != content_hash({"title": "Bug!"})


def test_classify_covers_the_three_outcomes() -> None:
    assert classify(None, "h1") is IngestStatus.CREATED
    assert classify("h1", "h1") is IngestStatus.DUPLICATE
    assert classify("h1", "h2") is IngestStatus.REVISED


def test_draft_hashes_its_payload() -> None:
    draft = EpisodeDraft(subject_id="s", source="api", type="note", payload={"x": 1})
    assert draft.content_hash == content_hash({"x": 1})
