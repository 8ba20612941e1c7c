"""No test is skipped in silence.

Loaded by ``tests/conftest.py``: every run ends with the skipped tests, grouped by
their reason, so a green run says what it did not drive. A test that CI can always
run (the admin page's browser test) skips through :func:`skip_unless_ci`: with
``MEMSYNC_CI=1`` (set by ``.ci/run``) a missing prerequisite fails the run instead.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import NoReturn

import pytest
from _pytest.terminal import TerminalReporter

__all__ = ["CI_ENV", "skip_unless_ci"]

CI_ENV = "MEMSYNC_CI"


def in_ci() -> bool:
    return os.environ.get(CI_ENV, "") not in ("", "0")


def skip_unless_ci(reason: str) -> NoReturn:
    """Skip the calling test or module for ``reason``; under ``MEMSYNC_CI=1`` fail it
    instead, since CI provides what it needs (a skip there would hide that it never
    ran). Callable at module level."""
    if in_ci():
        pytest.fail(f"{CI_ENV}=1, yet this test would be skipped: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def _where_and_why(report: pytest.TestReport | pytest.CollectReport) -> tuple[str, str]:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        _path, _line, reason = longrepr
        return report.nodeid or str(_path), str(reason).removeprefix("Skipped: ")
    return report.nodeid, str(longrepr)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: TerminalReporter) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    by_reason: defaultdict[str, list[str]] = defaultdict(list)
    for report in skipped:
        where, why = _where_and_why(report)
        by_reason[why].append(where)
    terminalreporter.section(f"skipped tests ({len(skipped)}), by reason", sep="-")
    for reason, tests in sorted(by_reason.items()):
        terminalreporter.write_line(f"{reason} ({len(tests)}):")
        for test in sorted(tests):
            terminalreporter.write_line(f"  {test}")
