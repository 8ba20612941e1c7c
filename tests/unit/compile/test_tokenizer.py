"""Token counting: cl100k_base from the file a package ships, never from the network."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from memsync.compile.tokenizer import (
    CL100K,
    CharacterEstimate,
    RememberingCounter,
    default_counter,
)


def test_the_default_counter_is_cl100k_with_known_counts() -> None:
    counter = default_counter()

    assert counter.name == CL100K
    assert counter.count("hello world") == 2
    assert counter.count("") == 0
    # Special-token markers are text like any other, not a refusal.
    assert counter.count("<|endoftext|>") > 1


def test_the_encoding_loads_with_no_network_and_an_empty_cache(tmp_path: Path) -> None:
    probe = textwrap.dedent(
        """
        import json, socket

        def refuse(*args, **kwargs):
            raise OSError("network disabled by the test")

        socket.socket.connect = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        from memsync.compile.tokenizer import default_counter

        counter = default_counter()
        print(json.dumps([counter.name, counter.count("Lives in Lisbon (since 2026-01-01)")]))
        """
    )
    cache = tmp_path / "empty-cache"
    cache.mkdir()
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        env={"TIKTOKEN_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin"},
    )

    assert completed.returncode == 0, completed.stderr
    name, count = json.loads(completed.stdout)
    assert name == CL100K
    assert count == default_counter().count("Lives in Lisbon (since 2026-01-01)")


def test_the_estimate_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert CharacterEstimate().count("abcde") == 2
    assert CharacterEstimate().count("") == 0


class CountingEstimate(CharacterEstimate):
    def __init__(self) -> None:
        self.asked: list[str] = []

    def count(self, text: str) -> int:
        self.asked.append(text)
        return super().count(text)


def test_a_remembering_counter_counts_alike_and_asks_once_per_text() -> None:
    inner = CountingEstimate()
    counter = RememberingCounter(inner, capacity=2)

    texts = ["abcde", "abcde", "xy", "abcde", "zzz", "xy"]

    counts = [counter.count(text) for text in texts]

    assert counts == [CharacterEstimate().count(text) for text in texts]
    assert inner.asked == ["abcde", "xy", "zzz", "xy"]  # full at two texts: it started over
    assert counter.name == inner.name
