"""A variable one connector names is needed only by the commands that use that
connector: every other command, and every other connector, works without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_cli import memsync
from tests.e2e.test_cli_sync import workspace_config

pytestmark = pytest.mark.slow

UNSET = "MEMSYNC_TEST_TICKETS_TOKEN_NEVER_SET"


@pytest.fixture
def config(tmp_path: Path, store_url: str) -> Path:
    """``ws`` (a workspace, needs nothing) and ``tickets`` (Zendesk, token from $UNSET)."""
    path = workspace_config(tmp_path, store_url)
    path.write_text(
        path.read_text()
        + "  - name: tickets\n    type: zendesk\n    subject: 'org:{organization_id}'\n"
        f"    subdomain: acme\n    email: bot@acme.test\n    token: ${{{UNSET}}}\n"
    )
    return path


def run(config: Path, *args: str) -> tuple[int, str, str]:
    result = memsync("--config", str(config), *args, cwd=config.parent)
    return result.returncode, result.stdout, result.stderr


def test_the_other_connector_syncs_and_checks(config: Path) -> None:
    synced, out, err = run(config, "sync", "ws", "--json")
    assert synced == 0, err
    assert json.loads(out)["created"] == 3
    checked, out, err = run(config, "check", "ws")
    assert checked == 0, err


@pytest.mark.parametrize("command", ["sync", "check"])
def test_using_the_connector_fails_in_one_line_naming_variable_connector_and_file(
    config: Path, command: str
) -> None:
    code, out, err = run(config, command, "tickets")

    assert code == 2
    assert err.strip() == (
        f"connector 'tickets' in {config}: token: environment variable {UNSET} is not set "
        f"(set it, or write ${{{UNSET}:-default}})"
    )
    assert out == ""


def test_commands_that_do_not_build_the_connector_work(config: Path) -> None:
    for args in (
        ("runs", "list", "--json"),
        ("compile", "--all", "--json"),
        ("state", "show", "ws", "--json"),
        ("state", "show", "tickets", "--json"),
        ("jobs", "list", "--json"),
    ):
        code, _, err = run(config, *args)
        assert code == 0, (args, err)
    # Its sync can be enqueued: a worker that has the variable runs it.
    code, job_id, err = run(config, "sync", "tickets", "--async")
    assert code == 0, err
    assert job_id.strip()


def test_config_show_and_validate_warn_and_strict_validate_refuses(config: Path) -> None:
    shown, out, err = run(config, "config", "show")
    assert shown == 0, err
    assert json.loads(out)["connectors"][1]["token"] == "***"
    validated, out, err = run(config, "config", "validate")
    assert validated == 0, err
    assert "configuration is valid" in out
    assert f"warning: connector 'tickets' in {config}: token: environment variable {UNSET}" in err

    strict, out, err = run(config, "config", "validate", "--strict")

    assert strict == 2
    assert f"{config}: connectors[1].token: environment variable {UNSET} is not set" in err
