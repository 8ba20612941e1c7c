"""`memsync sync` with the GitHub connector, end to end: the CLI in a subprocess, PyGithub
against the fake GitHub on loopback, the real store. A secondary rate limit past the
retry cap ends the run partial (exit 3); the next run completes it without duplicates."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from memsync.connectors.github.fake_api import FakeGitHub
from memsync.runtime.storage import Store

pytestmark = pytest.mark.slow


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub(token="t", start=datetime(2024, 3, 1, tzinfo=UTC)) as server:
        for number in range(1, 251):
            server.add_issue("acme", "api", number, f"Issue {number}", "body")
        server.add_comment("acme", "api", 7, "seen it too")
        yield server


def sync(config: Path, store_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    environment["MEMSYNC_STORE"] = store_url
    environment["GH_TEST_TOKEN"] = "t"
    return subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), "sync", "gh"],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


def episode_keys(store_url: str) -> list[str]:
    store = Store.from_url(store_url)
    try:
        with store.read() as connection:
            rows = connection.execute(sa.text("SELECT idempotency_key FROM episodes"))
            return [row[0] for row in rows]
    finally:
        store.dispose()


def test_a_rate_limit_past_the_cap_is_partial_and_the_next_run_completes(
    fake: FakeGitHub, store_url: str, tmp_path: Path
) -> None:
    config = tmp_path / "memsync.yaml"
    config.write_text(
        "connectors:\n"
        "  - name: gh\n"
        "    type: github\n"
        "    repo: acme/api\n"
        "    token: ${GH_TEST_TOKEN}\n"
        f"    base_url: {fake.base_url}\n"
        '    subject: "repo:{repository}"\n'
        "    retry:\n"
        "      max_attempts: 2\n"
    )
    # The third page of issues answers "secondary rate limit" more times than the cap.
    limit = fake.script_rate_limit(
        "secondary", path=r"/issues$", on_request_number=3, times=3, retry_after=0
    )

    cut_short = sync(config, store_url, tmp_path)
    assert cut_short.returncode == 3, cut_short.stdout + cut_short.stderr
    assert "partial" in cut_short.stdout
    stored_after_partial = episode_keys(store_url)
    assert 0 < len(stored_after_partial) < 251

    completed = sync(config, store_url, tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert limit.served == 3
    keys = episode_keys(store_url)
    assert len(keys) == len(set(keys)) == 251  # 250 issues and one comment, each once


def check(config: Path, token: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    environment["GH_TEST_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "memsync", "--config", str(config), "check", "gh"],
        cwd=cwd, env=environment, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("token", "reachable", "exit_code", "said"),
    [
        ("t", True, 0, "gh (github): reached;"),
        ("wrong", True, 1, "gh: refused:"),
        ("t", False, 4, "gh: no answer:"),
    ],
)
def test_check_reaches_the_source_once_and_says_what_answered(
    fake: FakeGitHub, tmp_path: Path, token: str, reachable: bool, exit_code: int, said: str
) -> None:
    base_url = fake.base_url if reachable else "http://127.0.0.1:1"
    config = tmp_path / "memsync.yaml"
    config.write_text(
        f"store: sqlite:///{tmp_path}/memsync.db\n"
        "connectors:\n  - name: gh\n    type: github\n    repo: acme/api\n"
        "    token: ${GH_TEST_TOKEN}\n"
        f"    base_url: {base_url}\n"
        '    subject: "repo:{repository}"\n    retry: {max_attempts: 1}\n'
    )
    result = check(config, token, tmp_path)
    assert result.returncode == exit_code, result.stderr
    assert said in result.stdout + result.stderr
    if token == "wrong":
        assert "wrong" not in result.stdout + result.stderr  # a token is never printed


def test_an_upstream_error_quoting_the_token_is_printed_and_stored_scrubbed(
    store_url: str, tmp_path: Path
) -> None:
    token = "ghp_abcdefghijklmnop0123"
    with FakeGitHub(token=token, start=datetime(2024, 3, 1, tzinfo=UTC)) as server:
        server.add_issue("acme", "api", 1, "x")
        server.script_error(400, message=f"echo: Authorization: token {token}", times=5)
        config = tmp_path / "memsync.yaml"
        config.write_text(
            "connectors:\n  - name: gh\n    type: github\n    repo: acme/api\n"
            "    token: ${GH_TOKEN}\n"
            f"    base_url: {server.base_url}\n"
            '    subject: "repo:{repository}"\n'
        )
        os.environ["GH_TOKEN"] = token
        try:
            result = sync(config, store_url, tmp_path)
        finally:
            del os.environ["GH_TOKEN"]

    assert result.returncode == 1, result.stdout + result.stderr
    assert token not in result.stdout + result.stderr
    assert "Authorization: token ***" in result.stdout
    store = Store.from_url(store_url)
    try:
        with store.read() as connection:
            stored = connection.execute(sa.text("SELECT error FROM sync_runs")).scalar_one()
    finally:
        store.dispose()
    assert token not in stored
