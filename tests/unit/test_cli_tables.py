"""A table that fits, printed to a pipe, reads as rich prints it, without rich.

``print_table`` draws such a table itself (rich's import and layout cost a store command
about 100 M instructions, docs/benchmarks.md, "CLI start-up"); rich is the oracle here.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pytest
from rich.console import Console
from rich.table import Table

from memsync.runtime.app.cli import common
from memsync.runtime.app.cli.common import grid, print_table

TABLES: list[tuple[str, tuple[str, ...], list[list[str]], bool]] = [
    ("no rows yet", ("id", "kind", "status"), [], False),
    (
        "state of connector 'ws' (tenant 'default')",
        ("last run", "last success", "lag"),
        [["succeeded 2026-12-06T10:00:00+00:00", "never", "3h 2m"]],
        False,
    ),
    ("streams", ("stream", "checkpoint"), [["files", "none"], ["a\nbb\nccc", "—"]], False),
    ("ruled", ("key", "value"), [["a\nbb", "c"], ["x", "y"], ["", ""]], True),
    ("wide and combining", ("name", "text"), [["日本語", "e\u0301tude"], ["🙂", "ok"]], False),
]


def as_rich_prints(title: str, columns: Sequence[str], rows: list[list[str]], lines: bool) -> str:
    out = io.StringIO()
    table = Table(title=title, show_lines=lines)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    Console(file=out, width=200, soft_wrap=True).print(table)
    return out.getvalue()


@pytest.mark.parametrize(("title", "columns", "rows", "lines"), TABLES)
def test_a_table_that_fits_is_drawn_as_rich_draws_it_without_colour(
    title: str, columns: tuple[str, ...], rows: list[list[str]], lines: bool
) -> None:
    widths = common._column_widths(columns, rows)

    assert grid(title, columns, rows, widths, lines=lines) + "\n" == as_rich_prints(
        title, columns, rows, lines
    )


def test_a_cell_is_printed_as_it_is_not_as_markup() -> None:
    drawn = grid("t", ("error",), [["[bold]list[0] :smile:"]], [21])

    assert "│ [bold]list[0] :smile: │" in drawn.splitlines()


def test_a_table_that_fits_on_a_pipe_is_drawn_without_making_rich_s_console(
    capsys: pytest.CaptureFixture[str],
) -> None:
    standing_in = common._ConsoleOnFirstUse(soft_wrap=True)

    print_table("jobs", ("id", "kind"), [("1", "compile")], out=standing_in)  # type: ignore[arg-type]

    assert not standing_in.is_made
    assert capsys.readouterr().out == as_rich_prints(
        "jobs", ("id", "kind"), [["1", "compile"]], False
    )
