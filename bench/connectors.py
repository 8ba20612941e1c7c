"""Connector throughput against the fake API servers, through the real client libraries.

GitHub: 10,000 issues with 30,000 comments in one repository, read by the GitHub
connector (PyGithub) with its issue, comment and event streams; and, on their own, its
``review_comments`` and ``timeline`` streams over 1,000 pull requests with 5 review
comments, 2 commits and a cross-reference each. Slack: 50,000 messages in one channel,
read by the Slack connector (slack-sdk). Zendesk: 2,000 tickets, each with one comment
and one status change, read by the Zendesk connector (declared on the HTTP base) over an
in-process ``httpx.MockTransport``; with ``--zendesk-baseline REV`` also by the
hand-written connector of git revision ``REV`` (loaded from ``git show``), in the same
run. Jira: 1,000 issues with 3,000 comments in two projects, read by the Jira connector
(on the HTTP base) from the fake Jira on loopback. Linear: 5,000 issues with 15,000
comments in one team, read by the Linear connector (httpx, GraphQL) from FakeLinear.
Each is fetched twice over the same window: a first sync, then a re-sync. Every record
goes through ``to_episode`` and the conformance kit's simulated ingest, so the table
shows that the re-sync creates nothing. Prints a Markdown table; see docs/benchmarks.md
("Connectors").

    python -m bench.connectors [--issues 10000] [--comments 30000] [--messages 50000]
        [--pulls 1000] [--tickets 2000] [--zendesk-baseline 09f198f]
        [--jira-issues 1000] [--jira-comments 3000]
        [--linear-issues 5000] [--linear-comments 15000]
        [--sources github,github-reviews,slack,zendesk,jira,linear]
    python -m bench.connectors --walk   # the Linear walk's requests over shapes of history
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import subprocess
import sys
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench.common import machine, print_table
from memsync.clock import FakeClock
from memsync.connectors.base import Connector, Window
from memsync.connectors.github import GitHubConfig, GitHubConnector
from memsync.connectors.github.fake_api import FakeGitHub
from memsync.connectors.jira import JiraConfig, JiraConnector
from memsync.connectors.jira.fake_api import FakeJira
from memsync.connectors.linear import LinearConfig, LinearConnector
from memsync.connectors.linear.fake_api import FakeLinear
from memsync.connectors.linear.walk import WindowWalk
from memsync.connectors.slack import SlackConfig, SlackConnector
from memsync.connectors.slack.fake_api import FakeSlack
from memsync.connectors.testing import SimulatedIngest
from memsync.connectors.tickets import ZendeskConfig, ZendeskConnector
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
        label = f"GitHub: {issues:,} issues + {comments:,} comments"
        streams = {"issues", "pull_requests", "reviews", "issue_comments", "issue_events"}
        return first_and_resync(label, github_reader(fake, streams), fake.request_count)


def github_review_rows(pulls: int) -> list[list[object]]:
    """The ``review_comments`` and ``timeline`` streams: ``pulls`` pull requests, each
    with 5 review comments, 2 commits and a mention from the pull request before it."""
    with FakeGitHub(token="t", start=GITHUB_START) as fake:
        moment = GITHUB_START
        for number in range(1, pulls + 1):
            moment += timedelta(seconds=10)
            fake.add_issue(
                "acme",
                "api",
                number,
                f"Change {number}",
                "Why: " * 8,
                is_pull_request=True,
                updated_at=moment,
            )
            for index in range(5):
                moment += timedelta(seconds=1)
                fake.add_review_comment(
                    "acme", "api", number, f"Note {index}: " + "rename this " * 6, created_at=moment
                )
            for index in range(2):
                moment += timedelta(seconds=1)
                fake.add_commit("acme", "api", number, f"Step {index}", committed_at=moment)
            if number > 1:
                moment += timedelta(seconds=1)
                fake.add_cross_reference(
                    "acme", "api", number, "acme", "api", number - 1, created_at=moment
                )
        label = f"GitHub: {pulls:,} PRs, review comments + timelines"
        reader = github_reader(fake, {"review_comments", "timeline"})
        return first_and_resync(label, reader, fake.request_count)


def github_reader(fake: FakeGitHub, streams: set[str]) -> Callable[[], GitHubConnector]:
    """A new GitHub connector on each call, reading ``streams`` of ``acme/api``."""
    config = GitHubConfig.model_validate(
        {
            "name": "bench",
            "repo": "acme/api",
            "token": "t",
            "base_url": fake.base_url,
            "subject": "repo:{repository}",
            "streams": sorted(streams),
        }
    )
    return lambda: GitHubConnector(config, sleeper=FakeSleeper(max_waits=0), clock=FakeClock())


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


ZENDESK_FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "zendesk"
ZENDESK_EXPORT_PAGE = 1000  # the incremental export's page size


class ZendeskExport:
    """The Zendesk API as an ``httpx.MockTransport``: the incremental ticket export
    (cursor pages of 1,000) and each ticket's comments and audits, every body the recorded
    fixture (tests/fixtures/zendesk, from developer.zendesk.com's API reference) with its
    ids and times changed. Counts the requests."""

    def __init__(self, tickets: int) -> None:
        def fixture(name: str) -> Any:
            return json.loads((ZENDESK_FIXTURES / name).read_text(encoding="utf-8"))

        [ticket] = fixture("incremental_tickets_cursor.json")["tickets"]
        self.tickets = [
            {**copy.deepcopy(ticket), "id": n, "updated_at": _iso(GITHUB_START, n)}
            for n in range(1, tickets + 1)
        ]
        self.comments = fixture("ticket_comments.json")
        self.audits = fixture("ticket_audits.json")
        self.requests = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        path = request.url.path
        if path.endswith("/comments.json"):
            return httpx.Response(200, json=self.comments)
        if path.endswith("/audits.json"):
            return httpx.Response(200, json=self.audits)
        offset = int(request.url.params.get("cursor", "0"))
        end = offset + ZENDESK_EXPORT_PAGE
        page = {
            "tickets": self.tickets[offset:end],
            "end_of_stream": end >= len(self.tickets),
            "after_cursor": str(end),
        }
        return httpx.Response(200, json=page)


def _iso(start: datetime, seconds: int) -> str:
    return (start + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def handwritten_zendesk(revision: str) -> type[Connector[Any, Any]]:
    """The Zendesk connector as ``revision`` wrote it (before the declarative base),
    loaded from git as a module of its own."""
    path = "memsync/connectors/tickets/zendesk.py"
    source = subprocess.run(
        ["git", "show", f"{revision}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("bench_zendesk_handwritten")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{revision}:{path}", "exec"), module.__dict__)
    connector: type[Connector[Any, Any]] = module.ZendeskConnector
    return connector


def zendesk_rows(tickets: int, baseline: str | None) -> list[list[object]]:
    export = ZendeskExport(tickets)
    config = ZendeskConfig(
        name="bench",
        subdomain="acme",
        email="bot@acme.example",
        token="bench-token",
        subject="org:{organization_id}",
    )
    label = f"Zendesk: {tickets:,} tickets"
    variants: list[tuple[str, type[Connector[Any, Any]]]] = [("declared", ZendeskConnector)]
    if baseline is not None:
        variants.insert(0, (f"hand-written ({baseline})", handwritten_zendesk(baseline)))

    def builder(cls: type[Connector[Any, Any]]) -> Callable[[], Connector[Any, Any]]:
        def build() -> Connector[Any, Any]:
            return cls(  # type: ignore[call-arg]
                config,
                transport=httpx.MockTransport(export.handle),
                sleeper=FakeSleeper(max_waits=0),
                clock=FakeClock(),
            )

        return build

    rows: list[list[object]] = []
    for name, cls in variants:
        rows += first_and_resync(f"{label}, {name}", builder(cls), lambda: export.requests)
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
    parser.add_argument("--pulls", type=int, default=1_000)
    parser.add_argument("--tickets", type=int, default=2_000)
    parser.add_argument("--zendesk-baseline", metavar="REV", default=None)
    parser.add_argument("--jira-issues", type=int, default=1_000)
    parser.add_argument("--jira-comments", type=int, default=3_000)
    parser.add_argument("--linear-issues", type=int, default=5_000)
    parser.add_argument("--linear-comments", type=int, default=15_000)
    parser.add_argument("--sources", default="github,github-reviews,slack,zendesk,jira,linear")
    parser.add_argument("--walk", action="store_true", help="simulate the Linear walk only")
    args = parser.parse_args()
    if args.walk:
        print_table(
            ["history", "records", "page size", "pages", "walk requests", "ratio"],
            walk_rows(),
        )
        return
    sources: dict[str, Callable[[], list[list[object]]]] = {
        "github": lambda: github_rows(args.issues, args.comments),
        "github-reviews": lambda: github_review_rows(args.pulls),
        "slack": lambda: slack_rows(args.messages),
        "zendesk": lambda: zendesk_rows(args.tickets, args.zendesk_baseline),
        "jira": lambda: jira_rows(args.jira_issues, args.jira_comments),
        "linear": lambda: linear_rows(args.linear_issues, args.linear_comments),
    }
    chosen = args.sources.split(",")
    rows = [row for name, build in sources.items() if name in chosen for row in build()]
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
