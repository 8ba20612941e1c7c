"""The log pipeline: one format for every logger, the bound context on every line,
library chatter at DEBUG."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from memsync.logcontext import bound_log_context
from memsync.runtime.app.observability import LogFormat, configure_logging, parse_log_level


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.usefixtures("restore_root")
def test_a_json_line_has_timestamp_level_event_logger_and_the_bound_context() -> None:
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, "info", stream=stream)

    with bound_log_context(tenant="acme", connector="gh", run_id="r-1"):
        logging.getLogger("memsync.sync").info("sync run started", extra={"kind": "incremental"})
    logging.getLogger("memsync.sync").info("outside the run")

    inside, outside = _lines(stream)
    assert {key: inside[key] for key in ("level", "event", "logger", "tenant", "run_id")} == {
        "level": "info",
        "event": "sync run started",
        "logger": "memsync.sync",
        "tenant": "acme",
        "run_id": "r-1",
    }
    assert (inside["connector"], inside["kind"]) == ("gh", "incremental")
    stamp = datetime.fromisoformat(str(inside["timestamp"]))
    assert stamp.utcoffset() == timedelta(0)
    assert "tenant" not in outside
    assert "run_id" not in outside


@pytest.mark.usefixtures("restore_root")
def test_library_info_lines_are_debug_lines() -> None:
    at_info, at_debug = io.StringIO(), io.StringIO()
    configure_logging(LogFormat.JSON, "info", stream=at_info)
    logging.getLogger("alembic.runtime.migration").info("Context impl SQLiteImpl.")
    logging.getLogger("apscheduler.scheduler").warning("a real problem")
    configure_logging(LogFormat.JSON, "debug", stream=at_debug)
    logging.getLogger("alembic.runtime.migration").info("Context impl SQLiteImpl.")

    assert [line["event"] for line in _lines(at_info)] == ["a real problem"]
    assert [(line["level"], line["event"]) for line in _lines(at_debug)] == [
        ("debug", "Context impl SQLiteImpl.")
    ]


@pytest.mark.usefixtures("restore_root")
def test_configuring_again_replaces_its_own_handler_only() -> None:
    other = logging.NullHandler()
    logging.getLogger().addHandler(other)
    first, second = io.StringIO(), io.StringIO()
    configure_logging(LogFormat.JSON, "info", stream=first)
    configure_logging(LogFormat.CONSOLE, "info", stream=second)
    logging.getLogger("memsync").warning("once")

    assert first.getvalue() == ""
    assert second.getvalue().count("once") == 1
    assert other in logging.getLogger().handlers


@pytest.mark.usefixtures("restore_root")
def test_uvicorn_lines_go_through_the_same_pipeline() -> None:
    stream = io.StringIO()
    configure_logging(LogFormat.JSON, "info", stream=stream)
    logging.getLogger("uvicorn.error").info(
        "Started server process [%d]", 42, extra={"color_message": "\x1b[1mStarted\x1b[0m"}
    )
    [line] = _lines(stream)
    assert (line["event"], line["logger"]) == ("Started server process [42]", "uvicorn.error")
    assert "color_message" not in line


def test_an_unknown_level_name_is_refused_naming_the_accepted_ones() -> None:
    assert parse_log_level("WARNING") == logging.WARNING
    with pytest.raises(ValueError, match="debug, info, warning, error, critical"):
        parse_log_level("loud")
