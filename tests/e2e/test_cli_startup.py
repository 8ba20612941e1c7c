"""The command line starts fast because it imports only what a command uses.

Timing is measured in ``bench/cli.py`` (docs/benchmarks.md, "CLI start-up"); these
tests hold the cause in place instead: after each light command, the heavy libraries
it has no use for are not even imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

# Runs the command as ``memsync`` does, then names every module it imported.
PROBE = """
import json, sys
from memsync.runtime.app.cli import main
try:
    main(sys.argv[1:])
except SystemExit as stopped:
    assert stopped.code in (0, None), stopped.code
print("\\n" + json.dumps(sorted(sys.modules)))
"""

HTTP_STACK = {"fastapi", "starlette", "uvicorn", "jinja2"}
SOURCE_CLIENTS = {"github", "requests", "slack_sdk", "httpx"}
SERVER_ONLY = {"prometheus_client", "apscheduler", "tiktoken"}
STORE = {"sqlalchemy", "alembic", "psycopg"}
# structlog (with the rich traceback and Pygments it imports) is for a log line, and
# SQLAlchemy's ORM for mapped classes, which the schema does not use.
LOG_PIPELINE = {"structlog", "pygments"}
EVERYTHING_HEAVY = HTTP_STACK | SOURCE_CLIENTS | SERVER_ONLY | STORE
# A built-in connector's implementation (its records, parsing and client code), as
# opposed to its declaration and config model, which validating and listing read.
CONNECTOR_IMPLEMENTATIONS = {
    "memsync.connectors.github.connector",
    "memsync.connectors.slack.connector",
    "memsync.connectors.tickets.zendesk",
    "memsync.connectors.workspace.connector",
}


def imported_by(arguments: list[str], cwd: Path) -> set[str]:
    """The modules the command imported, and the top-level packages they are in."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    completed = subprocess.run(
        [sys.executable, "-c", PROBE, *arguments],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    modules = json.loads(completed.stdout.splitlines()[-1])
    return set(modules) | {name.split(".")[0] for name in modules}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A SQLite store, migrated, and connectors of three types, two of them naming a
    token that is not set (the probe leaves out every ``$MEMSYNC_`` variable)."""
    path = tmp_path / "memsync.yaml"
    path.write_text(
        f"store: sqlite:///{tmp_path}/memsync.db\n"
        "connectors:\n"
        f"  - {{name: ws, type: workspace, subject: 'ws:{{workspace_id}}', root: '{tmp_path}'}}\n"
        "  - {name: gh, type: github, subject: 'repo:{repo}', repo: acme/api,"
        " token: '${MEMSYNC_STARTUP_TEST_GITHUB_TOKEN}'}\n"
        "  - {name: chat, type: slack, subject: 'channel:{channel}',"
        " channels: [C123], token: '${MEMSYNC_STARTUP_TEST_SLACK_TOKEN}'}\n"
    )
    imported_by(["--config", str(path), "db", "upgrade"], tmp_path)
    return path


def test_help_and_version_import_no_library_a_command_would_use(tmp_path: Path) -> None:
    for arguments in (["--help"], ["--version"]):
        loaded = imported_by(arguments, tmp_path)
        assert loaded & (EVERYTHING_HEAVY | {"pydantic", "yaml", "structlog"}) == set()


@pytest.mark.parametrize(
    "command", [["config", "show"], ["config", "validate"], ["connectors", "list"]]
)
def test_commands_that_read_only_the_configuration_open_no_store(
    config: Path, command: list[str]
) -> None:
    loaded = imported_by(["--config", str(config), *command], config.parent)
    assert loaded & (EVERYTHING_HEAVY | LOG_PIPELINE) == set()


@pytest.mark.parametrize(
    "command", [["config", "show"], ["config", "validate"], ["connectors", "list"]]
)
def test_commands_that_print_plain_text_import_no_rich(config: Path, command: list[str]) -> None:
    loaded = imported_by(["--config", str(config), *command], config.parent)

    assert "pydantic" in loaded  # the probe sees what the command imports
    assert "rich" not in loaded


@pytest.mark.parametrize(
    "command", [["config", "show"], ["config", "validate"], ["connectors", "list"]]
)
def test_validating_and_listing_connectors_reads_their_declarations_only(
    config: Path, command: list[str]
) -> None:
    loaded = imported_by(["--config", str(config), *command], config.parent)

    # The probe sees the declarations it read (the configuration names these three).
    assert {
        "memsync.connectors.github.declaration",
        "memsync.connectors.slack.declaration",
        "memsync.connectors.workspace.declaration",
    } <= loaded
    assert loaded & CONNECTOR_IMPLEMENTATIONS == set()
    if command != ["connectors", "list"]:  # which imports the class of ``fake``, not declared
        assert loaded & {"memsync.connectors.base", "memsync.connectors.retry"} == set()


@pytest.mark.parametrize("command", [["runs", "list"], ["jobs", "list"], ["state", "show", "ws"]])
def test_commands_over_the_store_load_no_http_stack_and_no_other_connector(
    config: Path, command: list[str]
) -> None:
    loaded = imported_by(["--config", str(config), *command], config.parent)

    assert "sqlalchemy" in loaded  # the probe sees what the command imports
    # The store is at head already: checking that needs no Alembic.
    assert loaded & (HTTP_STACK | SOURCE_CLIENTS | SERVER_ONLY | {"alembic"}) == set()
    # Nothing is logged: the log pipeline is set up but structlog is not imported.
    assert loaded & LOG_PIPELINE == set()
    assert "sqlalchemy.orm" not in loaded
    # A SQLite store needs no PostgreSQL dialect: the schema names none (its JSON type
    # and partial indexes choose per store), and it costs a sixth of SQLAlchemy's import.
    assert "sqlalchemy.dialects.postgresql" not in loaded
    # The registry imports the connector types the configuration names, no other.
    assert not any(name.startswith("memsync.connectors.tickets") for name in loaded)


def test_showing_the_state_of_a_connector_whose_streams_its_configuration_names_builds_none(
    config: Path,
) -> None:
    loaded = imported_by(["--config", str(config), "state", "show", "ws"], config.parent)

    assert "memsync.connectors.registry" in loaded  # the probe sees the configuration read
    # A workspace reads one stream: its config model says so, and the connector is not
    # imported to ask it (tests/unit/connectors/test_registry.py holds the two equal).
    assert loaded & CONNECTOR_IMPLEMENTATIONS == set()
    assert "memsync.connectors.base" not in loaded


@pytest.mark.parametrize("command", [["runs", "list"], ["jobs", "list"]])
def test_listing_runs_or_jobs_parses_no_connector(config: Path, command: list[str]) -> None:
    loaded = imported_by(["--config", str(config), *command], config.parent)

    assert "sqlalchemy" in loaded  # the probe sees what the command imports
    # The secret scrubber learns the connectors' secrets when it first scrubs; a
    # command that logs nothing and fails nowhere reads no connector's declaration.
    assert not any(name.endswith(".declaration") for name in loaded)
    assert "memsync.connectors.registry" not in loaded  # nor reads an entry point
    # nor builds the connectors' config models (the configuration's own need none).
    assert "memsync.connectors.config" not in loaded
    assert loaded & {"memsync.connectors.workspace", "memsync.connectors.github"} == set()


@pytest.mark.parametrize(
    "command",
    [
        # Nine columns do not fit a pipe's 80: one block of plain text a run (none here).
        ["runs", "list"],
        # Tables that fit a pipe are drawn as rich draws them, without rich.
        ["jobs", "list"],
        ["state", "show", "ws"],
    ],
)
def test_tables_printed_to_a_pipe_import_no_rich(config: Path, command: list[str]) -> None:
    loaded = imported_by(["--config", str(config), *command], config.parent)

    assert "sqlalchemy" in loaded  # the probe sees what the command imports
    assert "rich" not in loaded


@pytest.mark.parametrize("command", [["runs", "list"], ["state", "show", "ws"]])
def test_reading_run_records_and_state_defines_nothing_a_run_writes_with(
    config: Path, command: list[str]
) -> None:
    loaded = imported_by(["--config", str(config), *command], config.parent)

    assert "memsync.runtime.sync.repository" in loaded  # the probe sees the records read
    # What a run hands the repository (its owner and plan, its counts, stream outcomes,
    # backfill slices) and what removing data reports: dataclasses, each about half a
    # millisecond of start-up to define, that reading needs none of.
    assert loaded & {"memsync.runtime.sync.plans", "memsync.runtime.app.removals"} == set()
    # nor the connectors' request-retry machinery, which a built connector uses.
    assert loaded & {"memsync.connectors.retry", "memsync.connectors.base"} == set()


# Runs the command, then names the tables the schema built (each is built when first
# named: docs/architecture.md, "Start-up").
TABLES_PROBE = """
import json, sys
from memsync.runtime.app.cli import main
from memsync.runtime.storage import schema
try:
    main(sys.argv[1:])
except SystemExit as stopped:
    assert stopped.code in (0, None), stopped.code
print("\\n" + json.dumps(sorted(schema._metadata.tables)))
"""


@pytest.mark.parametrize("command", [["runs", "list"], ["state", "show", "ws"]])
def test_reading_run_records_and_state_builds_no_backfill_or_webhook_table(
    config: Path, command: list[str]
) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    completed = subprocess.run(
        [sys.executable, "-c", TABLES_PROBE, "--config", str(config), *command],
        cwd=config.parent,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert completed.returncode == 0, completed.stderr
    built = set(json.loads(completed.stdout.splitlines()[-1]))
    assert "sync_runs" in built  # the probe sees the tables the command read
    # ``ws`` has no webhook: its state reads no deliveries.
    assert built & {"backfills", "backfill_slices", "webhook_deliveries"} == set()


# Runs the command as ``memsync`` does (its entry point), then says what the collector
# was left doing.
COLLECTOR_PROBE = """
import gc, json, sys
from memsync.runtime.app.entry import main
sys.argv = ["memsync", *sys.argv[1:]]
try:
    main()
except SystemExit as stopped:
    assert stopped.code in (0, None), stopped.code
print("\\n" + json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""


@pytest.mark.parametrize("command", [["--help"], ["config", "validate"], ["runs", "list"]])
def test_the_entry_point_collects_again_after_start_up_whatever_the_command(
    config: Path, command: list[str]
) -> None:
    completed = subprocess.run(
        [sys.executable, "-c", COLLECTOR_PROBE, "--config", str(config), *command],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert completed.returncode == 0, completed.stderr
    collector = json.loads(completed.stdout.splitlines()[-1])
    assert collector["enabled"]
    # Start-up's objects (about 96,000 for `runs list`) are frozen out of collections.
    assert collector["frozen"] > 10_000
