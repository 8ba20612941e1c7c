"""Connector throughput against the fake API servers, through the real client libraries.

GitHub: 10,000 issues with 30,000 comments in one repository, read by the GitHub
connector (PyGithub). Slack: 50,000 messages in one channel, read by the Slack connector
(slack-sdk). Linear: 5,000 issues with 15,000 comments in one team, read by the Linear
connector (httpx, GraphQL) from FakeLinear. Each is fetched twice over the same
window: a first sync, then a re-sync.
Every record goes through ``to_episode`` and the conformance kit's simulated ingest, so
the table shows that the re-sync creates nothing. Prints a Markdown table; see
docs/benchmarks.md ("Connectors").

    python -m bench.connectors [--issues 10000] [--comments 30000] [--messages 50000]
        [--linear-issues 5000] [--linear-comments 15000] [--sources github,slack,linear]
    python -m bench.connectors --walk   # the Linear walk's requests over shapes of history
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import machine, print_table
from memsync.clock import FakeClock
from memsync.connectors.base import Connector, Window
from memsync.connectors.github import GitHubConfig, GitHubConnector
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.linear import LinearConfig, LinearConnector
from memsync.connectors.linear.fake_api import FakeLinear
from memsync.connectors.linear.walk import WindowWalk
from memsync.connectors.slack import SlackConfig, SlackConnector
from memsync.connectors.slack.fake_api import FakeSlack
from memsync.connectors.testing import SimulatedIngest
from memsync.stopping import FakeSleeper

GITHUB_START = datetime(2024, 1, 1, tzinfo=UTC)
SLACK_START_TS = 1_700_000_000
END = datetime(2030, 1, 1, tzinfo=UTC)
RUNS = ("first", "re-sync")


def measure(
    make_connector: Callable[[], Connector[Any, Any]],
    request_count: Callable[[], int],
    store: SimulatedIngest,
) -> dict[str, Any]:
    """One sync of the whole window: fetch, map and simulated ingest."""
    connector = make_connector()
    requests_before = request_count()
    started = time.perf_counter()
    outcomes = store.sync(connector, connector.fetch(Window(None, END), None))
    elapsed = time.perf_counter() - started
    records = sum(outcomes.values())
    return {
        "records": records,
        "seconds": elapsed,
        "records_per_s": records / elapsed,
        "requests": request_count() - requests_before,
        "created": outcomes["created"],
        "duplicate": outcomes["duplicate"],
        "revised": outcomes["revised"],
    }


def first_and_resync(
    label: str, make_connector: Callable[[], Connector[Any, Any]], request_count: Callable[[], int]
) -> list[list[object]]:
    """Two syncs of the same window into one store: the table rows for both."""
    store = SimulatedIngest()
    return [row(label, run, measure(make_connector, request_count, store)) for run in RUNS]


def github_rows(issues: int, comments: int) -> list[list[object]]:
    with FakeGitHub(token="t", start=GITHUB_START) as fake:
        for number in range(1, issues + 1):
            fake.add_issue(
                "acme",
                "api",
                number,
                f"Issue {number}",
                "Steps to reproduce: " * 8,
                updated_at=GITHUB_START + timedelta(seconds=number),
            )
        for index in range(comments):
            fake.add_comment(
                "acme",
                "api",
                index % issues + 1,
                f"Comment {index}: " + "details " * 10,
                created_at=GITHUB_START + timedelta(days=1, seconds=index),
            )
        config = GitHubConfig(
            name="bench",
            repo="acme/api",
            token="t",
            base_url=fake.base_url,
            subject="repo:{repository}",
        )
        label = f"GitHub: {issues:,} issues + {comments:,} comments"
        return first_and_resync(
            label,
            lambda: GitHubConnector(config, sleeper=FakeSleeper(max_waits=0), clock=FakeClock()),
            fake.request_count,
        )


def slack_rows(messages: int) -> list[list[object]]:
    with FakeSlack(token="xoxb-bench", start_ts=SLACK_START_TS) as fake:
        fake.add_channel("C1", "general")
        for index in range(messages):
            fake.post_message("C1", f"Message {index}: " + "deploy notes " * 6)
        config = SlackConfig(
            name="bench",
            token="xoxb-bench",
            channels=["C1"],
            base_url=f"{fake.base_url}/api",
            subject="slack:{channel}",
        )
        return first_and_resync(
            f"Slack: {messages:,} messages",
            lambda: SlackConnector(config, sleeper=FakeSleeper(max_waits=0), clock=FakeClock()),
            fake.request_count,
        )


def linear_rows(issues: int, comments: int) -> list[list[object]]:
    """Issues a minute apart over ``issues`` minutes, comments spread over them; read
    with Linear's default page size (50) through the oldest-first walk."""
    with FakeLinear(token="lin_api_bench") as fake:
        fake.add_team("ENG")
        made = [
            fake.add_issue(
                "ENG",
                f"Issue {number}",
                description="Steps to reproduce: " * 8,
                at=GITHUB_START + timedelta(minutes=number),
            )
            for number in range(issues)
        ]
        for index in range(comments):
            fake.add_comment(
                made[index % issues].id,
                f"Comment {index}: " + "details " * 10,
                at=GITHUB_START + timedelta(minutes=index % issues, seconds=1 + index // issues),
            )
        config = LinearConfig(
            name="bench",
            token="lin_api_bench",
            base_url=fake.base_url,
            start=GITHUB_START,
        )
        label = f"Linear: {issues:,} issues + {comments:,} comments"
        return first_and_resync(
            label,
            lambda: LinearConnector(config, sleeper=FakeSleeper(max_waits=0), clock=FakeClock()),
            fake.request_count,
        )


def walk_requests(times: list[datetime], start: datetime, end: datetime, page_size: int) -> int:
    """Requests the Linear connector's walk makes over a list answering newest first,
    simulated (no server): one per sub-window asked, plus the pages of an instant that
    holds more than a page."""
    newest_first = sorted(times, reverse=True)
    walk = WindowWalk.over(start, end, page_size)
    requests = 0
    while not walk.done:
        asked = walk.next()
        requests += 1
        matching = [moment for moment in newest_first if asked.start <= moment <= asked.end]
        if len(matching) <= page_size:
            walk.read_to_end(len(matching))
        elif not walk.page_overflowed(matching[page_size - 1]):
            requests += -(-(len(matching) - page_size) // page_size)
            walk.read_to_end(page_size)
    return requests


def walk_rows(records: int = 5_000, page_size: int = 100, days: int = 60) -> list[list[object]]:
    """The walk's requests against the minimum (one per page) for three shapes of a
    history of ``records`` over ``days``: spread evenly, mostly recent, weekly bursts."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    end = start + timedelta(days=days)
    chance = random.Random(1)
    shapes = {
        "spread evenly": lambda: start + timedelta(seconds=chance.uniform(0, days * 86_400)),
        "mostly recent (mean age 5 days)": lambda: (
            end - timedelta(seconds=min(chance.expovariate(1 / (5 * 86_400)), days * 86_400))
        ),
        "weekly bursts of an hour": lambda: (
            start
            + timedelta(days=chance.choice(range(0, days, 7)), seconds=chance.uniform(0, 3_600))
        ),
    }
    rows: list[list[object]] = []
    for shape, draw in shapes.items():
        times = [draw() for _ in range(records)]
        minimum = -(-records // page_size)
        requests = walk_requests(times, start, end, page_size)
        rows.append(
            [shape, f"{records:,}", page_size, minimum, requests, f"{requests / minimum:.2f}"]
        )
    return rows


def row(label: str, run: str, result: dict[str, Any]) -> list[object]:
    return [
        label,
        run,
        f"{result['records']:,}",
        f"{result['seconds']:.2f}",
        f"{result['records_per_s']:,.0f}",
        result["requests"],
        f"{result['created']:,}",
        f"{result['duplicate']:,}",
        result["revised"],
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--issues", type=int, default=10_000)
    parser.add_argument("--comments", type=int, default=30_000)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--linear-issues", type=int, default=5_000)
    parser.add_argument("--linear-comments", type=int, default=15_000)
    parser.add_argument("--sources", default="github,slack,linear")
    parser.add_argument("--walk", action="store_true", help="simulate the Linear walk only")
    args = parser.parse_args()
    if args.walk:
        print_table(
            ["history", "records", "page size", "pages", "walk requests", "ratio"],
            walk_rows(),
        )
        return
    sources = set(args.sources.split(","))
    rows = []
    if "github" in sources:
        rows += github_rows(args.issues, args.comments)
    if "slack" in sources:
        rows += slack_rows(args.messages)
    if "linear" in sources:
        rows += linear_rows(args.linear_issues, args.linear_comments)
    print(f"Machine: {machine()}\n")
    print_table(
        [
            "source",
            "sync",
            "records",
            "s",
            "records/s",
            "requests",
            "created",
            "duplicate",
            "revised",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
