"""The command line converts only the command it runs (``app_for``), and that command
is the same one the whole app would run."""

from __future__ import annotations

from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from memsync.runtime.app.cli import app
from memsync.runtime.app.cli.common import GLOBAL_OPTIONS_TAKING_VALUES, app_for, command_name

# typer carries its own copy of click, so its commands are told apart by what they
# have: a group has ``commands``, an option has ``is_flag``.


def _whole() -> Any:
    return typer.main.get_command(app)


def _described(command: Any) -> object:
    """What a person can type to a command and its subcommands, and what it runs."""
    described: dict[str, object] = {
        # typer wraps each callback anew: the function it wraps is what runs.
        "callback": getattr(command.callback, "__wrapped__", command.callback),
        "params": [(param.name, tuple(param.opts), param.required) for param in command.params],
    }
    if hasattr(command, "commands"):
        described["commands"] = {
            name: _described(sub) for name, sub in sorted(command.commands.items())
        }
    return described


def test_the_global_options_that_take_a_value_are_the_ones_it_skips() -> None:
    taking_values = {
        opt
        for param in _whole().params
        if param.param_type_name == "option" and not param.is_flag
        for opt in param.opts
    }

    assert taking_values == GLOBAL_OPTIONS_TAKING_VALUES


@pytest.mark.parametrize(
    ("arguments", "name"),
    [
        (["runs", "list"], "runs"),
        (["--config", "runs", "jobs", "list"], "jobs"),
        (["-c", "memsync.yaml", "--debug", "--log-level", "debug", "sync", "ws"], "sync"),
        (["--config=memsync.yaml", "state", "show", "ws"], "state"),
        (["--debug", "--", "config", "show"], "config"),
        (["--help"], None),
        ([], None),
        (["--config", "memsync.yaml"], None),
    ],
)
def test_the_command_name_is_the_first_argument_no_global_option_takes(
    arguments: list[str], name: str | None
) -> None:
    assert command_name(arguments) == name


def test_every_command_and_group_narrowed_is_the_one_the_whole_app_has() -> None:
    whole = _whole()

    for name, command in whole.commands.items():
        narrowed = typer.main.get_command(app_for(["--debug", name, "--help"]))

        assert list(narrowed.commands) == [name]
        assert _described(narrowed.commands[name]) == _described(command)
        assert _described(narrowed) | {"commands": None} == _described(whole) | {"commands": None}


@pytest.mark.parametrize("arguments", [["--help"], ["cnfig", "show"], []])
def test_without_a_known_command_the_whole_app_runs(arguments: list[str]) -> None:
    assert app_for(arguments) is app


def test_a_misspelt_command_is_answered_with_the_whole_list() -> None:
    result = CliRunner().invoke(app_for(["cnfig"]), ["cnfig"])

    assert result.exit_code == 2
    assert "config" in result.output
