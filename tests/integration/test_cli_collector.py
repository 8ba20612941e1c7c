"""A command starts with CPython's cyclic collector paused and collects again once it
has started (:mod:`memsync.runtime.app.entry`): every command that works on the store
(``sync``, ``serve``, ``worker``) does its work with the collector on."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from memsync.runtime.app.cli import app as cli_app
from memsync.runtime.app.entry import started
from tests.helpers import notes_config


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """The collector as :func:`memsync.runtime.app.entry.main` leaves it before a command
    runs; as it was afterwards."""
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


@pytest.mark.usefixtures("collector_paused")
def test_a_command_collects_again_once_its_store_is_open(tmp_path: Path, store_url: str) -> None:
    config = notes_config(tmp_path, store_url)

    listed = CliRunner().invoke(cli_app, ["--config", str(config), "runs", "list"])

    assert listed.exit_code == 0, listed.output
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0  # what start-up made is left out of collections


@pytest.mark.usefixtures("collector_paused")
def test_a_command_that_opens_no_store_leaves_the_collector_to_the_entry_point(
    tmp_path: Path, store_url: str
) -> None:
    config = notes_config(tmp_path, store_url)

    validated = CliRunner().invoke(cli_app, ["--config", str(config), "config", "validate"])

    assert validated.exit_code == 0, validated.output
    assert not gc.isenabled()  # the entry point's ``finally`` turns it on


def test_started_leaves_a_running_collector_alone() -> None:
    frozen = gc.get_freeze_count()

    started()

    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen
