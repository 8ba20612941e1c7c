"""Run history says what happened: the mode of each run, tables that stay readable in
80 columns, and ids shortened to a unique prefix wherever the CLI takes one."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path

from click.testing import Result
from fastapi.testclient import TestClient
from rich.console import Console
from typer.testing import CliRunner

from memsync.clock import FakeClock
from memsync.runtime.app.api.app import create_app
from memsync.runtime.app.cli import app as cli_app
from memsync.runtime.app.cli.common import print_table
from memsync.runtime.app.config import Settings
from memsync.runtime.app.services import Services
from memsync.runtime.storage import Store
from memsync.runtime.sync import RunKind
from tests.helpers import API_NOW, LOOPBACK, compile_subject, notes_config, say


def cli(config: Path, *args: str) -> Result:
    # Not a terminal: rich's console is 80 columns wide, as in a pipe.
    return CliRunner().invoke(cli_app, ["--config", str(config), *args])


def test_each_run_records_its_mode_and_the_api_and_cli_show_it(
    tmp_path: Path, store_url: str, store: Store
) -> None:
    config = notes_config(tmp_path, store_url)
    settings = Settings.model_validate({"store": store_url, **_connectors(config)})
    clock = FakeClock(API_NOW)
    services = Services(settings, store, clock)

    incremental = services.run_sync(services.connector("notes"))
    clock.advance(timedelta(minutes=1))
    full = services.run_sync(services.connector("notes"), full_refresh=True)
    shown = cli(config, "runs", "show", str(full.id)[:8])
    listed = TestClient(create_app(services), base_url=LOOPBACK).get("/v1/runs").json()

    assert (incremental.kind, full.kind) == (RunKind.INCREMENTAL, RunKind.FULL_REFRESH)
    assert shown.output.startswith(f"full_refresh run {full.id} of notes")
    assert [run["kind"] for run in listed["runs"]] == ["full_refresh", "incremental"]


def _connectors(config: Path) -> dict[str, object]:
    import yaml

    loaded = yaml.safe_load(config.read_text())
    return {"connectors": loaded["connectors"]}


def test_runs_list_at_80_columns_is_a_block_per_run_with_nothing_squeezed(
    tmp_path: Path, store_url: str
) -> None:
    config = notes_config(tmp_path, store_url)
    synced = json.loads(cli(config, "sync", "notes", "--json").stdout)

    narrow = cli(config, "runs", "list")
    wide = Console(width=250, file=io.StringIO())
    print_table("runs", ("id", "kind", "status"), [(synced["id"], "incremental", "ok")], out=wide)

    assert narrow.exit_code == 0, narrow.output
    assert max(len(line) for line in narrow.output.splitlines()) <= 80
    lines = narrow.output.splitlines()
    assert f"id {synced['id']}" in lines
    assert "  kind:       incremental" in lines
    assert "  created:    2" in lines
    # Wide enough, it is a table: one line per run, the whole id in it.
    wide_output = wide.file.getvalue()  # type: ignore[attr-defined]
    [row] = [line for line in wide_output.splitlines() if synced["id"] in line]
    assert "incremental" in row


def test_conflicts_resolve_takes_unique_prefixes_of_the_conflict_and_the_memory(
    tmp_path: Path, store_url: str, store: Store
) -> None:
    config = notes_config(tmp_path, store_url)
    client = TestClient(create_app(Services(Settings(store=store_url), store)), base_url=LOOPBACK)
    say(client, "r1", "Stripe charges 3.5% + 35¢ per card payment.", 1)
    say(client, "r2", "Stripe charges 2.9% + 30¢ per card payment.", 5)
    compile_subject(client)
    [conflict] = client.get("/v1/conflicts").json()["conflicts"]
    keep, lose = conflict["memory_ids"][1], conflict["memory_ids"][0]

    empty = cli(config, "conflicts", "resolve", conflict["id"][:6], "--keep", "")
    not_hex = cli(config, "conflicts", "resolve", "xyz", "--keep", keep[:8])
    resolved = cli(config, "conflicts", "resolve", conflict["id"][:8], "--keep", keep[:8])

    assert empty.exit_code == 2
    assert "is not the start of an id" in empty.output  # an empty prefix names nothing
    assert not_hex.exit_code == 2
    assert resolved.exit_code == 0, resolved.output
    assert resolved.output.strip() == f"kept {keep}; superseded {lose}"
