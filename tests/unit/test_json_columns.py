"""A JSON column is read back by orjson where it reads what the standard library reads,
and by ``json.loads`` elsewhere: the value, and each part's type, are ``json.loads``'s
for every document (issue #30)."""

from __future__ import annotations

import contextlib
import json
import math
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from memsync.runtime.storage.engine import _json_deserializer, _json_serializer

documents = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | st.text()
    | st.text(alphabet=st.characters(codec=None, min_codepoint=0xD7F0, max_codepoint=0xE010)),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


def same(read: Any, expected: Any) -> bool:
    """Equal as ``json.loads`` reads it: the same types all the way down (``1`` is not
    ``1.0``), NaN equal to NaN."""
    if type(read) is not type(expected):
        return False
    if isinstance(expected, float) and math.isnan(expected):
        return math.isnan(read)
    if isinstance(expected, dict):
        return list(read) == list(expected) and all(
            same(read[key], value) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return len(read) == len(expected) and all(map(same, read, expected))
    return bool(read == expected)


@given(documents)
@example({"id": 2**64 + 1, "small": 2**63 - 1})  # past orjson's 64 bits; at its edge
@example({"ratio": 0.1, "whole": 1.0, "tiny": 5e-324, "big": 1.7976931348623157e308})
@example(["\ud800", float("nan"), float("inf")])  # what orjson refuses to read
def test_a_json_column_reads_back_what_json_loads_reads(value: Any) -> None:
    written = [json.dumps(value), json.dumps(value, ensure_ascii=False)]
    with contextlib.suppress(ValueError):  # the store writes no NaN
        written.append(_json_serializer(value))
    for document in written:
        forms: list[str | bytes] = [document]
        # As psycopg hands it over; a lone surrogate, unescaped, has no UTF-8.
        with contextlib.suppress(UnicodeEncodeError):
            forms.append(document.encode())
        for form in forms:
            assert same(_json_deserializer(form), json.loads(form)), form
