"""Log options of every command, as a user runs them: the format, the level, library
noise, and no secret in any line."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from memsync.connectors.github.fake_api import FakeGitHub
from tests.e2e.test_cli import memsync
from tests.e2e.test_cli_sync import workspace_config, write_config
from tests.helpers import log_lines

pytestmark = pytest.mark.slow


def test_off_a_terminal_every_line_is_json_with_the_run_context(
    tmp_path: Path, store_url: str
) -> None:
    config = workspace_config(tmp_path, store_url)
    result = memsync("--config", str(config), "sync", "ws", "--json", cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    lines = log_lines(result.stderr)
    assert {"sync run started", "sync run finished"} <= {line["event"] for line in lines}
    for line in lines:
        assert {"timestamp", "level", "event", "logger"} <= line.keys(), line
        assert line["timestamp"].endswith("Z"), line
    run_lines = [line for line in lines if line["event"].startswith("sync run")]
    assert {(line["tenant"], line["connector"]) for line in run_lines} == {("default", "ws")}


def test_console_format_and_level_come_from_options_or_the_environment(
    tmp_path: Path, store_url: str
) -> None:
    config = workspace_config(tmp_path, store_url)
    console = memsync(
        "--config", str(config), "sync", "ws", cwd=tmp_path,
        env={"MEMSYNC_LOG_FORMAT": "console"},
    )  # fmt: skip
    quiet = memsync("--config", str(config), "--log-level", "warning", "sync", "ws", cwd=tmp_path)

    assert console.returncode == 0, console.stderr
    assert "sync run finished" in console.stderr
    assert not console.stderr.lstrip().startswith("{")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""


def test_migrations_say_nothing_at_info_and_speak_at_debug(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'fresh.db'}"
    quiet = memsync("db", "upgrade", cwd=tmp_path, env={"MEMSYNC_STORE": store})
    store = f"sqlite:///{tmp_path / 'other.db'}"
    chatty = memsync(
        "--log-level", "debug", "db", "upgrade", cwd=tmp_path, env={"MEMSYNC_STORE": store}
    )

    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    alembic = [line for line in log_lines(chatty.stderr) if line["logger"].startswith("alembic")]
    assert alembic
    assert {line["level"] for line in alembic} == {"debug"}


def test_an_unknown_log_level_exits_2_naming_the_choices(tmp_path: Path) -> None:
    result = memsync("--log-level", "loud", "db", "upgrade", cwd=tmp_path)
    assert result.returncode == 2
    assert "debug, info, warning, error, critical" in result.stderr


def test_a_token_fed_through_a_failing_sync_appears_in_no_log_line(
    tmp_path: Path, store_url: str
) -> None:
    token = "ghp_" + "S3cr3tT0kenThatMustNeverBeLogged"
    with FakeGitHub(token="the-token-github-expects", start=datetime(2024, 3, 1, tzinfo=UTC)) as (
        fake
    ):
        fake.add_issue("acme", "api", 1, "Issue 1", "body")
        config = write_config(
            tmp_path,
            store_url,
            "  - name: gh\n"
            "    type: github\n"
            "    repo: acme/api\n"
            "    token: ${GH_TOKEN}\n"
            f"    base_url: {fake.base_url}\n"
            '    subject: "repo:{repository}"\n',
        )
        result = memsync(
            "--config", str(config), "--log-level", "debug", "--log-format", "json",
            "sync", "gh", cwd=tmp_path, env={"GH_TOKEN": token},
        )  # fmt: skip

    assert result.returncode == 1, result.stdout + result.stderr
    assert "HTTP 401" in result.stdout  # the run failed on the refused token
    lines = log_lines(result.stderr)
    assert any(line["event"] == "sync run finished" for line in lines)
    # The HTTP client's debug lines, which name the request, are among them.
    assert any(line["logger"].startswith("urllib3") for line in lines)
    for text in (*result.stderr.splitlines(), *result.stdout.splitlines()):
        assert token not in text
        assert "S3cr3tT0ken" not in text
