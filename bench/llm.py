"""LLM compile against a fake model with a fixed latency, at several concurrencies.

    python -m bench.llm [--episodes 800] [--latency 0.3] [--concurrency 1 4 16]
                        [--rpm 3000] [--db sqlite]

For each concurrency: a fresh store, N episodes of one subject ingested (not timed),
then one compile through the LLM compiler (batches of 8 episodes a request) against
:class:`~memsync.runtime.compiling.fake_model.FakeModel` on 127.0.0.1 answering after
``latency`` seconds, with ``requests_per_minute`` set to ``--rpm``. Prints wall time,
requests/s, the speed-up over the first concurrency, the most requests the fake saw in
any 60-second and any 1-second window (against the limit), and the tokens reported.
"""

from __future__ import annotations

import argparse
import bisect
import tempfile
import time
from datetime import UTC, datetime, timedelta

from pydantic import SecretStr

from bench.common import machine, print_table, throwaway_store
from memsync.clock import FakeClock
from memsync.episode import EpisodeDraft
from memsync.runtime.compiling import CompileService, LLMSettings
from memsync.runtime.compiling.fake_model import FakeModel
from memsync.runtime.ingest import IngestService
from memsync.runtime.storage import Store

START = datetime(2026, 1, 1, tzinfo=UTC)


def most_within(arrivals: list[float], seconds: float) -> int:
    """The most arrivals in any half-open window of ``seconds``."""
    ordered = sorted(arrivals)
    counts = (
        bisect.bisect_left(ordered, first + seconds) - index for index, first in enumerate(ordered)
    )
    return max(counts, default=0)


def run(backend: str, episodes: int, latency: float, concurrency: int, rpm: int) -> list[object]:
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        store = Store.from_url(url)
        IngestService(store).ingest(
            "t1",
            [
                EpisodeDraft(
                    "ana",
                    "chat",
                    "note",
                    {"text": f"Note {number}: I joined Acme and use tool {number}."},
                    idempotency_key=f"n{number}",
                    occurred_at=START + timedelta(minutes=number),
                )
                for number in range(episodes)
            ],
        )
        with FakeModel(latency=latency) as model:
            llm = LLMSettings(
                base_url=model.api_base,
                model="fake-extractor",
                api_key=SecretStr("sk-bench"),
                max_concurrency=concurrency,
                requests_per_minute=rpm,
            )
            service = CompileService(store, llm=llm, clock=FakeClock(START + timedelta(days=30)))
            started = time.perf_counter()
            result = service.compile("t1", "ana")
            seconds = time.perf_counter() - started
            arrivals = list(model.arrivals)
        store.dispose()
    assert result.episodes_compiled == episodes
    assert result.llm is not None
    return [
        concurrency,
        episodes,
        result.llm.requests,
        f"{seconds:.2f}",
        f"{result.llm.requests / seconds:.1f}",
        seconds,
        f"{most_within(arrivals, 60.0)} / {rpm}",
        f"{most_within(arrivals, 1.0)} / {rpm / 60:g}",
        result.llm.prompt_tokens + result.llm.completion_tokens,
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=800)
    parser.add_argument("--latency", type=float, default=0.3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rpm", type=int, default=3000)
    parser.add_argument("--db", default="sqlite")
    arguments = parser.parse_args()
    rows = [
        run(arguments.db, arguments.episodes, arguments.latency, concurrency, arguments.rpm)
        for concurrency in arguments.concurrency
    ]
    baseline = float(str(rows[0][5]))
    for row in rows:
        row[5] = f"{baseline / float(str(row[5])):.1f}x"
    print(f"{machine()}; fake model latency {arguments.latency}s; store {arguments.db}")
    print_table(
        (
            "concurrency",
            "episodes",
            "requests",
            "s",
            "requests/s",
            "speed-up",
            "most in 60 s / limit",
            "most in 1 s / limit/60",
            "tokens",
        ),
        rows,
    )


if __name__ == "__main__":
    main()
