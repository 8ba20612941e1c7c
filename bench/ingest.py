"""Ingest throughput: N new episodes, then the same N again (all duplicates).

Each scenario runs in its own interpreter against a throwaway store, directly through
IngestService ("service") or through POST /v1/episodes/batch to a `memsync serve`
subprocess ("http"). Prints a Markdown table; see docs/benchmarks.md.

    python -m bench.ingest [--episodes 100000] [--db sqlite postgresql] [--via service http]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from datetime import datetime
from typing import Any

import httpx

from bench.common import (
    machine,
    memsync_server,
    peak_rss_mib,
    print_table,
    run_child,
    throwaway_store,
)
from memsync.episode import EpisodeDraft
from memsync.runtime.ingest import IngestService, IngestSummary
from memsync.runtime.storage import Store

BATCH = 1000


def episode_body(i: int) -> dict[str, Any]:
    """A GitHub-issue-sized episode (~400 bytes of payload)."""
    return {
        "subject_id": f"repo:acme/service-{i % 50}",
        "source": "github",
        "type": "issue.opened",
        "idempotency_key": f"github:acme:service-{i % 50}:issue:{i}:opened",
        "occurred_at": f"2026-0{1 + i % 9}-1{i % 10}T12:{i % 60:02d}:00Z",
        "payload": {
            "number": i,
            "title": f"Webhook retries ignore Retry-After ({i})",
            "body": "Steps to reproduce: send 429 with Retry-After: 30. " * 4,
            "labels": ["bug", "webhooks"],
            "state": "open",
        },
        "provenance": {"url": f"https://github.com/acme/service/issues/{i}"},
    }


def draft_of(body: dict[str, Any]) -> EpisodeDraft:
    return EpisodeDraft(
        subject_id=body["subject_id"],
        source=body["source"],
        type=body["type"],
        payload=body["payload"],
        idempotency_key=body["idempotency_key"],
        occurred_at=datetime.fromisoformat(body["occurred_at"]),
        provenance=body["provenance"],
    )


def via_service(url: str, count: int, _directory: str) -> dict[str, Any]:
    store = Store.from_url(url)
    service = IngestService(store, batch_size=BATCH)
    bodies = [episode_body(i) for i in range(count)]
    timings: dict[str, Any] = {}
    for phase in ("new", "duplicate"):
        # Building a draft canonicalises and hashes its payload: timed on its own, so
        # the table shows what the caller (a connector) pays and what ingest pays.
        started = time.perf_counter()
        drafts = [draft_of(body) for body in bodies]
        timings[f"{phase}_drafts"] = time.perf_counter() - started
        started = time.perf_counter()
        summary = IngestSummary.of(service.ingest("bench", drafts))
        timings[phase] = time.perf_counter() - started
        expected = count if phase == "new" else 0
        assert summary.created == expected, summary
    return {**timings, "peak_rss_mib": peak_rss_mib()}


def via_http(url: str, count: int, directory: str) -> dict[str, Any]:
    config = f"api:\n  max_batch_size: {BATCH}\n  max_body_bytes: 104857600\n"
    with (
        memsync_server(url, directory, config) as (base, pid),
        httpx.Client(base_url=base, timeout=120) as client,
    ):
        bodies = [episode_body(i) for i in range(count)]
        timings: dict[str, Any] = {}
        for phase in ("new", "duplicate"):
            started = time.perf_counter()
            created = 0
            for start in range(0, count, BATCH):
                response = client.post(
                    "/v1/episodes/batch", json={"episodes": bodies[start : start + BATCH]}
                )
                response.raise_for_status()
                created += response.json()["episodes_created"]
            timings[phase] = time.perf_counter() - started
            assert created == (count if phase == "new" else 0)
        return {**timings, "peak_rss_mib": peak_rss_mib(pid)}


def child(backend: str, via: str, count: int) -> None:
    with tempfile.TemporaryDirectory() as directory, throwaway_store(backend, directory) as url:
        run = via_service if via == "service" else via_http
        result = run(url, count, directory)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgresql"])
    parser.add_argument("--via", nargs="+", default=["service", "http"])
    parser.add_argument("--child", nargs=3, metavar=("DB", "VIA", "N"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.child:
        backend, via, count = arguments.child
        child(backend, via, int(count))
        return

    print(f"ingest benchmark: {arguments.episodes:,} episodes, batches of {BATCH}; {machine()}")
    rows = []
    for backend in arguments.db:
        for via in arguments.via:
            result = run_child("bench.ingest", [backend, via, str(arguments.episodes)])
            drafts = result.get("new_drafts")
            rows.append(
                (
                    backend,
                    via,
                    f"{arguments.episodes / result['new']:,.0f}",
                    f"{arguments.episodes / result['duplicate']:,.0f}",
                    "-" if drafts is None else f"{drafts * 1e6 / arguments.episodes:.1f}",
                    f"{result['peak_rss_mib']:.0f}",
                )
            )
    print_table(
        [
            "db",
            "via",
            "new episodes/s",
            "duplicate episodes/s",
            "draft+hash µs/episode",
            "peak RSS MiB",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
