"""Connector throughput against the fake API servers, through the real client libraries.

GitHub: 10,000 issues with 30,000 comments in one repository, read by the GitHub
connector (PyGithub). Slack: 50,000 messages in one channel, read by the Slack connector
(slack-sdk). Jira: 1,000 issues with 3,000 comments in two projects, read by the Jira
connector (httpx) from the fake Jira. Each is fetched twice over the same window: a
first sync, then a re-sync.
Every record goes through ``to_episode`` and the conformance kit's simulated ingest, so
the table shows that the re-sync creates nothing. Prints a Markdown table; see
docs/benchmarks.md ("Connectors").

    python -m bench.connectors [--issues 10000] [--comments 30000] [--messages 50000]
        [--jira-issues 1000] [--jira-comments 3000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import machine, print_table
from memsync.clock import FakeClock
from memsync.connectors.base import Connector, Window
from memsync.connectors.github import GitHubConfig, GitHubConnector
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.jira import JiraConfig, JiraConnector
from memsync.connectors.jira.fake_api import FakeJira
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


def jira_rows(issues: int, comments: int) -> list[list[object]]:
    with FakeJira(time_zone="Europe/Lisbon") as fake:
        ids = [
            fake.add_issue("ENG" if n % 2 else "OPS", f"Issue {n}", "Steps: " * 8).id
            for n in range(issues)
        ]
        for index in range(comments):
            fake.add_comment(ids[index % issues], f"Comment {index}: " + "details " * 10)
        config = JiraConfig(
            name="bench",
            site="acme",
            email="bot@acme.example",
            token="jira-token",
            base_url=fake.base_url,
            projects=("ENG", "OPS"),
        )
        return first_and_resync(
            f"Jira: {issues:,} issues + {comments:,} comments",
            lambda: JiraConnector(config, sleeper=FakeSleeper(max_waits=0), clock=FakeClock()),
            fake.request_count,
        )


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
    parser.add_argument("--jira-issues", type=int, default=1_000)
    parser.add_argument("--jira-comments", type=int, default=3_000)
    parser.add_argument(
        "--only", choices=("github", "slack", "jira"), help="one source instead of all"
    )
    args = parser.parse_args()
    sources = {
        "github": lambda: github_rows(args.issues, args.comments),
        "slack": lambda: slack_rows(args.messages),
        "jira": lambda: jira_rows(args.jira_issues, args.jira_comments),
    }
    rows = [row for name, build in sources.items() if args.only in (None, name) for row in build()]
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
