"""Token counting: cl100k_base from the file a package ships, never from the network."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from memsync.compile.tokenizer import CL100K, CharacterEstimate, default_counter


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
